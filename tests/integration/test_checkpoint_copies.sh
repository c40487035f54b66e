#!/usr/bin/env bash
# Checkpoints that survive the loss of a worker's disk: each stage's checkpoints are copied to
# another worker of the job (checkpoint_replicas, default 1). A worker killed (-9) whose state
# folder is deleted, replaced by a new worker: the job resumes from its last complete checkpoint,
# the lost stage taken from the copy, and ends with the parameters of an uninterrupted run, bit
# for bit. The same loss with checkpoint_replicas 0 fails the job, saying why. A worker's own
# checkpoint found corrupt when it restarts is taken from the copy instead.
# Usage: test_checkpoint_copies.sh PATH/TO/stagecraft
sc=${1:?usage: test_checkpoint_copies.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

start_coordinator coord "$work/state" --heartbeat-ms 200 --dead-after 5
start_worker a --state "$work/wa"
a_pid=$worker_pid
start_worker b --state "$work/wb"
b_pid=$worker_pid
wait_alive 20 2 || fail "workers did not register"

steps=400
spec() { # NAME EXTRA
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 16, "layers": 2, "width": 32, "heads": 2, "cpu_kernels": "reference"},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": $steps, "seed": 11, "checkpoint_every": 20,
 "rebalance": "off"${2:-}}
JSON
}
submit() { "$sc" submit "$1" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p'; }
history() { "$sc" status "$1" --json | jq -r '.transitions[] | "\(.to): \(.reason)"'; }
# final JOB STAGE: the stage's checkpoint of the last step, from whichever worker wrote it
final() { ls "$work"/w?/checkpoints/"$1"/stage"$2"-step$steps.ckpt 2>/dev/null | head -n 1; }
# same_params JOB: its last checkpoints hold the same bytes as the reference's, stage by stage
same_params() {
    local s g
    for s in 0 1; do
        g=$(final "$1" $s)
        [ -n "$g" ] && cmp -s "$work/ref-stage$s.ckpt" "$g" || return 1
    done
}
command -v jq >/dev/null || { echo "SKIP: needs jq"; exit 77; }

# 1. the reference, uninterrupted; each worker holds a copy of the other's stage
spec ref >"$work/ref.json"
ref=$(submit "$work/ref.json")
wait_for 300 is_state "$ref" succeeded || fail "$ref is $(job_state "$ref"): $(field "$ref" reason)"
for w in a b; do
    compgen -G "$work/w$w/checkpoints/$ref/replicas/stage[01]-step*.ckpt" >/dev/null ||
        fail "worker $w holds no copy of the other stage: $(ls -R "$work/w$w/checkpoints/$ref" 2>&1)"
done
for s in 0 1; do # kept aside: b's disk goes below
    cp "$(final "$ref" $s)" "$work/ref-stage$s.ckpt" || fail "$ref has no checkpoint of step $steps"
done
# copies are deleted like the worker's own: the newest 2 complete ones stay
n=$(ls "$work/wa/checkpoints/$ref/replicas/" | wc -l)
[ "$n" -le 3 ] && pass "each worker holds copies of the other's stage ($n file(s) kept on a)" ||
    fail "worker a keeps $n copies: $(ls "$work/wa/checkpoints/$ref/replicas/")"

# 2. a worker lost for good: killed, its state folder deleted, a new worker in its place
spec lost >"$work/lost.json"
id=$(submit "$work/lost.json")
# freeze both as soon as a complete checkpoint (written and copied) of step 40 is known, so that
# the job cannot end before b is killed
freeze_when_known 120 "$id" 40 "$a_pid" "$b_pid" ||
    fail "$id did not complete the checkpoint of step 40: $("$sc" status "$id" | sed -n 2,3p)"
last=$(field "$id" last_checkpoint_step)
kill -KILL "$b_pid"; wait "$b_pid" 2>/dev/null
rm -rf "$work/wb"
kill -CONT "$a_pid"
wait_for 30 is_state "$id" recovering || fail "$id is $(job_state "$id") after b was killed"
start_worker c --state "$work/wc"
c_pid=$worker_pid
wait_for 300 is_state "$id" succeeded &&
    pass "$id resumed after the loss of b's disk and finished" ||
    fail "$id is $(job_state "$id"): $(field "$id" reason)"
resumed=$(history "$id" | sed -n 's/^running: training on 2 stage(s) from the checkpoint of step \([0-9]*\).*/\1/p' | tail -n 1)
[ -n "$resumed" ] && [ "$resumed" -ge "$last" ] &&
    pass "it resumed from the checkpoint of step $resumed (last complete when b was lost: $last)" ||
    fail "resumed from '$resumed', expected at least $last: $(history "$id")"
grep -q "took blocks .* of step $resumed over" "$work"/a.log "$work"/c.log &&
    pass "the lost stage was taken from the copy on a" ||
    fail "no stage took its blocks over: $(grep -h 'took blocks' "$work"/[ac].log)"
same_params "$id" && pass "and ends with the parameters of the uninterrupted run, bit for bit" ||
    fail "$id ends with other parameters than $ref"
# the new owner keeps the checkpoint it took over as its own (and copies it on)
ls "$work"/wc/checkpoints/"$id"/stage[01]-step*.ckpt >/dev/null 2>&1 ||
    fail "c holds no checkpoint of its own: $(ls -R "$work/wc/checkpoints" 2>&1)"

# 3. without copies the same loss cannot be recovered: the job fails, saying why
spec nocopies ', "checkpoint_replicas": 0' >"$work/nocopies.json"
id=$(submit "$work/nocopies.json")
freeze_when_known 120 "$id" 40 "$a_pid" "$c_pid" ||
    fail "$id did not checkpoint step 40: $("$sc" status "$id" | sed -n 2,3p)"
kill -KILL "$c_pid"; wait "$c_pid" 2>/dev/null
rm -rf "$work/wc"
kill -CONT "$a_pid"
wait_for 30 is_state "$id" recovering || fail "$id is $(job_state "$id") after c was killed"
start_worker d --state "$work/wd"
d_pid=$worker_pid
wait_for 300 is_state "$id" failed && field "$id" reason | grep -q "no intact checkpoint to resume from" &&
    pass "without copies the job failed: $(field "$id" reason | cut -c1-160)" ||
    fail "$id is $(job_state "$id"): $(field "$id" reason)"

# 4. a worker's own checkpoint corrupt when it restarts (same name and state folder): the stage
#    is taken from the copy on the other worker, from the same step, not an older one. Reports
#    sent just before the freeze may still move the step the job resumes from (40 or a later
#    one), so every checkpoint a wrote of this job is corrupted, and the test checks the step
#    resumed from against the file a refused.
spec corrupt >"$work/corrupt.json"
id=$(submit "$work/corrupt.json")
freeze_when_known 120 "$id" 40 "$a_pid" "$d_pid" ||
    fail "$id did not complete the checkpoint of step 40: $("$sc" status "$id" | sed -n 2,3p)"
kill -KILL "$a_pid"; wait "$a_pid" 2>/dev/null
kill -CONT "$d_pid"
wait_for 30 is_state "$id" recovering || fail "$id is $(job_state "$id") after a was killed"
own=$(ls "$work"/wa/checkpoints/"$id"/stage[01]-step*.ckpt 2>/dev/null)
[ -n "$own" ] || fail "a holds no checkpoint of $id to corrupt"
for f in $own; do truncate -s -8 "$f"; done
start_worker a --state "$work/wa"
a_pid=$worker_pid
wait_for 300 is_state "$id" succeeded || fail "$id is $(job_state "$id"): $(field "$id" reason)"
resumed=$(history "$id" | sed -n 's/^running: training on 2 stage(s) from the checkpoint of step \([0-9]*\).*/\1/p' | tail -n 1)
[ "${resumed:-0}" -ge 40 ] && ! history "$id" | grep -q "instead of step" &&
    pass "a corrupt own checkpoint of step $resumed: resumed from the copy, same step" ||
    fail "resumed from '$resumed', expected step 40 or later, the last complete: $(history "$id")"
grep -q "not serving .*stage[01]-step$resumed.ckpt: .*truncated" "$work"/a.log &&
    pass "the corrupt file was refused, naming why: $(grep -h -o "not serving .*truncated.*" "$work"/a.log | head -n 1 | sed "s|$work/||g")" ||
    fail "a's log does not say it refused its checkpoint of step $resumed"
same_params "$id" && pass "and ends with the parameters of the uninterrupted run, bit for bit" ||
    fail "$id ends with other parameters than $ref"

# a bad checkpoint_replicas is refused at submit, naming the key and the range
spec bad ', "checkpoint_replicas": 9' >"$work/bad.json"
err=$("$sc" submit "$work/bad.json" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && echo "$err" | grep -q 'checkpoint_replicas.*\[0, 8\]' &&
    pass "checkpoint_replicas 9 refused: $err" || fail "checkpoint_replicas 9: exit $rc: $err"
finish
