#!/usr/bin/env bash
# Pipelined training across worker processes, end to end: a job trains to success with its loss
# falling; a worker killed mid-training sends the job to recovering within the heartbeat timeout;
# the job resumes from its last checkpoint and ends with exactly the weights (and optimizer
# state) of an uninterrupted run of the same job.
# Usage: test_training.sh PATH/TO/stagecraft
sc=${1:?usage: test_training.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

state=$work/state
start_coordinator coord "$state" --heartbeat-ms 200 --dead-after 5
start_worker a
a_pid=$worker_pid
start_worker b
b_pid=$worker_pid
wait_alive 20 2 ||
    fail "workers did not register"

# A fixed partition (uniform) and micro-batch count, so every run splits the model alike.
job() {
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 16, "layers": 2, "width": 32, "heads": 2},
 "data": {"kind": "text", "path": "$work/text.txt"},
 "batch_size": 8, "microbatches": 4, "schedule": "1f1b", "strategy": "uniform",
 "workers": 2, "steps": $2, "seed": 7, "checkpoint_every": 10,
 "optimizer": {"kind": "adamw", "lr": 0.003}}
JSON
}
for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog $((i * 7))"; done \
    >"$work/text.txt"
loss_of() { "$sc" status "$1" --json | sed -n 's/^  "reason": "trained [0-9]* steps; final loss \([0-9.]*\)".*/\1/p'; }

# 1. an uninterrupted run
job plain 400 >"$work/plain.json"
"$sc" submit "$work/plain.json" >/dev/null || fail "submit plain"
wait_for 120 is_state job-1 succeeded && pass "job-1 trained to success" ||
    fail "job-1 is $(job_state job-1): $("$sc" status job-1 | sed -n 2p)"
final=$(loss_of job-1)
awk -v f="$final" 'BEGIN { exit !(f > 0 && f < 5.0) }' && pass "final loss $final < ln(256) = 5.55" ||
    fail "final loss '$final' did not fall"
# the plan records each stage boundary's data plane: CPU workers, so zmq, one per boundary
plan1=$("$sc" status job-1 --json | tr -d ' \n')
cuts=$("$sc" status job-1 --json | jq '.plan.stages | length') # the plan's stages
trs=$(echo "$plan1" | sed -n 's/.*"transports":\[\([^]]*\)\].*/\1/p')
[ -n "$trs" ] && [ "$(echo "$trs" | tr ',' '\n' | grep -c '"zmq"')" -eq $((cuts - 1)) ] &&
    [ "$(echo "$trs" | tr ',' '\n' | grep -vc '"zmq"')" -eq 0 ] &&
    "$sc" status job-1 | grep -q "data plane: 0-1 zmq" &&
    pass "the plan records zmq for each of its $((cuts - 1)) stage boundaries" ||
    fail "plan transports '[$trs]' for $cuts stages (status: $("$sc" status job-1 | grep 'data plane'))"
# and how each stage's copies all-reduce: one copy each here, so "none" for every stage
reds=$(echo "$plan1" | sed -n 's/.*"replica_reduce":\[\([^]]*\)\].*/\1/p')
[ "$(echo "$reds" | tr ',' '\n' | grep -c '"none"')" -eq "$cuts" ] &&
    [ "$(echo "$reds" | tr ',' '\n' | grep -vc '"none"')" -eq 0 ] &&
    pass "the plan records no all-reduce for its $cuts single-copy stages" ||
    fail "plan replica_reduce '[$reds]' for $cuts single-copy stages"

# 2. the same job, with a worker killed mid-training and started again
job killed 400 >"$work/killed.json"
"$sc" submit "$work/killed.json" >/dev/null || fail "submit killed"
# The coordinator resumes from the last step it knows every stage saved (and copied), from reports that go
# out at most every 50 ms while a step takes a few ms: freeze both workers as soon as it knows
# one (>= 10), so the job cannot end before b is killed and it has a checkpoint to resume from.
freeze_when_known 60 job-2 10 "$a_pid" "$b_pid" ||
    fail "job-2 did not checkpoint step 10: $("$sc" status job-2 | sed -n 2,3p)"
# not ended (on a busy machine the frozen workers may already count as dead: recovering)
is_state job-2 running || is_state job-2 recovering ||
    fail "job-2 is $(job_state job-2) before its worker was killed"
kill -KILL "$b_pid"; wait "$b_pid" 2>/dev/null
kill -CONT "$a_pid"
t0=$SECONDS
wait_for 6 is_state job-2 recovering &&
    pass "killed worker: job recovering after $((SECONDS - t0)) s (heartbeat timeout 1 s)" ||
    fail "job-2 is $(job_state job-2) after its worker was killed"
start_worker b
wait_for 120 is_state job-2 succeeded && pass "job-2 resumed and trained to success" ||
    fail "job-2 is $(job_state job-2): $("$sc" status job-2 | sed -n 2p)"
"$sc" status job-2 | grep -q "step:    400 of 400" || fail "job-2 step: $("$sc" status job-2 | sed -n 3p)"
grep -q "from the checkpoint of step" "$work/coord.log" || fail "job-2 did not resume from a checkpoint"

# 3. the resumed run ends with the uninterrupted run's weights and optimizer state, bit for bit
for s in 0 1; do
    f1=$(ls "$work"/wstate/checkpoints/job-1/stage$s-step400.ckpt 2>/dev/null | head -1)
    f2=$(ls "$work"/wstate/checkpoints/job-2/stage$s-step400.ckpt 2>/dev/null | head -1)
    if [ -z "$f1" ] || [ -z "$f2" ]; then
        fail "stage $s: missing final checkpoints ('$f1', '$f2')"
    elif cmp -s "$f1" "$f2"; then
        pass "stage $s: resumed run == uninterrupted run (checkpoint files identical)"
    else
        fail "stage $s: resumed run differs from the uninterrupted run"
    fi
done
[ "$(loss_of job-2)" = "$final" ] || fail "final losses differ: $final vs $(loss_of job-2)"


# 4. every strategy's plan (pipelines, replicated stages, UMPIPE sizes) trains to the same loss:
#    synchronous schedules compute the gradient of the same batch mean. The plans cut the batch
#    into other stages and micro-batches, so the models run the reference CPU kernels, whose
#    sums do not depend on the cut (the fast ones agree to rounding only)
for strat in umpipe pipedream hetero minmax; do
    sed "s/STRAT/$strat/" >"$work/$strat.json" <<'JSON'
{"format": "stagecraft-job", "version": 1, "name": "STRAT",
 "model": {"kind": "mlp", "sizes": [64, 128, 128, 10], "cpu_kernels": "reference"},
 "data": {"kind": "synthetic"}, "batch_size": 16, "strategy": "STRAT", "workers": 2, "steps": 20}
JSON
done
losses=""
for strat in umpipe pipedream hetero minmax; do
    id=$("$sc" submit "$work/$strat.json" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p')
    if wait_for 60 is_state "$id" succeeded; then
        losses="$losses $strat=$(loss_of "$id")"
    else
        fail "$strat job $id is $(job_state "$id"): $("$sc" status "$id" | sed -n 2p)"
    fi
done
echo "final losses:$losses"
[ "$(echo "$losses" | tr ' ' '\n' | sed -n 's/.*=//p' | sort -u | wc -l)" -eq 1 ] &&
    pass "all strategies reach the same loss" || fail "losses differ:$losses"

# 4b. UMPIPE's backward cut: the workers run each stage's backward in the plan's backward_sizes,
#     which the planner's search may choose unlike the forward sizes; such a plan must reach
#     minmax's loss as well. The search runs on measured profiles, so its cut varies from run to
#     run: resubmit (5 plans at most) until one has a stage whose backward cut differs.
ref=$(echo "$losses" | tr ' ' '\n' | sed -n 's/^minmax=//p')
cut_of() {
    "$sc" status "$1" --json | tr -d ' \n' |
        sed -n 's/.*"count":[0-9]*,"sizes":\(\[[][0-9,]*\]\),"backward_sizes":\(\[[][0-9,]*\]\).*/\1 \2/p'
}
differs=""
for _ in 1 2 3 4 5; do
    id=$("$sc" submit "$work/umpipe.json" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p')
    if ! wait_for 60 is_state "$id" succeeded; then
        fail "umpipe job $id is $(job_state "$id"): $("$sc" status "$id" | sed -n 2p)"
        break
    fi
    cut=$(cut_of "$id")
    [ -n "$cut" ] || { fail "umpipe job $id: the plan has no sizes and backward_sizes"; break; }
    [ "$(loss_of "$id")" = "$ref" ] ||
        fail "umpipe plan (forward backward) $cut: final loss $(loss_of "$id"), minmax $ref"
    if [ "${cut% *}" != "${cut#* }" ]; then
        differs=$cut
        break
    fi
done
if [ -n "$differs" ]; then
    pass "umpipe plan with its own backward cut (forward backward: $differs) reaches minmax's loss $ref"
else
    echo "note: 5 umpipe plans kept backward_sizes == sizes; the separate backward cut is covered by unit tests only this run"
fi

# 5. schedules through the coordinator: gpipe, 1f1b, sliced warm-up and zb1 (its workers
#    deferring the W the plan's deferred_w allows: the head's stage none) compute the same update
#    (same loss); asynchronous pipedream (weights updated per micro-batch, drained at the
#    checkpoints) trains too (reference CPU kernels, as in 4)
for sch in gpipe 1f1b sliced zb1 pipedream; do
    sed "s/SCH/$sch/" >"$work/s-$sch.json" <<'JSON'
{"format": "stagecraft-job", "version": 1, "name": "SCH",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 16, "layers": 2, "width": 32, "heads": 2,
           "cpu_kernels": "reference"},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 4, "schedule": "SCH",
 "strategy": "minmax", "stages": 2, "workers": 2, "steps": 12, "checkpoint_every": 5}
JSON
done
sync_losses=""
for sch in gpipe 1f1b sliced zb1 pipedream; do
    id=$("$sc" submit "$work/s-$sch.json" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p')
    if wait_for 60 is_state "$id" succeeded; then
        [ "$sch" = pipedream ] || sync_losses="$sync_losses $(loss_of "$id")"
        pass "$sch job trained (final loss $(loss_of "$id"))"
        if [ "$sch" = zb1 ]; then # every stage told the W it may defer
            dw=$("$sc" status "$id" --json | jq -c '[.plan.stages[] | .deferred_w]')
            echo "$dw" | jq -e 'length > 0 and all(type == "number" and . >= 0)' >/dev/null &&
                pass "the zb1 plan gives every stage its deferred_w $dw" ||
                fail "the zb1 plan's deferred_w: $dw"
        fi
    else
        fail "$sch job $id is $(job_state "$id"): $("$sc" status "$id" | sed -n 2p)"
    fi
done
[ "$(echo "$sync_losses" | tr ' ' '\n' | sed '/^$/d' | sort -u | wc -l)" -eq 1 ] &&
    pass "gpipe, 1f1b, sliced and zb1 reach the same loss" || fail "losses differ:$sync_losses"

# 5b. asynchronous pipedream with a replicated stage (1F1B-RR): PipeDream's planner on the two
#     workers tends to give both to one stage; the coordinator now keeps such a plan (before, it
#     fell back to an unreplicated one), raising the open micro-batch count to a multiple of the
#     copies. The plan comes from measured profiles, so resubmit (3 plans at most) until one
#     replicates; the job flushes and checkpoints with copies, and its loss falls below ln(10).
sed 's/STRAT/pipedream/; s/"steps": 20}/"steps": 40, "schedule": "pipedream", "checkpoint_every": 10}/' \
    >"$work/pd-repl.json" <<'JSON'
{"format": "stagecraft-job", "version": 1, "name": "STRAT-replicated",
 "model": {"kind": "mlp", "sizes": [64, 128, 128, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 16, "strategy": "STRAT", "workers": 2, "steps": 20}
JSON
replicated=""
for _ in 1 2 3; do
    id=$("$sc" submit "$work/pd-repl.json" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p')
    if ! wait_for 60 is_state "$id" succeeded; then
        fail "pipedream replicated job $id is $(job_state "$id"): $("$sc" status "$id" | sed -n 2p)"
        break
    fi
    plan=$("$sc" status "$id" --json | tr -d ' \n')
    echo "$plan" | grep -q '"schedule":"pipedream"' || fail "job $id: the plan's schedule is not pipedream"
    echo "$plan" | grep -q "cannot run" && fail "job $id fell back: $(echo "$plan" | grep -o '"note":"[^"]*"')"
    final=$(loss_of "$id")
    awk -v f="$final" 'BEGIN { exit !(f > 0 && f < 2.303) }' ||
        fail "job $id: final loss '$final' did not fall below ln(10) = 2.303"
    if echo "$plan" | grep -q '"replicas":[2-9]'; then
        replicated=$(echo "$plan" | grep -o '"stages":\[{"first_block":[0-9]*,"last_block":[0-9]*,"devices":\[[0-9,]*\]')
        # CPU copies all-reduce in host memory, and status says so
        echo "$plan" | grep -q '"replica_reduce":\[[^]]*"host"' &&
            "$sc" status "$id" | grep -q "gradient all-reduce: stage [0-9]* host memory" ||
            fail "job $id: its CPU copies' all-reduce is not recorded as host memory: $(echo "$plan" | grep -o '"replica_reduce":\[[^]]*\]')"
        break
    fi
done
if [ -n "$replicated" ]; then
    pass "pipedream job with a replicated stage ($replicated) trained (final loss $final < ln(10))"
else
    echo "note: 3 pipedream plans replicated no stage; replicated pipedream is covered by unit tests only this run"
fi

# 6. data a worker cannot read fails the job, naming the file, instead of re-planning forever
sed 's|"path": "[^"]*"|"path": "/nonexistent/corpus.txt"|' "$work/plain.json" >"$work/nodata.json"
id=$("$sc" submit "$work/nodata.json" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p')
wait_for 30 is_state "$id" failed && "$sc" status "$id" | grep -q "/nonexistent/corpus.txt" &&
    pass "unreadable data: job failed naming the file" ||
    fail "unreadable data: $id is $(job_state "$id"): $("$sc" status "$id" | sed -n 2p)"
finish
