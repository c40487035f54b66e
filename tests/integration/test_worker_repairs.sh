#!/usr/bin/env bash
# What a lost control message or a quick restart leaves behind is repaired from the workers'
# heartbeats, which say which job's stage each holds and whether it trains:
#  - a START that never arrived is sent again, and the job trains;
#  - a STOP that never arrived is sent again once the job has ended, and the worker is idle;
#  - a worker killed and restarted at once (before it could be declared dead) holds no stage:
#    its job recovers from its checkpoint instead of staying "running" for ever;
#  - a lost iteration report is made up for by the repeat of the last one with a heartbeat;
#  - a lost error (a stage's neighbour vanished) is made up for by its repeats: the job recovers;
#  - a worker stopped for a while (SIGSTOP) keeps its registration when it continues;
#  - a refused heartbeat of a worker's earlier registration does not stop the worker.
# The lost messages are made with the worker's fault injection (STAGECRAFT_WORKER_FAULTS).
# Usage: test_worker_repairs.sh PATH/TO/stagecraft
sc=${1:?usage: test_worker_repairs.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

# a silent worker is declared dead only after 60 s: every repair below must come from the
# heartbeats, not from a death
start_coordinator coord "$work/state" --heartbeat-ms 200 --dead-after 300
# a misspelt fault is refused, naming the valid ones, rather than silently injecting nothing
out=$(STAGECRAFT_WORKER_FAULTS=drop-start,drop-strat "$sc" worker --name typo --state "$work/wstate" 2>&1)
rc=$?
[ "$rc" -eq 2 ] && echo "$out" | grep -q "unknown fault 'drop-strat'; valid: drop-start, drop-stop" &&
    pass "a misspelt STAGECRAFT_WORKER_FAULTS is refused" ||
    fail "STAGECRAFT_WORKER_FAULTS=drop-start,drop-strat: exit $rc, $out"
STAGECRAFT_WORKER_FAULTS=drop-start,drop-stop start_worker lossy
start_worker b
b_pid=$worker_pid
STAGECRAFT_WORKER_FAULTS=drop-reports start_worker quiet
wait_alive 20 3 || fail "workers did not register"

job() { # NAME WORKER STEPS
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "mlp", "sizes": [32, 64, 64, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2,
 "strategy": "minmax", "workers": ["$2"], "steps": $3, "checkpoint_every": 200}
JSON
}
coord_says() { grep -q "$1" "$work/coord.log"; }

# 1, 2: the first START and the first STOP to worker 'lossy' are lost
job lost lossy 20 >"$work/lost.json"
"$sc" submit "$work/lost.json" >/dev/null || fail "submit lost"
wait_for 60 is_state job-1 succeeded && pass "job-1 trained although its START was lost" ||
    fail "job-1 is $(job_state job-1): $("$sc" status job-1 | sed -n 2p)"
coord_says "w-[0-9]* ('lossy') has not started its stage; sending START again" ||
    fail "the coordinator did not say it sent START again"
grep -q "fault injection: command .* for job job-1 ignored" "$work/lossy.log" ||
    fail "the worker did not lose a command"
wait_for 30 grep -q "released job job-1: stopped by the coordinator" "$work/lossy.log" &&
    pass "worker lossy dropped job-1's stage although the first STOP was lost" ||
    fail "worker lossy still holds job-1's stage: $(tail -n 3 "$work/lossy.log")"
coord_says "w-[0-9]* ('lossy') still runs a stage of job job-1, which has ended; sending STOP again" ||
    fail "the coordinator did not say it sent STOP again"

# worker 'quiet' loses every iteration report as it is made: the coordinator hears only the
# repeats of the last one that follow its heartbeats, and still sees the job to its end
job quiet quiet 300 >"$work/quiet.json"
"$sc" submit "$work/quiet.json" >/dev/null || fail "submit quiet"
wait_for 60 is_state job-2 succeeded && pass "job-2 ended although its reports were lost" ||
    fail "job-2 is $(job_state job-2): $("$sc" status job-2 | sed -n 2,3p)"
"$sc" status job-2 | grep -q "trained 300 steps" ||
    fail "job-2's reason does not say it trained 300 steps: $("$sc" status job-2 | sed -n 2p)"

# 3: worker b is killed once it has a checkpoint, and restarted at once under its name
#    (a step of this job takes some 100 us: b is frozen the moment the coordinator knows a
#    checkpoint, so the job cannot end before the kill)
job restart b 40000 >"$work/restart.json"
"$sc" submit "$work/restart.json" >/dev/null || fail "submit restart"
freeze_when_known 60 job-3 200 "$b_pid" ||
    fail "job-3 wrote no checkpoint: $("$sc" status job-3 | sed -n 2,3p)"
is_state job-3 running || fail "job-3 is $(job_state job-3) before its worker was killed"
kill -KILL "$b_pid"
wait "$b_pid" 2>/dev/null
start_worker b
b_pid=$worker_pid
wait_for 20 coord_says "job job-3 is recovering: worker w-[0-9]* ('b') no longer holds its stage" &&
    pass "job-3 recovers once its restarted worker reports no stage" ||
    fail "job-3 is $(job_state job-3): $("$sc" status job-3 | sed -n 2p)"
wait_for 120 is_state job-3 succeeded && pass "job-3 trained to the end after the restart" ||
    fail "job-3 is $(job_state job-3): $("$sc" status job-3 | sed -n 2p)"
"$sc" status job-3 | grep -q "from the checkpoint of step" ||
    fail "job-3 did not resume from a checkpoint: $("$sc" status job-3 | sed -n 2p)"

# 4: a stopped worker (ten missed heartbeats of its own) continues on its registration
epoch=$(worker_epoch b)
job pause b 40000 >"$work/pause.json"
"$sc" submit "$work/pause.json" >/dev/null || fail "submit pause"
wait_for 60 is_state job-4 running || fail "job-4 is $(job_state job-4), not running"
kill -STOP "$b_pid"
is_state job-4 running || fail "job-4 is $(job_state job-4) when its worker was paused"
sleep 2
kill -CONT "$b_pid"
wait_for 120 is_state job-4 succeeded && pass "job-4 trained through its worker's pause" ||
    fail "job-4 is $(job_state job-4): $("$sc" status job-4 | sed -n 2p)"
[ "$(worker_epoch b)" = "$epoch" ] && pass "worker b kept its registration (epoch $epoch)" ||
    fail "worker b registered again after its pause: epoch $epoch -> $(worker_epoch b)"

# 5: two stages on e0 and e1, which lose the first error their training stops with. e1 is
# killed (and stays dead: its death would be noticed only after 60 s); e0's stage then times out
# waiting for it, and the error that says so reaches the coordinator only as a repeat
STAGECRAFT_WORKER_FAULTS=drop-errors start_worker e0
STAGECRAFT_WORKER_FAULTS=drop-errors start_worker e1
e1_pid=$worker_pid
wait_alive 20 5 || fail "e0 and e1 did not register"
cat >"$work/two.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "two",
 "model": {"kind": "mlp", "sizes": [32, 64, 64, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2,
 "strategy": "uniform", "workers": ["e0", "e1"], "steps": 1000000}
JSON
"$sc" submit "$work/two.json" >/dev/null || fail "submit two"
wait_for 60 is_state job-5 running || fail "job-5 is $(job_state job-5), not running"
"$sc" status job-5 | grep -q "on 2 stage" || fail "job-5 is not on 2 stages: $("$sc" status job-5 | sed -n 2p)"
kill -KILL "$e1_pid"
wait_for 40 coord_says "job job-5 is recovering: worker w-[0-9]* ('e0')" &&
    pass "job-5 recovers from e0's error although its first sending was lost" ||
    fail "job-5 is $(job_state job-5): $("$sc" status job-5 | sed -n 2p)"
grep -q "fault injection: error of job job-5 not sent" "$work/e0.log" ||
    fail "e0 did not lose its error"

# 6: a heartbeat of a worker's earlier registration, still on its way when it registered again,
# is refused (FENCED about that epoch); the worker, registered under the newer one, carries on.
# The fault stamps the first heartbeat after a registration of epoch 2 or more with the epoch
# before.
STAGECRAFT_WORKER_FAULTS=stale-heartbeat start_worker stale
stale_pid=$worker_pid
wait_for 20 grep -q "registered as .* (epoch 1)" "$work/stale.log" || fail "stale did not register"
kill -KILL "$stale_pid"
wait "$stale_pid" 2>/dev/null
STAGECRAFT_WORKER_FAULTS=stale-heartbeat start_worker stale
stale_pid=$worker_pid
wait_for 20 grep -q "a heartbeat of epoch 1 was refused after this worker registered again (epoch 2); ignored" "$work/stale.log" ||
    fail "stale did not hear of its stale heartbeat: $(tail -n 3 "$work/stale.log")"
coord_says "heartbeat from worker w-[0-9]* with epoch 1 refused" ||
    fail "the coordinator did not refuse the stale heartbeat"
sleep 1 # five heartbeats more
running "$stale_pid" && [ "$(worker_state stale)" = alive ] &&
    [ "$(worker_epoch stale)" = 2 ] && pass "a refused heartbeat of an earlier epoch leaves the worker registered" ||
    fail "worker stale: $(tail -n 2 "$work/stale.log"); state $(worker_state stale), epoch $(worker_epoch stale)"
finish
