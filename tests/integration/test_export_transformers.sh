#!/usr/bin/env bash
# transformers loads what stagecraft exports: each tiny checkpoint of tests/data/hf (GPT-2 and
# Llama, tied and untied) trains a few steps as a 2-stage job on worker processes, the tied GPT-2
# once more as hetero plans it on 4 workers (replicated stages where the plan has them); the
# job's own "export" (one part per stage, an index) and `stagecraft export JOB`
# (one file) are then checked by tests/data/hf/check_export.py: from_pretrained loads the folder
# with no key missing or unexpected, every tensor equals the file bit for bit, and the loss of
# its logits on fixed token windows is `stagecraft eval`'s, per batch, within 1e-5.
# Needs a Python with torch, transformers and safetensors (STAGECRAFT_PYTHON, else python3):
# skipped (exit 77) without them.
# Usage: test_export_transformers.sh PATH/TO/stagecraft
sc=${1:?usage: test_export_transformers.sh PATH/TO/stagecraft}
py=${STAGECRAFT_PYTHON:-python3}
if ! "$py" -c 'import torch, transformers, safetensors' >/dev/null 2>&1; then
    echo "SKIP: no Python with torch, transformers and safetensors ($py; set STAGECRAFT_PYTHON)"
    exit 77
fi
. "$(dirname "$0")/lib.sh"
data=$(cd "$(dirname "$0")/../data/hf" && pwd)
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1

start_coordinator coord "$work/state"
for w in a b c d; do start_worker "$w"; done
wait_alive 20 4 || fail "workers did not register"

# the stage count and the most copies of a stage in job $1's plan
plan_shape() {
    "$sc" status "$1" --json | "$py" -c '
import json, sys
p = json.load(sys.stdin).get("plan") or {}
st = p.get("stages") or []
print(len(st), max([len(s.get("devices") or []) for s in st] or [0]))'
}

train() { # NAME MODEL WORKERS STRATEGY
    local name=$1 model=$2 workers=$3 strategy=$4 id
    local spec='{"kind": "hf", "path": "'$data/$model'", "seq_len": 16, "cpu_kernels": "reference"}'
    cat >"$work/job-$name.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$name", "model": $spec,
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 4, "schedule": "1f1b",
 "strategy": "$strategy", "workers": $workers, "steps": 6, "seed": 3,
 "checkpoint_every": 6, "rebalance": "off", "optimizer": {"kind": "adamw", "lr": 0.003},
 "export": "$work/final-$name"}
JSON
    id=$("$sc" submit "$work/job-$name.json" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p')
    if wait_for 240 is_state "$id" succeeded; then
        pass "$name trained 6 steps ($id, plan: stages and most copies $(plan_shape "$id"))"
    else
        fail "$name: job $id is $(job_state "$id"): $("$sc" status "$id" 2>&1 | tail -5)"
        return 1
    fi
    job_id=$id
}

check() { # WHAT FOLDER
    if "$py" "$data/check_export.py" "$2" --stagecraft "$sc" >"$work/check.out" 2>&1; then
        pass "$1: $(tr -s ' \n' ' ' <"$work/check.out")"
    else
        fail "$1: $(cat "$work/check.out")"
    fi
}

for m in gpt2-tied gpt2-untied llama-tied llama-untied; do
    train "$m" "$m" 2 uniform || continue
    [ "$(plan_shape "$job_id")" = "2 1" ] ||
        fail "$m: expected 2 stages without copies, the plan has (stages, copies) $(plan_shape "$job_id")"
    [ -f "$work/final-$m/model.safetensors.index.json" ] ||
        fail "$m: the job's export has no index: $(ls "$work/final-$m" 2>&1 | tr '\n' ' ')"
    check "$m, the job's export (one part per stage)" "$work/final-$m"
    "$sc" export "$job_id" --out "$work/export-$m" >"$work/export.out" 2>&1 ||
        fail "$m: export $job_id: $(cat "$work/export.out")"
    check "$m, stagecraft export $job_id (one file)" "$work/export-$m"
    cmp -s "$work/export-$m/model.safetensors" "$data/$m/model.safetensors" &&
        fail "$m: the export holds the untrained weights"
done

# the tied GPT-2 planned by hetero on 4 workers, which replicates stages where the measured
# profiles make copies pay (not every time: the unit tests cover copies of either end); the
# export is checked whatever the plan
if train gpt2-tied-hetero gpt2-tied 4 hetero; then
    read -r stages copies <<<"$(plan_shape "$job_id")"
    echo "note: the tied model's hetero plan: $stages stages, up to $copies copies of a stage"
    check "gpt2-tied on hetero's plan, the job's export" "$work/final-gpt2-tied-hetero"
fi
finish
