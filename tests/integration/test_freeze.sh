#!/usr/bin/env bash
# Freezing (the job option "freeze"): the coordinator compares each block's gradient norm over
# intervals, freezes a growing prefix of blocks, and moves the job to a plan where the frozen
# blocks run forward only, through the rebalancing path; the history says which blocks froze
# and why; nothing un-freezes; the job ends with a loss close to the same job trained without
# freezing; a job that freezes nothing ends with the reference's parameters bit for bit; the
# default cap on tau freezes only blocks that changed by under 10%.
# Usage: test_freeze.sh PATH/TO/stagecraft
sc=${1:?usage: test_freeze.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

# heartbeats may be late on a loaded machine: a worker counts as dead after 10 s without one
start_coordinator coord "$work/state" --heartbeat-ms 200 --suspect-after 25 --dead-after 50
start_worker a
start_worker b
wait_alive 20 2 || fail "workers did not register"

# a slower build (sanitizers) trains a narrower model: what is checked is the order of events
width=64
[ "${STAGECRAFT_SLOW_BUILD:-0}" = 1 ] && width=16
spec() { # NAME FREEZE
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 32, "layers": 6, "width": $width, "heads": 2, "cpu_kernels": "reference"},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 4, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": 400, "seed": 5, "checkpoint_every": 100,
 "rebalance": "off", "freeze": $2}
JSON
}
history() { "$sc" status "$1" --json | jq -r '.transitions[] | "\(.to): \(.reason)"'; }
loss_of() { "$sc" status "$1" --json | jq -r .loss; }
ckpt=$work/wstate/checkpoints

# 1. the reference, and the same job with freezing asked for but never reached (an interval
#    as long as the job): the option alone changes nothing, bit for bit
spec ref '"off"' >"$work/ref.json"
spec late '{"interval": 400}' >"$work/late.json"
"$sc" submit "$work/ref.json" >/dev/null || fail "submit ref"
wait_for 280 is_state job-1 succeeded || fail "job-1 is $(job_state job-1): $(field job-1 reason)"
"$sc" submit "$work/late.json" >/dev/null || fail "submit late"
wait_for 280 is_state job-2 succeeded || fail "job-2 is $(job_state job-2): $(field job-2 reason)"
same=0
for f in "$ckpt"/job-1/stage*-step400.ckpt; do
    cmp -s "$f" "$ckpt/job-2/$(basename "$f")" && same=$((same + 1))
done
[ $same -eq 2 ] && pass "a job whose freezing never comes ends with the reference's parameters" ||
    fail "job-2 differs from job-1 ($same of 2 stages equal)"

# 2. freezing every 40 steps, tau the median without a cap (the training here changes every
#    block by 20-40% an interval): a prefix freezes, the job moves to forward-only blocks
spec frozen '{"interval": 40, "percentile": 50, "max_change": 1000}' >"$work/frozen.json"
"$sc" submit "$work/frozen.json" >/dev/null || fail "submit frozen"
wait_for 280 is_state job-3 succeeded || fail "job-3 is $(job_state job-3): $(field job-3 reason)"
h=$(history job-3)
grep -q "^rebalancing: freezing blocks 0-[0-9]*: their gradient norms changed less than tau .* over steps [0-9]*-[0-9]*" <<<"$h" &&
    grep -q "^running: rebalanced after step [0-9]* to [0-9] stage(s), blocks 0-[0-9]* frozen" <<<"$h" &&
    pass "the history says which blocks froze, why, and the move" || fail "history of job-3: $h"
# the frozen prefix only grows, and never takes the whole model (8 blocks)
prefixes=$(sed -n 's/^running: rebalanced after step [0-9]* to [0-9] stage(s), blocks 0-\([0-9]*\) frozen.*/\1/p' <<<"$h")
prev=-1 grows=1
for k in $prefixes; do
    [ "$k" -gt "$prev" ] && [ "$k" -lt 7 ] || grows=0
    prev=$k
done
[ -n "$prefixes" ] && [ $grows -eq 1 ] && pass "the frozen prefix grew: blocks 0-$(tr '\n' ' ' <<<"$prefixes")" ||
    fail "frozen prefixes: '$prefixes'"
# the frozen blocks ran forward only: the workers logged it with their stages
grep -q "job-3.*frozen" "$work/a.log" "$work/b.log" && pass "the workers ran the frozen blocks forward only" ||
    fail "no worker ran frozen blocks: $(grep -h 'job-3' "$work/a.log" "$work/b.log" | tail -n 5)"
l_ref=$(loss_of job-1) l_frz=$(loss_of job-3)
awk -v a="$l_frz" -v b="$l_ref" 'BEGIN { d = (a - b) / b; exit !(d < 0.05 && d > -0.05) }' &&
    pass "final loss $l_frz within 5% of the unfrozen job's $l_ref" ||
    fail "final loss $l_frz against $l_ref without freezing"

# 3. the default policy caps tau at a 10% change: whatever it freezes changed by less than that
#    (the width-64 training here changes every block by 20-40% an interval and freezes nothing)
spec capped '{"interval": 40}' >"$work/capped.json"
"$sc" submit "$work/capped.json" >/dev/null || fail "submit capped"
wait_for 280 is_state job-4 succeeded || fail "job-4 is $(job_state job-4): $(field job-4 reason)"
taus=$(history job-4 | sed -n 's/^rebalancing: freezing blocks .* tau \([0-9.e+-]*\) (.*(block [0-9]*: \([0-9.e+-]*\)).*/\1 \2/p')
capped=1
while read -r tau r; do
    [ -n "$tau" ] || continue
    # the history prints both to 3 significant digits: a change just under tau reads equal
    awk -v t="$tau" -v r="$r" 'BEGIN { exit !(t <= 0.1 && r <= t) }' || capped=0
done <<<"$taus"
[ $capped -eq 1 ] && pass "the default cap: $(grep -c . <<<"$taus") freeze(s), each of a block that changed by under 10%" ||
    fail "a freeze over the cap: $(history job-4 | grep freezing)"

finish
