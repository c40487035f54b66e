#!/usr/bin/env bash
# A recovery whose newest checkpoint is corrupt resumes from an older step that every stage
# loads, also when the re-plan gives a stage to a worker that never saved it: each worker keeps
# its own state folder (as on separate servers), the stage-0 worker is killed, its newest
# stage-0 file gets a flipped byte, and it comes back under another name, so the new plan may
# put stage 0 on the worker that held stage 1, whose folder has no stage-0 file at all. It then
# takes the older step's blocks from whichever worker saved them. The job ends with the weights
# of an uninterrupted run.
# Usage: test_checkpoint_fallback.sh PATH/TO/stagecraft
sc=${1:?usage: test_checkpoint_fallback.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

# own_worker NAME FOLDER: a worker with a state folder of its own; sets worker_pid
own_worker() {
    "$sc" worker --name "$1" --state "$work/$2" >>"$work/$1.log" 2>&1 &
    worker_pid=$!
    pids+=("$worker_pid")
}

start_coordinator coord "$work/state" --heartbeat-ms 200 --dead-after 5
own_worker a fa
a_pid=$worker_pid
own_worker b fb
b_pid=$worker_pid
wait_alive 20 2 || fail "workers did not register"
for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7))"; done \
    >"$work/text.txt"
cat >"$work/job.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "fallback",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 16, "layers": 2, "width": 32, "heads": 2},
 "data": {"kind": "text", "path": "$work/text.txt"},
 "batch_size": 8, "microbatches": 4, "schedule": "1f1b", "strategy": "uniform",
 "workers": 2, "steps": 600, "seed": 7, "optimizer": {"kind": "adamw", "lr": 0.003},
 "checkpoint_every": 2, "checkpoint_keep": 3, "checkpoint_replicas": 0}
JSON
submit() { "$sc" submit "$1" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p'; }
# final FOLDERS... JOB STAGE: the path of the stage's step-600 checkpoint in any of the folders
final() {
    local job=${*: -2:1} stage=${*: -1} f
    for f in "${@:1:$#-2}"; do
        [ -f "$work/$f/checkpoints/$job/stage$stage-step600.ckpt" ] &&
            echo "$work/$f/checkpoints/$job/stage$stage-step600.ckpt" && return
    done
}

ref=$(submit "$work/job.json")
wait_for 120 is_state "$ref" succeeded || fail "reference job $ref is $(job_state "$ref")"
id=$(submit "$work/job.json")
freeze_when_known 60 "$id" 4 "$a_pid" "$b_pid" ||
    fail "$id did not checkpoint step 4: $("$sc" status "$id" | sed -n 2,3p)"
is_state "$id" running || is_state "$id" recovering ||
    fail "$id is $(job_state "$id") before its worker was killed"
# the worker whose folder holds stage 0 goes; the other one stays
if ls "$work/fa/checkpoints/$id"/stage0-step*.ckpt >/dev/null 2>&1; then
    gone=a gone_pid=$a_pid gone_dir=fa stays_pid=$b_pid stays_dir=fb
else
    gone=b gone_pid=$b_pid gone_dir=fb stays_pid=$a_pid stays_dir=fa
fi
kill -KILL "$gone_pid"; wait "$gone_pid" 2>/dev/null
kill -CONT "$stays_pid"
wait_for 10 is_state "$id" recovering || fail "$id is $(job_state "$id") after $gone was killed"
last=$(field "$id" last_checkpoint_step)
f=$work/$gone_dir/checkpoints/$id/stage0-step$last.ckpt
[ -f "$f" ] || fail "no checkpoint $f to corrupt"
# one flipped byte in the parameters: the checksum tells
byte=$(od -An -tu1 -j 200 -N1 "$f" | tr -d ' ')
printf "\\$(printf '%03o' $((byte ^ 1)))" | dd of="$f" bs=1 seek=200 conv=notrunc 2>/dev/null
ls "$work/$stays_dir/checkpoints/$id"/stage0-step*.ckpt >/dev/null 2>&1 &&
    fail "the staying worker's folder holds stage-0 files; the case needs it not to"
own_worker "$gone-again" "$gone_dir"
wait_for 120 is_state "$id" succeeded &&
    pass "$id recovered past a corrupt stage-0 checkpoint of step $last" ||
    fail "$id is $(job_state "$id"): $("$sc" status "$id" | sed -n 2p)"
prev=$((last - 2))
"$sc" status "$id" | grep -q "resuming from the checkpoint of step $prev instead of step $last, which does not load.*checksum" &&
    pass "status says step $prev was used and why step $last was skipped" ||
    fail "status history lacks the fallback: $("$sc" status "$id" | grep -A20 history)"
# which worker ran stage 0 after the recovery
if [ -f "$work/$stays_dir/checkpoints/$id/stage0-step600.ckpt" ]; then
    pass "stage 0 moved to the worker that never saved it, and took step $prev from the other"
else
    echo "note: the new plan kept stage 0 on the returning worker (its own older file was used)"
fi
for s in 0 1; do
    want=$(final fa fb "$ref" $s) got=$(final fa fb "$id" $s)
    [ -n "$want" ] && [ -n "$got" ] && cmp -s "$want" "$got" &&
        pass "stage $s: resumed from step $prev == uninterrupted run" ||
        fail "stage $s: the resumed run ('$got') differs from the uninterrupted one ('$want')"
done
finish
