#!/usr/bin/env bash
# Profiling failures that retrying cannot cure end the job instead of looping: a model whose
# parameters cannot fit fails at once as not fitting, from the memory model, before profiling;
# any other failure fails the job after 5 failed
# profiling rounds in a row, naming the last error. A batch larger than the workers' micro-batch
# limit with an open micro-batch count is profiled at sizes they take.
# Usage: test_profile_failures.sh PATH/TO/stagecraft
sc=${1:?usage: test_profile_failures.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

# a stopped worker stays alive for 300 heartbeats (60 s): its profiling calls time out after
# 5 s (long enough for the sanitizer build to profile part 3's micro-batches of 4,096 samples)
start_coordinator coord "$work/state" --heartbeat-ms 200 --suspect-after 300 --dead-after 400 \
    --profile-timeout-ms 5000
start_worker a
start_worker b
b_pid=$worker_pid
wait_alive 20 2 ||
    fail "workers did not register"

# 1. fc0 holds 2^48 parameters (the largest widths the model format takes): the memory model
#    refuses it before any worker profiles it (test_model_too_big.sh)
cat >"$work/huge.json" <<'JSON'
{"format": "stagecraft-job", "version": 1, "name": "huge",
 "model": {"kind": "mlp", "sizes": [16777216, 16777216, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2,
 "workers": ["a"], "steps": 5}
JSON
"$sc" submit "$work/huge.json" >/dev/null || fail "submit huge"
wait_for 15 is_state job-1 failed && pass "a model that cannot be allocated fails the job" ||
    fail "job-1 is $(job_state job-1): $("$sc" status job-1 | sed -n 2p)"
why=$("$sc" status job-1 | sed -n 2p)
echo "$why" | grep -q "the model does not fit on the 1 worker(s) chosen: .* GB to train with adamw" &&
    pass "the reason says the model does not fit and why" || fail "job-1's reason: $why"
[ "$("$sc" status job-1 | grep -c ' s  profiling ')" -eq 0 ] && pass "never profiled" ||
    fail "job-1 was profiled $("$sc" status job-1 | grep -c ' s  profiling ') times"

# 2. a worker that never answers: 5 failed rounds, then the job fails with the last error
cat >"$work/small.json" <<'JSON'
{"format": "stagecraft-job", "version": 1, "name": "small",
 "model": {"kind": "mlp", "sizes": [32, 64, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2,
 "strategy": "minmax", "workers": ["b"], "steps": 5}
JSON
kill -STOP "$b_pid"
"$sc" submit "$work/small.json" >/dev/null || fail "submit small"
wait_for 80 is_state job-2 failed && pass "repeated profiling failures fail the job" ||
    fail "job-2 is $(job_state job-2): $("$sc" status job-2 | sed -n 2p)"
why=$("$sc" status job-2 | sed -n 2p)
echo "$why" | grep -q "profiling failed 5 times in a row" && echo "$why" | grep -q "DEADLINE_EXCEEDED" &&
    pass "the reason counts the rounds and names the last error" || fail "job-2's reason: $why"
[ "$("$sc" status job-2 | grep -c ' s  profiling ')" -eq 5 ] && pass "profiled 5 times" ||
    fail "job-2 was profiled $("$sc" status job-2 | grep -c ' s  profiling ') times"
kill -CONT "$b_pid"
"$sc" workers >/dev/null || fail "the coordinator stopped answering"

# 3. a batch above the workers' micro-batch limit (4096 samples) with an open micro-batch count
#    is profiled at sizes the workers take (up to the limit), not refused, and trains
cat >"$work/wide.json" <<'JSON'
{"format": "stagecraft-job", "version": 1, "name": "wide",
 "model": {"kind": "mlp", "sizes": [8, 16, 4]},
 "data": {"kind": "synthetic"}, "batch_size": 16384, "microbatches": "auto",
 "workers": ["a"], "steps": 2}
JSON
"$sc" submit "$work/wide.json" >/dev/null || fail "submit wide"
wait_for 60 is_state job-3 succeeded && pass "a batch of 16384 with an open count trains" ||
    fail "job-3 is $(job_state job-3): $("$sc" status job-3 | sed -n 2p)"
finish
