#!/usr/bin/env bash
# A worker stopped by its operator (SIGTERM) tells the coordinator it leaves: it is dead at once
# (not after --dead-after missed heartbeats, set here to 200 s so that only leaving can make it
# so within the test), its job goes to recovering saying why, and the worker started again
# under its name brings the job back to running.
# Usage: test_worker_leave.sh PATH/TO/stagecraft
sc=${1:?usage: test_worker_leave.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

start_coordinator coord "$work/state" --heartbeat-ms 200 --dead-after 1000
start_worker a
a_pid=$worker_pid
start_worker b
wait_alive 20 2 || fail "workers did not register"

cat >"$work/job.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "leave",
 "model": {"kind": "mlp", "sizes": [32, 64, 64, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "stages": 2, "steps": 100000000, "seed": 3,
 "checkpoint_every": 50}
JSON
"$sc" submit "$work/job.json" >/dev/null || fail "submit"
wait_for 60 is_state job-1 running || fail "job-1 did not start: $(job_state job-1)"

kill -TERM "$a_pid"
wait "$a_pid"
rc=$?
[ $rc -eq 0 ] && pass "a worker stopped by SIGTERM exits 0" || fail "the stopped worker exited $rc"
grep -q "the coordinator knows this worker leaves" "$work/a.log" &&
    pass "the coordinator acknowledged the leave" || fail "no acknowledgement: $(tail -n 5 "$work/a.log")"
wait_for 30 worker_is a dead && pass "the worker that left is dead at once" ||
    fail "worker a is $(worker_state a)"
wait_for 30 is_state job-1 recovering &&
    "$sc" status job-1 --json | grep -q "left: its process was stopped" &&
    pass "its job is recovering because the worker left" ||
    fail "job-1 is $(job_state job-1): $(field job-1 reason)"

start_worker a
wait_for 60 is_state job-1 running && pass "the worker started again brings the job back" ||
    fail "job-1 is $(job_state job-1): $(field job-1 reason)"
"$sc" cancel job-1 >/dev/null

finish
