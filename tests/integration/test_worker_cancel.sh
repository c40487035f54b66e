#!/usr/bin/env bash
# A worker's long profile can be cancelled (STAGECRAFT_WORKER_FAULTS=slow-profile: its first
# profile measures for an hour unless cancelled, as a huge model's would):
#  1. a job cancelled while its worker profiles leaves the worker free ("activity": "idle" in
#     `stagecraft workers --json`) within a bound, and the worker's next job runs;
#  2. a Profile call that times out is cancelled on the worker (the coordinator's STOP), which is
#     free for the job's next try at once, and the job succeeds;
#  3. SIGTERM stops a profiling worker within a few seconds (waited on its PID, with a bound).
# Usage: test_worker_cancel.sh PATH/TO/stagecraft
sc=${1:?usage: test_worker_cancel.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

# a profile of this small model takes well under a second; 8 s leaves room for a busy machine
start_coordinator coord "$work/state" --heartbeat-ms 200 --profile-timeout-ms 8000
STAGECRAFT_WORKER_FAULTS=slow-profile start_worker w
w_pid=$worker_pid
STAGECRAFT_WORKER_FAULTS=slow-profile start_worker v
STAGECRAFT_WORKER_FAULTS=slow-profile start_worker u
u_pid=$worker_pid
wait_alive 30 3 || fail "workers did not register: $("$sc" workers)"

# activity NAME: what worker NAME says it does (idle, profiling, assigned, training, ...)
activity() {
    "$sc" workers --json | tr -d ' \n' | sed 's/{"id"/\n{"id"/g' | grep "\"name\":\"$1\"" |
        sed -n 's/.*"activity":"\([a-z]*\)".*/\1/p'
}
activity_is() { [ "$(activity "$1")" = "$2" ]; }
job_on() { # NAME WORKER: submits a small job held to WORKER; prints its id
    cat >"$work/$1.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "mlp", "sizes": [32, 64, 64, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2,
 "strategy": "minmax", "workers": ["$2"], "steps": 5}
JSON
    "$sc" submit "$work/$1.json" | sed -n 's/.*\(job-[0-9]*\).*/\1/p' | head -n 1
}

# 1. cancelled mid-profile: the worker is free within 10 s, and its next job runs
j1=$(job_on first w)
wait_for 30 activity_is w profiling && pass "w profiles $j1" || fail "w is $(activity w), $j1 $(job_state "$j1")"
"$sc" cancel "$j1" >/dev/null || fail "cancel $j1"
wait_for 10 activity_is w idle && pass "w is free within 10 s of the cancel" ||
    fail "w is still $(activity w) after the cancel"
grep -q "profiling for job $j1 is cancelled" "$work/w.log" && pass "w says its profile was cancelled" ||
    fail "w's log does not say the profile was cancelled"
j2=$(job_on second w)
wait_for 60 is_state "$j2" succeeded && pass "w's next job $j2 ran" || fail "$j2 is $(job_state "$j2")"

# 2. a Profile call that times out: the worker is told to stop measuring, the job tries again
j3=$(job_on third v)
wait_for 30 activity_is v profiling || fail "v is $(activity v)"
wait_for 30 grep -q "profiling for job $j3 is cancelled" "$work/v.log" &&
    pass "v's profile, timed out, was cancelled by the coordinator" ||
    fail "v's log does not say its timed-out profile was cancelled"
wait_for 60 is_state "$j3" succeeded && pass "$j3 succeeded on its next try" ||
    fail "$j3 is $(job_state "$j3"): $("$sc" status "$j3" | sed -n 2p)"

# 3. SIGTERM while profiling: the process ends within 10 s (its exit watchdog alone would take
# longer than the cancel: a leave of 1 s at most, then 5 s)
j4=$(job_on fourth u)
wait_for 30 activity_is u profiling || fail "u is $(activity u)"
t0=$(date +%s%N)
kill -TERM "$u_pid"
ms() { echo $((($(date +%s%N) - t0) / 1000000)); }
wait_for 10 eval '! running '"$u_pid" && pass "u exited within $(ms) ms of SIGTERM, mid-profile" ||
    fail "u still runs $(ms) ms after SIGTERM"
grep -q "profiling for job $j4 is cancelled: the worker stops" "$work/u.log" &&
    pass "u cancelled its profile as it stopped" || fail "u's log does not say the profile was cancelled"
"$sc" cancel "$j4" >/dev/null 2>&1
running "$w_pid" || fail "w died"
finish
