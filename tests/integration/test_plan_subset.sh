#!/usr/bin/env bash
# A plan that runs on fewer workers than the job reserved: the job trains on the planned ones
# only (no START to a worker without a stage), and the others are freed at once for other jobs.
# Usage: test_plan_subset.sh PATH/TO/stagecraft
sc=${1:?usage: test_plan_subset.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

start_coordinator coord "$work/state"
start_worker a
start_worker b
wait_alive 20 2 ||
    fail "workers did not register"

# one stage (minmax honours the cap and does not replicate): one of the two workers is left out.
# No rebalancing: a model this small trains several times faster than it profiles on a loaded
# machine (a sanitizer build), and a re-plan may then move the long job onto the freed worker,
# which is rebalancing's business (test_rebalance.sh), not this test's
job() {
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "mlp", "sizes": [32, 64, 64, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2,
 "strategy": "minmax", "stages": 1, "workers": $2, "steps": $3, "rebalance": "off"}
JSON
}
job short 2 5 >"$work/short.json"
job long 2 100000000 >"$work/long.json"
job single 1 20 >"$work/single.json"

"$sc" submit "$work/short.json" >/dev/null || fail "submit short"
ended() { case $(job_state "$1") in succeeded | failed | cancelled) return 0 ;; esac; return 1; }
wait_for 30 ended job-1
if is_state job-1 succeeded; then
    pass "a one-stage plan on 1 of 2 reserved workers trained to success"
else
    fail "job-1 is $(job_state job-1): $("$sc" status job-1 | sed -n 2p)"
fi
grep -q "the plan uses 1 of its 2 workers" "$work/coord.log" && pass "the coordinator says it freed one" ||
    fail "no log line about the freed worker"

# a long job holds its one planned worker; the other one is free and runs a second job meanwhile
"$sc" submit "$work/long.json" >/dev/null || fail "submit long"
wait_for 30 is_state job-2 running || fail "job-2 is $(job_state job-2): $("$sc" status job-2 | sed -n 2p)"
free_workers() { "$sc" workers --json | tr -d ' \n' | grep -o '"job_id":""' | wc -l; }
free_is() { [ "$(free_workers)" -eq "$1" ]; }
wait_for 10 free_is 1 &&
    pass "while job-2 runs, one worker has no job" ||
    fail "free workers while job-2 runs: $(free_workers) ($("$sc" workers | tail -n +2 | tr '\n' ';'))"
"$sc" submit "$work/single.json" >/dev/null || fail "submit single"
wait_for 30 is_state job-3 succeeded && pass "job-3 ran on the freed worker beside job-2" ||
    fail "job-3 is $(job_state job-3): $("$sc" status job-3 | sed -n 2p)"
is_state job-2 running || fail "job-2 is $(job_state job-2) after job-3"
"$sc" cancel job-2 >/dev/null || fail "cancel job-2"
wait_for 10 free_is 2 ||
    fail "workers not freed after cancelling job-2"
finish
