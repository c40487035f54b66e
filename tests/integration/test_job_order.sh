#!/usr/bin/env bash
# Jobs take workers in submission order, and a job that cannot be satisfied holds up no one. With
# workers a and b held by job-1, job-2 wants 3 workers (never there), job-3 wants 2 and job-4..6
# want 1 each (submitted 0.6 s apart, so their retries fall at different times). Once job-1 is
# cancelled, job-3 takes both workers before any of job-4..6 does (each driven on its own
# thread, they would otherwise race for them), and job-4..6 then train although job-2, older,
# still waits.
# Usage: test_job_order.sh PATH/TO/stagecraft
sc=${1:?usage: test_job_order.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

start_coordinator coord "$work/state" --heartbeat-ms 200
start_worker a
start_worker b
wait_alive 20 2 || fail "workers did not register"

# job NAME WORKERS STEPS: a small job spec; WORKERS is a count or a JSON list of names. No
# rebalancing: a model this small trains several times faster than it profiles on a loaded
# machine, and a re-plan of job-1 may then put it on one worker and free the other for a younger
# job, which is rebalancing's business (test_rebalance.sh), not this test's
job() {
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "mlp", "sizes": [32, 64, 64, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2,
 "strategy": "minmax", "workers": $2, "steps": $3, "rebalance": "off"}
JSON
}
job hold '["a", "b"]' 100000000 >"$work/hold.json"
job three 3 5 >"$work/three.json"
job two 2 5 >"$work/two.json"
job one 1 5 >"$work/one.json"
"$sc" submit "$work/hold.json" >/dev/null || fail "submit job-1"
wait_for 30 is_state job-1 running || fail "job-1 is $(job_state job-1), not running"
"$sc" submit "$work/three.json" >/dev/null || fail "submit job-2"
"$sc" submit "$work/two.json" >/dev/null || fail "submit job-3"
for j in 4 5 6; do
    "$sc" submit "$work/one.json" >/dev/null || fail "submit job-$j"
    sleep 0.6
done
for j in 2 3 4 5 6; do
    is_state job-$j submitted || fail "job-$j is $(job_state job-$j) while job-1 holds the workers"
done
"$sc" cancel job-1 >/dev/null || fail "cancel job-1"

done_all() { for j in 3 4 5 6; do is_state job-$j succeeded || return 1; done; }
wait_for 90 done_all && pass "job-3..6 trained while job-2 (3 workers) waits" ||
    fail "job-3..6 are $(for j in 3 4 5 6; do job_state job-$j; done | tr '\n' ' ')"
is_state job-2 submitted || fail "job-2 is $(job_state job-2), not submitted"
# (how many were free at job-2's last try depends on when younger jobs were between runs)
"$sc" status job-2 | grep -Eq "waiting for 3 worker\(s\): [0-2] alive and free" ||
    fail "job-2's reason: $("$sc" status job-2 | sed -n 2p)"

# at_ms JOB STATE: when JOB first went to STATE
at_ms() {
    "$sc" status "$1" --json | tr -d ' \n' | grep -o "\"to\":\"$2\"[^}]*\"at_unix_ms\":[0-9]*" |
        head -n 1 | sed 's/.*"at_unix_ms"://'
}
# job-3's plan may free one of its workers at once (a one-stage plan), so a younger job may
# profile before job-3 ends, but not before job-3 took the workers
t3=$(at_ms job-3 profiling)
[ -n "$t3" ] || fail "no time for job-3's profiling"
for j in 4 5 6; do
    t=$(at_ms job-$j profiling)
    [ -n "$t" ] && [ -n "$t3" ] && [ "$t" -ge "$t3" ] ||
        fail "job-$j profiled at ${t:-?} ms, before job-3 (submitted earlier) at ${t3:-?} ms"
done
[ "$failures" -eq 0 ] && pass "job-3 took the workers before the younger job-4..6"
"$sc" cancel job-2 >/dev/null || fail "cancel job-2"
finish
