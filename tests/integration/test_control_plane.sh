#!/usr/bin/env bash
# The control plane with real processes on loopback: a coordinator and three workers; a job
# submitted, planned and running; bad job specs, wrong tokens, a duplicate and an impostor worker
# refused; a stopped worker declared dead within the configured time; a coordinator killed with
# SIGKILL right after accepting a job, restarted, with its jobs and workers back; a second
# coordinator on the same state folder refused.
# Usage: test_control_plane.sh PATH/TO/stagecraft
sc=${1:?usage: test_control_plane.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

state=$work/state
# heartbeats every 200 ms: suspect after 5 missed (1 s), dead after 10 (2 s; less and a worker
# whose heartbeats a busy machine holds up for a second dies under a running job)
start_coordinator coord "$state" --heartbeat-ms 200 --suspect-after 5 --dead-after 10
# the PIDs this test started, never looked up by pattern (another run's workers match too)
declare -A wpid
for w in w1 w2 w3; do
    start_worker $w
    wpid[$w]=$worker_pid
done
w2_pid=${wpid[w2]}
wait_alive 20 3 &&
    pass "three workers registered and alive" || fail "workers did not all register"

# strategy uniform: one stage on each of the three workers whatever the profile measured (minmax
# may leave a worker out when a busy machine skews the profile, and the stopped worker below
# must hold a stage)
cat >"$work/job.json" <<'JSON'
{"format": "stagecraft-job", "version": 1, "name": "tiny-gpt",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 16, "layers": 4, "width": 32, "heads": 4},
 "data": {"kind": "synthetic"},
 "batch_size": 8, "microbatches": 4, "schedule": "1f1b", "strategy": "uniform",
 "workers": 3, "steps": 100000000, "seed": 1}
JSON
out=$("$sc" submit "$work/job.json" --json) || fail "submit failed: $out"
[ "$out" = '{"job_id": "job-1"}' ] || fail "submit printed '$out'"
wait_for 30 is_state job-1 running && pass "job-1 planned and running" ||
    fail "job-1 is $(job_state job-1)"
wait_for 20 sh -c "[ \$('$sc' status job-1 --json | sed -n 's/^  \"step\": \([0-9]*\),/\1/p') -gt 0 ]" &&
    pass "job-1 makes progress" || fail "job-1 reports no step"
plan=$("$sc" status job-1 --json | tr -d ' \n')
[[ $plan == *'"strategy":"uniform"'* ]] || fail "status shows no uniform plan: $plan"
[[ $plan == *'"worker_ids":["w-'* ]] || fail "plan names no workers"
n_stages=$("$sc" status job-1 --json | jq '.plan.stages | length')
[ "$n_stages" -eq 3 ] || fail "plan has $n_stages stages, want 3"
"$sc" status job-1 | grep -q "^state:   running" || fail "human status lacks the state line"

# bad input is refused with a message naming what is wrong; the coordinator stays up
sed 's/"heads": 4/"heads": 3/' "$work/job.json" >"$work/bad.json"
err=$("$sc" submit "$work/bad.json" 2>&1); rc=$?
[ $rc -eq 2 ] || fail "bad spec: exit $rc, want 2"
[[ $err == *"bad.json"*'$.model'* ]] || fail "bad spec message: $err"
echo '{"format": "stagecraft-job", "version": 1,' >"$work/trunc.json"
err=$("$sc" submit "$work/trunc.json" 2>&1); rc=$?
[ $rc -eq 2 ] && [[ $err == *"trunc.json:"* ]] || fail "truncated spec: exit $rc: $err"
err=$(STAGECRAFT_TOKEN=wrong "$sc" submit "$work/job.json" 2>&1); rc=$?
[ $rc -ne 0 ] && [[ $err == *"PERMISSION_DENIED"*"client token"* ]] ||
    fail "wrong client token: exit $rc: $err"
wait_for 10 grep -q "SubmitJob from .* refused: wrong client token" "$work/coord.log" ||
    fail "the coordinator did not log the wrong client token"
err=$("$sc" status job-99 2>&1); rc=$?
[ $rc -ne 0 ] && [[ $err == *"no job with id 'job-99'"* ]] || fail "unknown job: $err"
pass "bad specs, wrong token and unknown job refused with clear messages"

# a duplicate (same name, no id) and an impostor (wrong join token) are refused
"$sc" worker --name w1 --state "$work/other" >"$work/dup.log" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "already registered and alive" "$work/dup.log" ||
    fail "duplicate worker: exit $rc: $(tail -1 "$work/dup.log")"
STAGECRAFT_JOIN_TOKEN=nope "$sc" worker --name intruder --state "$work/other" \
    >"$work/imp.log" 2>&1; rc=$?
[ $rc -ne 0 ] && grep -q "join token refused" "$work/imp.log" ||
    fail "impostor: exit $rc: $(tail -1 "$work/imp.log")"
pass "duplicate and impostor workers refused"

# the same worker started again (same --name and --state, so the same id file) stops before it
# registers: the running one keeps its registration (no new epoch) and its job keeps running
w1_pid=${wpid[w1]}
epoch=$(worker_epoch w1)
err=$(timeout 10 "$sc" worker --name w1 --state "$work/wstate" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "w1 started twice on one state folder: exit $rc, want 2: $err"
[[ $err == "stagecraft worker: worker 'w1' in state folder $work/wstate: another worker process holds"* ]] ||
    fail "w1 started twice: message '$err'"
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "w1 started twice: more than one line: $err"
sleep 1 # five heartbeat intervals: a second registration would have shown by now
running "$w1_pid" || fail "the running w1 stopped"
[ -n "$epoch" ] && [ "$(worker_epoch w1)" = "$epoch" ] ||
    fail "w1's epoch went from '$epoch' to '$(worker_epoch w1)'"
wait_for 10 worker_is w1 alive && is_state job-1 running ||
    fail "after the second w1: w1 is $(worker_state w1), job-1 is $(job_state job-1)"
pass "the same worker started twice is refused; the running one keeps epoch $epoch"

# a stopped worker is suspect, then dead (after the configured 2 s + one sweep; the bound
# below leaves room for a busy machine)
kill -STOP "$w2_pid"
t0=$SECONDS
wait_for 20 worker_is w2 dead && pass "stopped worker declared dead after $((SECONDS - t0)) s" ||
    fail "w2 is $(worker_state w2) 20 s after SIGSTOP"
wait_for 20 is_state job-1 recovering && pass "its job went to recovering" ||
    fail "job-1 is $(job_state job-1) after its worker died"
"$sc" status job-1 | grep -q "died" || fail "recovering job gives no reason"
"$sc" status job-1 --json | tr -d ' \n' | grep -q '"to":"recovering","reason":"worker' ||
    fail "the job's history lacks the recovery and its reason"
kill -CONT "$w2_pid"
wait_for 30 worker_is w2 alive && pass "the worker came back under its old id" ||
    fail "w2 did not re-register"
[ "$("$sc" workers --json | grep -c '"id": "w-')" -eq 3 ] || fail "a worker got a second id"
wait_for 30 is_state job-1 running || fail "job-1 was not re-planned: $(job_state job-1)"

# SIGKILL right after a job is accepted: nothing accepted is lost
out=$("$sc" submit "$work/job.json" --json); kill -KILL "$coord_pid"; wait "$coord_pid" 2>/dev/null
[ "$out" = '{"job_id": "job-2"}' ] || fail "second submit printed '$out'"
listen=$STAGECRAFT_COORDINATOR start_coordinator coord2 "$state" --heartbeat-ms 200 --suspect-after 5 --dead-after 10
"$sc" status --json | grep -q '"job_id": "job-2"' && pass "accepted job kept across SIGKILL" ||
    fail "job-2 lost"
wait_alive 20 3 &&
    pass "workers reconnected to the restarted coordinator" || fail "workers did not return"
[ "$("$sc" workers --json | grep -c '"id": "w-')" -eq 3 ] || fail "restart duplicated workers"

# a second coordinator on the same state folder is refused (the killed one's lock went with it)
err=$(timeout 10 "$sc" coordinator --listen 127.0.0.1:0 --state "$state" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && [ "$(echo "$err" | wc -l)" -eq 1 ] &&
    [[ $err == *"state folder $state: another coordinator holds it"* ]] &&
    pass "a second coordinator on the same state folder exits 2" ||
    fail "second coordinator on $state: exit $rc: $err"
"$sc" workers >/dev/null || fail "the first coordinator stopped answering"
wait_for 30 is_state job-1 running && pass "job-1 resumed after the restart" ||
    fail "job-1 is $(job_state job-1) after the restart"
is_state job-2 submitted || fail "job-2 is $(job_state job-2) while job-1 holds the workers"
"$sc" cancel job-1 >/dev/null || fail "cancel job-1"
wait_for 30 is_state job-2 running && pass "job-2 runs once job-1 is cancelled" ||
    fail "job-2 is $(job_state job-2): $("$sc" status job-2 | sed -n 2p)"
is_state job-1 cancelled || fail "job-1 not cancelled"
"$sc" cancel job-2 >/dev/null || fail "cancel job-2"
finish
