#!/usr/bin/env bash
# An elastic job ("workers": {"min": 1, "max": 3}) starts on the one worker there is, grows onto
# a second that joins while it runs (profiled, then a rebalance moves blocks onto it), and goes
# on when that worker leaves (its blocks move back before it goes); it ends with the same
# parameters as the same job on one fixed worker. A job that asks for more than there are still
# waits for its least. One worker growing to two gains on any machine of two cores or more (a
# third CPU worker on two cores would only share them, and the planner says so).
# Usage: test_elastic.sh PATH/TO/stagecraft
sc=${1:?usage: test_elastic.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

# heartbeats may be late on a loaded machine: a worker counts as dead after 10 s without one
start_coordinator coord "$work/state" --heartbeat-ms 200 --suspect-after 25 --dead-after 50 \
    --reprofile-ms 1000
start_worker a
wait_alive 20 1 || fail "worker a did not register"

# a slower build (sanitizers) trains a narrower model: what is checked is the order of events
width=64 steps=3000
[ "${STAGECRAFT_SLOW_BUILD:-0}" = 1 ] && width=16 steps=800
spec() { # NAME WORKERS STEPS
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 32, "layers": 4, "width": $width, "heads": 2, "cpu_kernels": "reference"},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 4, "schedule": "1f1b",
 "strategy": "hetero", "workers": $2, "steps": $3, "seed": 9, "checkpoint_every": 100}
JSON
}
history() { "$sc" status "$1" --json | jq -r '.transitions[] | "\(.to): \(.reason)"'; }
uses() { "$sc" status "$1" --json | jq -e ".stage_figures | map(.worker_ids[]) | index(\"$2\")" >/dev/null; }
id_of() { "$sc" workers --json | jq -r ".workers[] | select(.name == \"$1\") | .id"; }
n_workers() { "$sc" status "$1" --json | jq '[.stage_figures[].worker_ids[]] | unique | length'; }

# 1. a bad elastic spec is refused, naming the key
spec bad '{"min": 3, "max": 2}' 10 >"$work/bad.json"
out=$("$sc" submit "$work/bad.json" 2>&1)
[ $? -ne 0 ] && grep -q "max" <<<"$out" && pass "max below min is refused: $out" || fail "bad spec: $out"

# 2. it starts on the one worker there is, then grows onto a second
spec elastic '{"min": 1, "max": 3}' $steps >"$work/elastic.json"
"$sc" submit "$work/elastic.json" >/dev/null || fail "submit"
job="job-1"
wait_for 120 is_state $job running || fail "$job is $(job_state $job): $(field $job reason)"
[ "$(n_workers $job)" -eq 1 ] && pass "it starts on the 1 worker there is" ||
    fail "it runs on $(n_workers $job) workers"
start_worker c
c_pid=$worker_pid
wait_alive 20 2 || fail "worker c did not register"
c=$(id_of c)
grown() { uses $job "$c" && is_state $job running; }
wait_for 120 grown && pass "it grew onto the worker that joined ($(n_workers $job) workers)" ||
    fail "$job does not use c: $(history $job)"
history $job | grep -q "^rebalancing:" && pass "by a rebalance" || fail "history: $(history $job)"

# 3. the worker leaves: its blocks move to the other first, and the job goes on without it,
# losing no step
had=$(history $job | grep -c "^rebalancing:")
kill -TERM "$c_pid"
wait "$c_pid"
rc=$?
[ $rc -eq 0 ] && grep -q "blocks handed over; leaving" "$work/c.log" &&
    pass "c stayed until its blocks were taken, then left (exit 0)" ||
    fail "c exited $rc: $(tail -n 5 "$work/c.log")"
left() { ! uses $job "$c" && is_state $job running; }
wait_for 120 left && pass "the job goes on on $(n_workers $job) workers" ||
    fail "$job is $(job_state $job): $(history $job)"
h=$(history $job)
[ "$(grep -c "^rebalancing:" <<<"$h")" -gt "$had" ] &&
    grep -q "^rebalancing: worker $c ('c') leaves: its blocks move to the others" <<<"$h" &&
    ! grep -q "^recovering" <<<"$h" &&
    pass "by a rebalance, without recovering from a checkpoint" || fail "history: $h"
wait_for 500 is_state $job succeeded || fail "$job is $(job_state $job): $(field $job reason)"

# 4. the same job on one fixed worker ends with the same parameters (within rounding: the
# copies of a replicated stage sum their gradients in another order)
spec fixed 1 $steps >"$work/fixed.json"
"$sc" submit "$work/fixed.json" >/dev/null || fail "submit fixed"
wait_for 500 is_state job-2 succeeded || fail "job-2 is $(job_state job-2): $(field job-2 reason)"
params() {
    local s=0 f n
    while f="$work/wstate/checkpoints/$1/stage$s-step$steps.ckpt" && [ -f "$f" ]; do
        n=$(od -An -t u8 -j 48 -N 8 "$f" | tr -d ' ')
        dd if="$f" bs=4 skip=18 count="$n" status=none
        s=$((s + 1))
    done
}
params job-1 >"$work/p1"
params job-2 >"$work/p2"
rel=$(paste <(od -An -v -t f4 -w4 "$work/p1") <(od -An -v -t f4 -w4 "$work/p2") |
    awk '{ d = $1 - $2; dd += d * d; aa += $1 * $1; n++ }
         END { if (n == 0 || aa == 0) print "none"; else printf "%.3g\n", sqrt(dd / aa) }')
[ -s "$work/p1" ] && [ "$(stat -c %s "$work/p1")" = "$(stat -c %s "$work/p2")" ] &&
    awk -v r="$rel" 'BEGIN { exit !(r != "none" && r + 0 <= 1e-6) }' &&
    pass "the elastic job ends with the fixed job's parameters (relative L2 $rel)" ||
    fail "parameters differ: relative L2 $rel"

# 5. an elastic job waits for its least
spec waits '{"min": 3, "max": 4}' 10 >"$work/waits.json"
"$sc" submit "$work/waits.json" >/dev/null || fail "submit waits"
wait_for 30 grep -q "waiting for at least 3 worker(s): 1 alive and free" <(field job-3 reason) &&
    pass "a job whose least is not there waits: $(field job-3 reason)" ||
    fail "job-3 is $(job_state job-3): $(field job-3 reason)"
"$sc" cancel job-3 >/dev/null

finish
