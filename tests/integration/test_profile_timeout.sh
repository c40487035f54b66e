#!/usr/bin/env bash
# A worker that stops answering in the middle of profiling (the job asks for it by name): the job goes back to submitted with
# the reason recorded, the coordinator stays up, and the job is planned once the worker answers.
# Usage: test_profile_timeout.sh PATH/TO/stagecraft
sc=${1:?usage: test_profile_timeout.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

# profiling may take 0.5 s; a silent worker is suspect only after 90 heartbeats (18 s: a
# suspect worker is not profiled, and on a busy machine the submission can come seconds after
# the stop) and dead after 100 (20 s)
start_coordinator coord "$work/state" --heartbeat-ms 200 --suspect-after 90 --dead-after 100 \
    --profile-timeout-ms 500
start_worker a
start_worker b
b_pid=$worker_pid
wait_alive 20 2 ||
    fail "workers did not register"

cat >"$work/job.json" <<'JSON'
{"format": "stagecraft-job", "version": 1, "name": "mlp",
 "model": {"kind": "mlp", "sizes": [32, 64, 64, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2,
 "strategy": "minmax", "workers": ["b"], "steps": 5}
JSON
kill -STOP "$b_pid"
"$sc" submit "$work/job.json" >/dev/null || fail "submit"
reason_has() { "$sc" status job-1 | grep -q "$1"; }
wait_for 15 reason_has "did not profile" && pass "the silent worker is named in the job's reason" ||
    fail "no profile failure reported: $("$sc" status job-1 | sed -n 2p)"
"$sc" status job-1 | grep -q "DEADLINE_EXCEEDED" || fail "the reason does not say it timed out"
st=$(job_state job-1)
[ "$st" = submitted ] || [ "$st" = profiling ] || fail "job-1 is $st while the worker is stopped"
"$sc" workers >/dev/null || fail "the coordinator stopped answering"
kill -CONT "$b_pid"
wait_for 30 is_state job-1 succeeded && pass "planned and trained once the worker answers again" ||
    fail "job-1 is $(job_state job-1)"
finish
