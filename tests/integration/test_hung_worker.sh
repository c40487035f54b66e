#!/usr/bin/env bash
# A stage whose step never returns while its worker's heartbeats go on (a hung kernel, made here
# with the worker's fault injection: STAGECRAFT_WORKER_FAULTS=hang-stage) does not stall its
# job: the job is re-planned from its last checkpoint (by the neighbour's data-plane time-out, or
# for a one-stage job by the coordinator's stall watchdog), the worker says it is stuck and no
# plan takes it, the job ends on the other workers with the parameters of an uninterrupted run,
# and when the stuck step returns at last (SIGUSR2 here) its stage ends without saving or
# reporting anything and the worker is free again.
# Usage: test_hung_worker.sh PATH/TO/stagecraft
sc=${1:?usage: test_hung_worker.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

start_coordinator coord "$work/state" --heartbeat-ms 200 --dead-after 5
STAGECRAFT_WORKER_FAULTS=hang-stage start_worker a
a_pid=$worker_pid
start_worker b
wait_alive 20 2 || fail "workers did not register"
submit() { "$sc" submit "$1" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p'; }
# job NAME WORKERS STEPS
job() {
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 16, "layers": 2, "width": 32, "heads": 2},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 4, "schedule": "1f1b",
 "strategy": "uniform", "workers": $2, "steps": $3, "seed": 7,
 "optimizer": {"kind": "adamw", "lr": 0.003}, "checkpoint_every": 2}
JSON
}
# stage_workers JOB: the worker ids of the job's stages, as `status --json` gives its plan
stage_workers() { "$sc" status "$1" --json | tr -d ' \n' | grep -o '"worker_ids":\[[^]]*\]' | tr '\n' ' '; }
worker_id() { "$sc" workers --json | tr -d ' \n' | sed 's/{"id"/\n{"id"/g' | grep "\"name\":\"$1\"" | sed -n 's/^{"id":"\([^"]*\)".*/\1/p'; }

# 1. two stages on a and b; a's stage hangs in its fourth step
job two 2 200 >"$work/two.json"
id=$(submit "$work/two.json")
wait_for 60 grep -q "fault injection: job $id stage [01] hangs" "$work/a.log" ||
    fail "a's stage did not hang: $("$sc" status "$id" | sed -n 2p)"
start_worker c # a spare for the re-plan
wait_alive 20 3 || fail "the spare did not register"
wait_for 120 grep -q "this worker takes no stage until it does" "$work/a.log" &&
    pass "the hung worker says it is stuck" || fail "a never said it is stuck"
# what `workers` shows it doing
activity() { "$sc" workers --json | tr -d ' \n' | sed 's/{"id"/\n{"id"/g' | grep "\"name\":\"$1\"" | sed -n 's/.*"activity":"\([a-z]*\)".*/\1/p'; }
activity_is() { [ "$(activity "$1")" = "$2" ]; }
wait_for 30 activity_is a stuck && pass "workers shows a stuck" || fail "workers shows a $(activity a)"
wait_for 180 is_state "$id" succeeded &&
    pass "$id succeeded past the hung stage: $("$sc" status "$id" | grep -c recovering) recovery line(s)" ||
    fail "$id is $(job_state "$id"): $("$sc" status "$id" | sed -n 2p)"
"$sc" status "$id" | grep -E "recovering|training on" | sed 's/^/    /'
aid=$(worker_id a)
stage_workers "$id" | grep -q "\"$aid\"" &&
    fail "the final plan still uses the stuck worker $aid: $(stage_workers "$id")"
# the same job without faults, on b and c: the same parameters (resumed from a checkpoint)
ref=$(submit "$work/two.json")
wait_for 120 is_state "$ref" succeeded || fail "reference $ref is $(job_state "$ref")"
for s in 0 1; do
    cmp -s "$work/wstate/checkpoints/$ref/stage$s-step200.ckpt" \
        "$work/wstate/checkpoints/$id/stage$s-step200.ckpt" &&
        pass "stage $s: the recovered run == an uninterrupted one" ||
        fail "stage $s: the recovered run differs from an uninterrupted one"
done

# 2. it wakes up: its stage ends without a word, and the worker is free again
kill -USR2 "$a_pid"
wait_for 30 grep -q "the stuck stage has ended; its work is discarded" "$work/a.log" &&
    pass "the woken stage ended: $(grep 'wakes up' "$work/a.log" | head -1 | sed 's/.*fault injection: //')" ||
    fail "a's stuck stage did not end after SIGUSR2"
grep -q "wakes up in step .*, stopped meanwhile: it ends" "$work/a.log" ||
    fail "the woken stage did not see its stop"
running "$a_pid" || fail "a exited"
wait_for 30 activity_is a idle && pass "workers shows a idle again" || fail "workers shows a $(activity a)"

# 3. a one-stage job whose stage hangs: no neighbour times out; the stall watchdog re-plans it
STAGECRAFT_WORKER_FAULTS=hang-stage start_worker d
d_pid=$worker_pid
wait_alive 20 4 || fail "d did not register"
cat >"$work/one.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "one",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 16, "layers": 2, "width": 32, "heads": 2},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 4,
 "workers": ["d"], "steps": 100000, "seed": 7, "checkpoint_every": 2}
JSON
id=$(submit "$work/one.json")
wait_for 60 grep -q "fault injection: job $id stage 0 hangs" "$work/d.log" ||
    fail "d's stage did not hang: $("$sc" status "$id" | sed -n 2p)"
wait_for 120 sh -c "'$sc' status $id | grep -q 'no stage reported a step for'" &&
    pass "the watchdog saw the one-stage job stall: $("$sc" status "$id" | grep -o 'no stage reported a step for [^;]*' | head -1)" ||
    fail "no stall seen: $("$sc" status "$id" | sed -n 2p)"
# the job names d only: it waits for d, which is stuck, and is not given it back
wait_for 60 grep -q "this worker takes no stage until it does" "$work/d.log" ||
    fail "d never said it is stuck"
"$sc" cancel "$id" >/dev/null 2>&1

# 4. SIGTERM stops a worker whose stage is stuck: it does not wait for that stage
kill -TERM "$d_pid"
d_gone() { ! running "$d_pid"; }
wait_for 30 d_gone &&
    pass "SIGTERM stopped the stuck worker d" || fail "d still runs after SIGTERM"
finish
