#!/usr/bin/env bash
# Checkpoints of a job across worker processes: only the newest `checkpoint_keep` complete ones
# stay on disk; a recovery whose checkpoint is corrupt resumes from the newest older step every
# stage loads (and says so), or fails naming why when there is none; a checkpoint that cannot
# be written is shown by `stagecraft status`, not only in the worker's log.
# Usage: test_checkpoints.sh PATH/TO/stagecraft
sc=${1:?usage: test_checkpoints.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

state=$work/state
start_coordinator coord "$state" --heartbeat-ms 200 --dead-after 5
start_worker a
a_pid=$worker_pid
start_worker b
b_pid=$worker_pid
wait_alive 20 2 ||
    fail "workers did not register"
for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7))"; done \
    >"$work/text.txt"

# job NAME STEPS EXTRA: a 2-stage job with a fixed partition; EXTRA adds keys
job() {
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 16, "layers": 2, "width": 32, "heads": 2},
 "data": {"kind": "text", "path": "$work/text.txt"},
 "batch_size": 8, "microbatches": 4, "schedule": "1f1b", "strategy": "uniform",
 "workers": 2, "steps": $2, "seed": 7, "optimizer": {"kind": "adamw", "lr": 0.003}$3}
JSON
}
submit() { "$sc" submit "$1" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p'; }
ckpts() { (cd "$work/wstate/checkpoints/$1" 2>/dev/null && ls stage$2-step*.ckpt 2>/dev/null | sort -V | tr '\n' ' '); }

# 1. pruning: checkpoint_every 2 over 40 steps wrote 20 files per stage; the default keeps the
#    newest 2, checkpoint_keep 3 the newest 3
job keep-default 40 ', "checkpoint_every": 2' >"$work/k2.json"
job keep-3 40 ', "checkpoint_every": 2, "checkpoint_keep": 3' >"$work/k3.json"
for spec in k2 k3; do
    id=$(submit "$work/$spec.json")
    wait_for 300 is_state "$id" succeeded || fail "$spec job $id is $(job_state "$id")"
    want="stage0-step38.ckpt stage0-step40.ckpt "
    [ $spec = k3 ] && want="stage0-step36.ckpt $want"
    # the last deletions follow the last report by a control message: poll briefly
    wait_for 10 sh -c "[ \"\$(cd '$work/wstate/checkpoints/$id' && ls stage0-step*.ckpt | sort -V | tr '\n' ' ')\" = '$want' ]" &&
        [ "$(ckpts "$id" 1)" = "$(echo "$want" | sed 's/stage0/stage1/g')" ] &&
        pass "$spec: only the newest complete checkpoints are kept ($want)" ||
        fail "$spec: stage 0 keeps '$(ckpts "$id" 0)', stage 1 '$(ckpts "$id" 1)'; wanted '$want'"
done

# checkpoint_keep is validated at submit
job bad 10 ', "checkpoint_keep": -1' >"$work/bad.json"
err=$("$sc" submit "$work/bad.json" 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && echo "$err" | grep -q 'checkpoint_keep' &&
    pass "checkpoint_keep -1 refused at submit: $err" || fail "checkpoint_keep -1: exit $rc: $err"

# 2. a corrupt newest checkpoint: the job recovers from the step before it, says so, and ends
#    with the weights of an uninterrupted run (the same spec run first, to its end). Without
#    copies of the checkpoints on other workers (with them, the copy is taken instead:
#    test_checkpoint_copies.sh)
# (600 steps: on a loaded machine a status poll can take longer than 200 steps of this model, and
#  the job ended before the workers could be frozen)
job corrupt 600 ', "checkpoint_every": 2, "checkpoint_keep": 3, "checkpoint_replicas": 0' >"$work/corrupt.json"
ref=$(submit "$work/corrupt.json")
wait_for 120 is_state "$ref" succeeded || fail "reference job $ref is $(job_state "$ref")"
id=$(submit "$work/corrupt.json")
# The coordinator resumes from the last step it knows every stage saved, from reports that go
# out at most every 50 ms, while the steps take a few ms: freeze both workers as soon as it
# knows a step with an older one before it (>= 4), so the job cannot end before b is killed
# and the step it will resume from has a predecessor to fall back to.
freeze_when_known 60 "$id" 4 "$a_pid" "$b_pid" ||
    fail "$id did not checkpoint step 4: $("$sc" status "$id" | sed -n 2,3p)"
# not ended (on a busy machine the frozen workers may already count as dead: recovering)
is_state "$id" running || is_state "$id" recovering ||
    fail "$id is $(job_state "$id") before its worker was killed"
kill -KILL "$b_pid"; wait "$b_pid" 2>/dev/null
kill -CONT "$a_pid"
wait_for 10 is_state "$id" recovering || fail "$id is $(job_state "$id") after its worker was killed"
last=$(field "$id" last_checkpoint_step)
f=$work/wstate/checkpoints/$id/stage1-step$last.ckpt
if [ -f "$f" ]; then
    truncate -s -8 "$f" # a torn write: the file is short
else
    fail "no checkpoint $f to corrupt (stage 1 has: $(ckpts "$id" 1))"
fi
start_worker b
b_pid=$worker_pid
wait_for 120 is_state "$id" succeeded && pass "$id recovered past a corrupt checkpoint of step $last" ||
    fail "$id is $(job_state "$id"): $("$sc" status "$id" | sed -n 2p)"
prev=$((last - 2))
"$sc" status "$id" | grep -q "resuming from the checkpoint of step $prev instead of step $last, which does not load.*stage1-step$last.ckpt: truncated" &&
    pass "status history says step $prev was used and why step $last was skipped" ||
    fail "status history lacks the fallback: $("$sc" status "$id" | grep -A20 history)"
"$sc" status "$id" | grep -q "training on 2 stage(s) from the checkpoint of step $prev" ||
    fail "the job did not train from step $prev: $("$sc" status "$id" | grep -A20 history)"
grep -q "resuming from the checkpoint of step $prev instead of step $last" "$work/coord.log" ||
    fail "the coordinator's log lacks the fallback"
for s in 0 1; do
    cmp -s "$work/wstate/checkpoints/$ref/stage$s-step600.ckpt" \
        "$work/wstate/checkpoints/$id/stage$s-step600.ckpt" &&
        pass "stage $s: resumed from step $prev == uninterrupted run" ||
        fail "stage $s: the run resumed from step $prev differs from the uninterrupted one"
done

# 3. no intact checkpoint at all (and no copies): the job fails, naming why
job none 400 ', "checkpoint_every": 2, "checkpoint_replicas": 0' >"$work/none.json"
id=$(submit "$work/none.json")
wait_for 60 sh -c "[ \"\$('$sc' status $id --json | sed -n 's/^  \"last_checkpoint_step\": \([0-9]*\),/\1/p')\" -ge 6 ]" ||
    fail "$id did not checkpoint step 6: $("$sc" status "$id" | sed -n 2,3p)"
kill -KILL "$b_pid"; wait "$b_pid" 2>/dev/null
wait_for 10 is_state "$id" recovering || fail "$id is $(job_state "$id") after its worker was killed"
for f in "$work"/wstate/checkpoints/$id/stage1-step*.ckpt; do printf 'garbage!' | dd of="$f" bs=1 seek=100 conv=notrunc 2>/dev/null; done
start_worker b
b_pid=$worker_pid
wait_for 120 is_state "$id" failed && "$sc" status "$id" | sed -n 2p | grep -q "no intact checkpoint to resume from.*checksum mismatch.*no older checkpoint of stage 1 loads" &&
    pass "no intact checkpoint: the job failed saying so" ||
    fail "$id is $(job_state "$id"): $("$sc" status "$id" | sed -n 2p)"

# 4. a checkpoint that cannot be written (here: its folder is a file) is in the job's status
n=$(( ${id#job-} + 1 ))
: >"$work/wstate/checkpoints/job-$n"
job unwritable 10 ', "checkpoint_every": 2' >"$work/unwritable.json"
id=$(submit "$work/unwritable.json")
[ "$id" = "job-$n" ] || fail "expected job-$n, got $id"
wait_for 60 is_state "$id" succeeded || fail "$id is $(job_state "$id")"
"$sc" status "$id" | grep -q "last checkpoint 0" &&
    "$sc" status "$id" | grep -q "^checkpoint failed: stage [01]: step 10 not written: .*job-$n.*Not a directory" &&
    pass "status says why no checkpoint was written: $("$sc" status "$id" | grep '^checkpoint failed')" ||
    fail "status lacks the checkpoint failure: $("$sc" status "$id" | sed -n 1,5p)"
field "$id" checkpoint_error | grep -q "Not a directory" || fail "status --json lacks checkpoint_error"
finish
