#!/usr/bin/env bash
# A bf16 job and an fp16 job train as the fp32 job does: two CPU workers (the CPU computes the
# GPUs' 16-bit numerics), a GPT on the learnable synthetic chain, the same seed and steps; the
# activations and gradients between the two workers cross in 16 bits. Each 16-bit job's final
# loss is within 2% of the fp32 job's, the plan names the precision, and the loss really moved
# (from about ln(vocab) at the start). An fp16 job whose loss scale starts far too high skips
# its first steps on every stage, halves the scale until the gradients fit (then grows it back
# as they shrink), says so in status, and trains.
# Usage: test_precision_job.sh PATH/TO/stagecraft
sc=${1:?usage: test_precision_job.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

steps=300
[ "${STAGECRAFT_SLOW_BUILD:-0}" = 1 ] && steps=150

start_coordinator coord "$work/state"
start_worker a
start_worker b
wait_alive 20 2 || fail "workers did not register"

n=0
declare -A loss
for prec in fp32 bf16 fp16; do
    n=$((n + 1))
    cat >"$work/$prec.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "prec-$prec",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 16, "layers": 2, "width": 32, "heads": 2},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": $steps, "rebalance": "off", "seed": 5,
 "precision": "$prec", "optimizer": {"kind": "adamw", "lr": 0.003}}
JSON
    "$sc" submit "$work/$prec.json" >/dev/null || fail "submit $prec"
    wait_for 120 is_state "job-$n" succeeded || {
        fail "$prec: job-$n is $(job_state "job-$n")"
        continue
    }
    "$sc" status "job-$n" --json >"$work/$prec.status"
    loss[$prec]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["loss"])' \
        "$work/$prec.status")
    plan_prec=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("plan", {}).get("precision", d.get("precision", "")))' \
        "$work/$prec.status")
    echo "  $prec: final loss ${loss[$prec]} (plan: $plan_prec)"
    [ "$plan_prec" = "$prec" ] || fail "$prec: the status names precision \"$plan_prec\""
done
[ -n "${loss[fp32]:-}" ] || { finish; exit; }
python3 - "${loss[fp32]}" "${loss[bf16]:-nan}" "${loss[fp16]:-nan}" <<'PY' && pass "bf16 and fp16 final losses within 2% of fp32's, and below half of ln(64)" || fail "16-bit losses stray from fp32's: ${loss[*]}"
import math, sys
f32, b16, f16 = map(float, sys.argv[1:])
ok = f32 < 0.5 * math.log(64)
for x in (b16, f16):
    ok = ok and math.isfinite(x) and abs(x - f32) <= 0.02 * f32
sys.exit(0 if ok else 1)
PY
n=$((n + 1))
sed -e 's/"name": "prec-fp16"/"name": "prec-fp16-scaled"/' \
    -e 's/"precision": "fp16"/"precision": "fp16", "loss_scale": {"initial": 16777216, "interval": 50}/' \
    "$work/fp16.json" >"$work/fp16s.json"
"$sc" submit "$work/fp16s.json" >/dev/null || fail "submit the scaled fp16 job"
if wait_for 120 is_state "job-$n" succeeded; then
    "$sc" status "job-$n" --json >"$work/fp16s.status"
    python3 - "$work/fp16s.status" <<'PY' && pass "fp16 from a scale of 2^24: steps skipped on an overflow, the scale moved, the loss trained" || fail "the scaled fp16 job: $(cat "$work/fp16s.status" | head -c 600)"
import json, math, sys
d = json.load(open(sys.argv[1]))
print(f"  fp16 scaled: loss {d['loss']}, loss scale {d.get('loss_scale')}, skipped {d.get('skipped_steps')}")
ok = 1 <= d.get("skipped_steps", 0) < 100 and d.get("loss_scale", 0) >= 1
ok = ok and math.isfinite(d["loss"]) and d["loss"] < 0.5 * math.log(64)
sys.exit(0 if ok else 1)
PY
    "$sc" status "job-$n" | grep -q "^fp16:    loss scale .* step(s) skipped on an overflow" ||
        fail "status shows no fp16 line: $("$sc" status "job-$n" | head -n 8)"
else
    fail "the scaled fp16 job is $(job_state "job-$n")"
fi
finish
