#!/usr/bin/env bash
# One job's silent worker does not hold up other jobs: a job whose worker is stopped (SIGSTOP)
# while it profiles waits for that worker's answer (up to --profile-timeout-ms), and meanwhile a
# job on other workers is profiled, planned and trained to success. Once the stopped worker
# continues, its job trains too.
# Usage: test_job_isolation.sh PATH/TO/stagecraft
sc=${1:?usage: test_job_isolation.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

# the stopped worker is suspect only after 200 missed heartbeats (40 s: a suspect worker takes no
# new job, and on a busy machine the submission can come seconds after the stop) and dead after
# 300 (60 s), and its Profile call waits up to 60 s: until one gives up its job stays in profiling
start_coordinator coord "$work/state" --heartbeat-ms 200 --suspect-after 200 --dead-after 300 \
    --profile-timeout-ms 60000
start_worker a
start_worker b
b_pid=$worker_pid
wait_alive 20 2 ||
    fail "workers did not register"

job() {
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "mlp", "sizes": [32, 64, 64, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2,
 "strategy": "minmax", "workers": ["$1"], "steps": 5}
JSON
}
job b >"$work/b.json"
job a >"$work/a.json"
kill -STOP "$b_pid"
"$sc" submit "$work/b.json" >/dev/null || fail "submit b"
wait_for 10 is_state job-1 profiling || fail "job-1 is $(job_state job-1), not profiling"
"$sc" submit "$work/a.json" >/dev/null || fail "submit a"
# job-1 cannot leave profiling before its worker answers or the call gives up (gRPC's connect
# timeout, about 20 s, or the 60 s profile timeout): job-2 must succeed before that
settled() { is_state job-2 succeeded || ! is_state job-1 profiling; }
wait_for 60 settled
st1=$(job_state job-1) st2=$(job_state job-2)
[ "$st2" = succeeded ] && [ "$st1" = profiling ] &&
    pass "job-2 trained on worker a while job-1 waited for stopped worker b" ||
    fail "job-2 is $st2 ($("$sc" status job-2 | sed -n 2p)) while job-1 is $st1 ($("$sc" status job-1 | sed -n 2p))"
kill -CONT "$b_pid"
wait_for 60 is_state job-1 succeeded && pass "job-1 trained once its worker continued" ||
    fail "job-1 is $(job_state job-1): $("$sc" status job-1 | sed -n 2p)"
finish
