#!/usr/bin/env bash
# Following a job: `submit --follow` and `status JOB --follow` print each state change as it
# happens and end with the job's outcome: exit 0 only when it succeeded, 1 when it was
# cancelled (or failed), 2 for bad usage; `--json` prints one JSON object a line.
# Usage: test_follow.sh PATH/TO/stagecraft
sc=${1:?usage: test_follow.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

start_coordinator coord "$work/state" --heartbeat-ms 200
start_worker a
start_worker b
wait_alive 20 2 || fail "workers did not register"

job() {
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 8, "layers": 2, "width": 16, "heads": 2},
 "data": {"kind": "synthetic"}, "batch_size": 4, "microbatches": 2, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": $2, "seed": 3,
 "optimizer": {"kind": "adamw", "lr": 0.003}}
JSON
}

# 1. submit --follow: the states in order, exit 0 on success
job short 30 >"$work/short.json"
"$sc" submit "$work/short.json" --follow >"$work/follow1.out" 2>&1
rc=$?
states=$(awk '$3 ~ /^[a-z]+$/ && $2 == "s" { print $3 }' "$work/follow1.out" | tr '\n' ' ')
[ $rc -eq 0 ] && [ "$states" = "submitted profiling planned running succeeded " ] &&
    grep -q '^submitted job-1$' "$work/follow1.out" &&
    pass "submit --follow printed every state ($states) and exited 0" ||
    fail "submit --follow: rc $rc, states '$states': $(cat "$work/follow1.out")"

# 2. status --follow of an ended job returns at once with its outcome
"$sc" status job-1 --follow >"$work/follow2.out" 2>&1 && grep -q 'succeeded' "$work/follow2.out" &&
    pass "status --follow of a succeeded job exits 0" || fail "$(cat "$work/follow2.out")"

# 3. a cancelled job: the follower sees it and exits 1; --json lines are JSON
job long 1000000 >"$work/long.json"
"$sc" submit "$work/long.json" >/dev/null || fail "submit long"
"$sc" status job-2 --follow --json >"$work/follow3.out" 2>&1 &
follow_pid=$!
pids+=("$follow_pid")
wait_for 60 is_state job-2 running || fail "job-2 did not start: $(job_state job-2)"
# the running job's stages carry their place in the plan (blocks, workers, predicted compute)
st=$("$sc" status job-2 --json)
[ "$(jq '.stage_figures | length' <<<"$st")" -eq "$(jq '.plan.stages | length' <<<"$st")" ] &&
    jq -e '[.stage_figures[] as $f | .plan.stages[$f.stage] as $p |
            ($f.first_block == $p.first_block and $f.last_block == $p.last_block and
             $f.worker_ids == $p.worker_ids and ($f.worker_ids | length) >= 1 and
             $f.predicted_compute_s == $p.compute_s)] | all' <<<"$st" >/dev/null &&
    pass "status --json gives each stage's blocks, workers and predicted compute" ||
    fail "stage figures: $(jq -c .stage_figures <<<"$st")"
wait_for 30 grep -q '"state":"running"' "$work/follow3.out" || fail "the follower did not see running"
"$sc" cancel job-2 --reason "test over" >/dev/null || fail "cancel"
wait "$follow_pid"
rc=$?
[ $rc -eq 1 ] && grep -q '"state":"cancelled"' "$work/follow3.out" &&
    pass "a cancelled job ends its follower with exit 1" || fail "rc $rc: $(cat "$work/follow3.out")"
bad=$(grep -v '^$' "$work/follow3.out" | while read -r l; do jq -e . >/dev/null 2>&1 <<<"$l" || echo "$l"; done)
[ -z "$bad" ] && pass "--follow --json prints one JSON object a line" || fail "not JSON: $bad"
# a figure not measured yet is null, never a zero that looks measured
zeros=$(grep '"step"' "$work/follow3.out" | jq -c 'select(.loss == 0 or .samples_per_s == 0)')
[ -z "$zeros" ] && pass "progress lines carry no unmeasured zeros" || fail "zeros: $zeros"
grep -E 'loss 0\.0000|  0\.0 samples/s' "$work/follow1.out" &&
    fail "a progress line shows a zero loss or rate" || pass "progress lines show '-' until measured"

# 4. usage
"$sc" status --follow >/dev/null 2>&1
[ $? -eq 2 ] && pass "status --follow without a job is bad usage" || fail "status --follow without a job"
"$sc" cancel job-2 --follow >/dev/null 2>&1
[ $? -eq 2 ] && pass "cancel refuses --follow" || fail "cancel --follow was taken"
"$sc" status job-99 --follow >"$work/follow4.out" 2>&1
[ $? -eq 2 ] && grep -q 'job-99' "$work/follow4.out" && pass "following an unknown job says so (exit 2)" ||
    fail "unknown job: $(cat "$work/follow4.out")"

finish
