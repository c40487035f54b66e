#!/usr/bin/env bash
# A model too big for the workers' memory fails its job with a message that says so, from the
# memory model, before any worker profiles it: the worker stays free and trains the next job.
# Usage: test_model_too_big.sh PATH/TO/stagecraft
sc=${1:?usage: test_model_too_big.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

start_coordinator coord "$work/state"
start_worker a
wait_alive 20 1 || fail "the worker did not register"
submit() { "$sc" submit "$1" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p'; }
# job NAME LAYERS WIDTH HEADS STEPS
job() {
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 16, "layers": $2, "width": $3, "heads": $4},
 "data": {"kind": "synthetic"}, "batch_size": 4, "microbatches": 2, "workers": 1,
 "steps": $5, "seed": 3, "optimizer": {"kind": "adamw", "lr": 0.001}}
JSON
}
# 96 layers of width 16384: some 3e11 parameters, 5 TB of weights, gradients and moments
job huge 96 16384 16 10 >"$work/huge.json"
id=$(submit "$work/huge.json")
wait_for 60 is_state "$id" failed || fail "$id is $(job_state "$id")"
why=$("$sc" status "$id" | sed -n 2p)
echo "$why" | grep -q "the model does not fit on the 1 worker(s) chosen: its .* parameters need .* GB to train with adamw .* valid: a smaller model" &&
    pass "the huge model is refused: $why" || fail "the refusal does not say why: $why"
"$sc" status "$id" | grep -q "profiling" &&
    fail "the huge model was profiled: $("$sc" status "$id" | grep -A10 history)"
grep -q "profil" "$work/a.log" && fail "the worker profiled the huge model: $(grep profil "$work/a.log" | head -3)"
worker_is a alive || fail "the worker is $(worker_state a)"

job small 2 32 2 5 >"$work/small.json"
id=$(submit "$work/small.json")
wait_for 120 is_state "$id" succeeded && pass "the next job trains on the same worker" ||
    fail "$id is $(job_state "$id"): $("$sc" status "$id" | sed -n 2p)"
finish
