#!/usr/bin/env bash
# A link that slows down mid-job is seen and acted on: on the lab (deploy/lab), two servers with
# one worker each train a two-stage job with "rebalance": "auto"; server a's uplink (both
# directions) is cut from 1gbit to 4mbit (tc tbf) while it runs. The activations from a's worker
# to b's and the gradients back now crawl: the job rebalances onto a plan without that transfer,
# its history naming the link with its measured and expected speeds, and the links' measured
# speed falls to about the set rate (the messages are four times tbf's burst, which passes at line
# speed, so at most about 4/3 of it). Restored, the job moves back onto both workers (checked
# with STAGECRAFT_TIMING_TESTS=1: that move's gain rests on the CPU shares). Then a second job has
# the uplink cut once it is planned, before its first step: its transfers never see the link
# fast, but its first iterations are far over the prediction, so the coordinator probes its
# links again and moves it off the slow one.
# Needs root, iproute2 (tc with the tbf qdisc), jq and a cgroup CPU controller: skipped (exit
# 77) without them.
# Usage: test_link_speed_lab.sh PATH/TO/stagecraft
sc=${1:?usage: test_link_speed_lab.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
need_lab
# A sanitizer or unoptimised build (STAGECRAFT_SLOW_BUILD) trains its GPT at 10-15 s a step on
# these shares, too slow for the cut and the move to happen within the test's deadlines; it runs
# there only when asked (STAGECRAFT_TIMING_TESTS=1). test_link_speed covers the measuring there.
need_fast_build

export STAGECRAFT_LAB_RUN=$work/run
name=k$((RANDOM % 10000))
subnet=198.19.$((100 + RANDOM % 150)).0/24
cat >"$work/lab.json" <<JSON
{"format": "stagecraft-lab", "version": 1, "name": "$name", "subnet": "$subnet",
 "servers": [{"name": "a", "rate": "1gbit"}, {"name": "b", "rate": "1gbit"}],
 "workers": [{"name": "w0", "server": "a", "cpu": 0.5},
             {"name": "w1", "server": "b", "cpu": 0.5}]}
JSON
down_on_exit() {
    [ "$failures" -ne 0 ] && grep -h "rebalance\|link\|left out" "$STAGECRAFT_LAB_RUN/$name/logs/coordinator.log" | tail -n 40
    "$lab" down "$name" >/dev/null 2>&1
    cleanup
}
trap down_on_exit EXIT
"$lab" up "$work/lab.json" --bin "$sc" >"$work/up.log" 2>&1 || { fail "lab up: $(cat "$work/up.log")"; exit 1; }
eval "$("$lab" env "$name")"
wait_alive 60 2 || fail "workers: $("$sc" workers)"

# a micro-batch's activations: 8 samples x 128 positions x 64 floats = 256 KiB, four times the burst
# tbf lets through at line speed (64 KiB at rates below 52 Mbit/s)
cat >"$work/job.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "link",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 128, "layers": 4, "width": 64, "heads": 2, "cpu_kernels": "reference"},
 "data": {"kind": "synthetic"}, "batch_size": 32, "microbatches": 4, "schedule": "1f1b",
 "strategy": "hetero", "workers": 2, "steps": 400, "seed": 7}
JSON
history() { "$sc" status "$1" --json | jq -r '.transitions[] | "\(.to): \(.reason)"'; }
rebalances() { history "$1" | grep -c "^rebalancing:"; }
id_of() { "$sc" workers --json | jq -r ".workers[] | select(.name == \"$1\") | .id"; }
stages() { "$sc" status "$1" --json | jq '.stage_figures | length'; }
# link JOB FROM TO: that link's figures in status --json
link() { "$sc" status "$1" --json | jq -c ".links[] | select(.from == \"$2\" and .to == \"$3\")"; }
measured() { [ -n "$(link "$@")" ]; }

"$sc" submit "$work/job.json" >/dev/null || fail "submit"
w0=$(id_of w0)
w1=$(id_of w1)
wait_for 300 measured job-1 "$w0" "$w1" ||
    fail "no link $w0 -> $w1 measured: job-1 is $(job_state job-1) on $(stages job-1) stages: $(history job-1)"
before=$(link job-1 "$w0" "$w1")
echo "before the cut: $before"
[ "$(stages job-1)" -eq 2 ] || fail "job-1 runs $(stages job-1) stages, not 2"
had=$(rebalances job-1)

"$lab" set --lab "$name" a rate=4mbit >/dev/null || fail "lab set a rate=4mbit"
cut=$(field job-1 step)
rate=500000 # bytes/s: 4 Mbit/s
more_than() { [ "$(rebalances "$1")" -gt "$2" ]; }
wait_for 400 more_than job-1 "$had" || fail "job-1 did not rebalance: $(history job-1)"
why=$(history job-1 | grep '^rebalancing:' | sed -n "$((had + 1))p")
echo "$why"
# (either way: the planner may put stage 0 on either worker)
grep -Eq "^rebalancing: link ($w0 \('w0'\) -> $w1 \('w1'\)|$w1 \('w1'\) -> $w0 \('w0'\)) \((activations of stage 0|gradients of stage 1)\) at [0-9.e-]*x its expected speed \([0-9.e+]* bytes/s measured, [0-9.e+]* expected" <<<"$why" &&
    pass "the history names the slowed link (cut at step $cut)" || fail "history: $(history job-1)"
wait_for 120 is_state job-1 running || fail "job-1 is $(job_state job-1): $(history job-1)"
# the links' last figures (the job may no longer use them): both directions about the set rate
for dir in "$w0 $w1" "$w1 $w0"; do
    got=$(link job-1 $dir | jq -r .measured_bytes_per_s)
    awk -v g="$got" -v r=$rate 'BEGIN { exit !(g > 0.5 * r && g < 1.8 * r) }' &&
        pass "link ${dir/ / -> }: measured $got bytes/s, about the set $rate (before the cut: $(jq -r .measured_bytes_per_s <<<"$before") one way)" ||
        fail "link ${dir/ / -> }: measured '$got' bytes/s after a cut to $rate"
done
pass "after the move: $(stages job-1) stage(s) on $("$sc" status job-1 --json | jq -c '[.stage_figures[].worker_ids[]]')"

# restored: the workers are probed again (every 10 s: the one the plan left out, and the one
# whose link is under suspicion while it trains), the link is fast again, and the job moves back
# onto both. Whether two stages then gain the 10% a move needs rests on the CPU shares, which
# other work on a small machine upsets: checked with STAGECRAFT_TIMING_TESTS=1 only.
if [ "${STAGECRAFT_TIMING_TESTS:-0}" != 1 ]; then
    echo "(the move back is checked with STAGECRAFT_TIMING_TESTS=1)"
    "$lab" set --lab "$name" a rate=1gbit >/dev/null || fail "lab set a rate=1gbit"
else
    had=$(rebalances job-1)
    "$lab" set --lab "$name" a rate=1gbit >/dev/null || fail "lab set a rate=1gbit"
    two_again() { more_than job-1 "$had" && is_state job-1 running && [ "$(stages job-1)" -eq 2 ]; }
    wait_for 300 two_again &&
        pass "its uplink restored, the job moves back to 2 stages" ||
        fail "no move back: $(stages job-1) stage(s), $(history job-1)"
    # (why: mostly the left-out worker's new probe; the worker that ran alone may have been seen
    # faster first, its busy time inflated while its uplink crawled, which is a reason as good)
    back=$(history job-1 | grep '^rebalancing:' | sed -n "$((had + 1))p")
    echo "moved back: $(cut -c 1-200 <<<"$back")..."
fi
"$sc" cancel job-1 >/dev/null
wait_for 60 is_state job-1 cancelled || fail "job-1 is $(job_state job-1) after cancel"

# A link slowed between the probes and the training: the transfers' figures take the slow speed
# as their reference from the first messages on and see no change, but the run's first
# iterations are far over the prediction; the coordinator then probes its links once more,
# finds a's uplink slower than the model, and moves the job off it.
sed 's/"name": "link"/"name": "late-cut"/' "$work/job.json" >"$work/job2.json"
"$sc" submit "$work/job2.json" >/dev/null || fail "submit job-2"
planned_or_later() { case $(job_state job-2) in planned | running) return 0 ;; *) return 1 ;; esac; }
wait_for 300 planned_or_later || fail "job-2 never planned: $(history job-2)"
"$lab" set --lab "$name" a rate=4mbit >/dev/null || fail "lab set a rate=4mbit (job-2)"
at=$(field job-2 step)
[ "$("$sc" status job-2 --json | jq '.plan.stages | length')" -eq 2 ] ||
    fail "job-2 was planned on $(stages job-2) stage(s), not 2: $(history job-2)"
wait_for 400 more_than job-2 0 || fail "job-2 did not rebalance: $(history job-2)"
why=$(history job-2 | grep '^rebalancing:' | head -n 1)
echo "$why"
grep -Eq "^rebalancing: .*worker ($w0 \('w0'\)|$w1 \('w1'\)) now probes its link at [0-9.e+]* bytes/s \([0-9.e+]* in the speed model\)" <<<"$why" &&
    pass "a link slowed before the training (cut at step ${at:-0}): probed again, the job moved" ||
    fail "job-2's rebalance does not name the probe: $(history job-2)"
wait_for 120 is_state job-2 running || fail "job-2 is $(job_state job-2): $(history job-2)"
[ "$(stages job-2)" -eq 1 ] && pass "job-2 runs on one worker after the move" ||
    fail "job-2 runs $(stages job-2) stage(s) after the move"
"$sc" cancel job-2 >/dev/null
finish
