#!/usr/bin/env bash
# A bf16 job and an fp16 job train as the fp32 job does: two CPU workers (the CPU computes the
# GPUs' 16-bit numerics), a GPT on the learnable synthetic chain, the same seed and steps; the
# activations and gradients between the two workers cross in 16 bits. Each 16-bit job's final
# loss is within 2% of the fp32 job's, the plan names the precision, and the loss really moved
# (from about ln(vocab) at the start).
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
    wait_for 240 is_state "job-$n" succeeded || {
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
finish
