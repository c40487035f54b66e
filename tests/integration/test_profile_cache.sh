#!/usr/bin/env bash
# Profiles kept across jobs: a second job of the same model on the same workers is planned
# without profiling them again (its history names the profiles reused and the job they came
# from, and status shows the profiling phase's time); another micro-batch size is profiled
# afresh; a worker that restarts (registers again) is profiled again, the others still reuse.
# Usage: test_profile_cache.sh PATH/TO/stagecraft
sc=${1:?usage: test_profile_cache.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

start_coordinator coord "$work/state"
start_worker a
start_worker b
pid_b=$worker_pid
wait_alive 30 2 || fail "workers did not register"
wid() { "$sc" workers --json | jq -r --arg n "$1" '.workers[] | select(.name == $n) | .id'; }
id_a=$(wid a)
id_b=$(wid b)

cat >"$work/job.json" <<'JSON'
{"format": "stagecraft-job", "version": 1, "name": "cached",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 8, "layers": 2, "width": 16, "heads": 2},
 "data": {"kind": "synthetic"}, "batch_size": 4, "microbatches": 2, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": 5, "seed": 3, "rebalance": "off",
 "optimizer": {"kind": "adamw", "lr": 0.003}}
JSON
# profiled JOB: the reason of the job's move to profiling
profiled() { "$sc" status "$1" --json | jq -r '[.transitions[] | select(.to == "profiling")][0].reason'; }
run_job() { # run_job FILE JOB: submits FILE as JOB and waits for it to succeed
    "$sc" submit "$1" >/dev/null || fail "submit $2"
    wait_for 120 is_state "$2" succeeded || fail "$2 did not succeed: $(job_state "$2")"
}

run_job "$work/job.json" job-1
r=$(profiled job-1)
grep -q "reused" <<<"$r" && fail "job-1 reused a profile: $r" || pass "job-1 profiled both: $r"

run_job "$work/job.json" job-2
r=$(profiled job-2)
grep -q "$id_a (from job-1)" <<<"$r" && grep -q "$id_b (from job-1)" <<<"$r" &&
    pass "job-2 reused both profiles: $r" || fail "job-2: $r"
prof=$(field job-2 profiling_s)
awk -v p="$prof" 'BEGIN { exit !(p >= 0) }' && "$sc" status job-2 | grep -q '^profiling: ' &&
    pass "status shows job-2's profiling time: $prof s" || fail "no profiling time: '$prof'"

# another micro-batch size is another profile
sed 's/"microbatches": 2/"microbatches": 4/' "$work/job.json" >"$work/mb4.json"
run_job "$work/mb4.json" job-3
r=$(profiled job-3)
grep -q "reused" <<<"$r" && fail "job-3 (another micro-batch size) reused: $r" ||
    pass "job-3, another micro-batch size, profiled afresh: $r"

# a worker that registers again is profiled again
kill -TERM "$pid_b"
wait_for 30 eval '! running '"$pid_b" || fail "worker b did not stop"
start_worker b
wait_for 30 worker_is b alive || fail "worker b did not come back"
[ "$(wid b)" = "$id_b" ] || fail "worker b came back as $(wid b), not $id_b"
run_job "$work/job.json" job-4
r=$(profiled job-4)
grep -q "$id_a (from job-1)" <<<"$r" && ! grep -q "$id_b (from" <<<"$r" &&
    pass "job-4 reused a's profile and profiled b, which registered again: $r" ||
    fail "job-4: $r"

finish
