#!/usr/bin/env bash
# Fine-tuning from a Hugging Face checkpoint folder across worker processes: a tied Llama and a
# tied GPT-2 read from tests/data/hf each train as a 2-stage pipeline (the embedding in one
# stage, its tied copy in the head of the other); their stage checkpoints export to a folder
# (`stagecraft export`) that stagecraft reads back and evaluates, and the job's own "export"
# writes the same weights as one part per stage; when a Python with transformers is at hand
# (STAGECRAFT_PYTHON, else python3), transformers loads the job's export (sharded) and gives the
# same loss on the same token windows.
# Usage: test_hf_models.sh PATH/TO/stagecraft
sc=${1:?usage: test_hf_models.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
data=$(cd "$(dirname "$0")/../data/hf" && pwd)
py=${STAGECRAFT_PYTHON:-python3}

state=$work/state
start_coordinator coord "$state"
start_worker a
start_worker b
wait_alive 20 2 || fail "workers did not register"

# a shard of llm.c tokens (vocabulary 96: both test models')
"$py" - "$work/tokens.bin" <<'PY' || fail "cannot write the token shard"
import struct, sys
toks = [(i * 37 + 11) % 96 for i in range(2 * 16 * 3 + 1)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(toks), *toks))
PY
# transformers' mean loss of folder $1 on the shard's windows of 2 x 16
cat >"$work/hf_loss.py" <<'PY'
import struct, sys, torch, transformers
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], attn_implementation="eager")
model = model.float().eval()
raw = open(sys.argv[2], "rb").read()
n = struct.unpack("<3i", raw[:12])[2]
toks = torch.tensor(struct.unpack("<%dH" % n, raw[1024:1024 + 2 * n]))
B, T, tot = 2, 16, 0.0
with torch.no_grad():
    for b in range((n - 1) // (B * T)):
        w = toks[b * B * T: b * B * T + B * T + 1]
        lg = model(w[:-1].view(B, T)).logits
        tot += torch.nn.functional.cross_entropy(lg.reshape(-1, lg.size(-1)), w[1:],
                                                 reduction="sum").item()
print(tot / ((n - 1) // (B * T) * B * T))
PY
ev() { "$sc" eval --model "$1" --data "$work/tokens.bin" --seq-len 16 --batch 2 --json; }
have_transformers=false
"$py" -c 'import torch, transformers' 2>/dev/null && have_transformers=true

finetune() {
    local name=$1 model id out tuned orig ref got
    model='{"kind": "hf", "path": "'$data/$name'", "seq_len": 16, "cpu_kernels": "reference"}'
    echo "$model" | sed 's/^{/{"format": "stagecraft-model", "version": 1, /' >"$work/$name.json"
    cat >"$work/job-$name.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$name", "model": $model,
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 4, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": 12, "seed": 3, "checkpoint_every": 6,
 "optimizer": {"kind": "adamw", "lr": 0.003}, "export": "$work/final-$name"}
JSON
    id=$("$sc" submit "$work/job-$name.json" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p')
    wait_for 240 is_state "$id" succeeded && pass "$name fine-tuned as 2 stages ($id)" ||
        fail "$name: job $id is $(job_state "$id"): $("$sc" status "$id" 2>&1 | tail -5)"

    out=$work/export-$name
    if "$sc" export --model "$work/$name.json" --checkpoints "$work/wstate/checkpoints/$id" \
        --out "$out" --json >"$work/export.out" 2>&1 &&
        grep -q '"step": 12' "$work/export.out" && [ -f "$out/config.json" ] &&
        [ -f "$out/model.safetensors" ]; then
        pass "$name exported at step 12: $(cat "$work/export.out")"
    else
        fail "$name export: $(cat "$work/export.out")"
    fi
    tuned=$(ev "$out")
    orig=$(ev "$data/$name")
    # the job's own export at its end: one part per stage and an index, the same weights
    final=$(ev "$work/final-$name")
    [ -f "$work/final-$name/model.safetensors.index.json" ] && [ "$final" = "$tuned" ] &&
        pass "$name: the job's \"export\" wrote 2 parts and an index, eval $final" ||
        fail "$name: the job's export: '$final' ($(ls "$work/final-$name" 2>&1 | tr '\n' ' '))"
    [ -n "$tuned" ] && [ -n "$orig" ] && [ "$tuned" != "$orig" ] &&
        pass "$name: eval of the export $tuned, of the original $orig" ||
        fail "$name eval: '$tuned' / '$orig'"

    if $have_transformers; then
        ref=$("$py" "$work/hf_loss.py" "$work/final-$name" "$work/tokens.bin" 2>/dev/null)
        got=$(echo "$tuned" | sed 's/.*"loss": \([0-9.e+-]*\).*/\1/')
        awk -v a="$got" -v b="$ref" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-4) }' &&
            pass "$name: transformers loads the export: loss $ref, stagecraft $got" ||
            fail "$name: transformers gives '$ref', stagecraft '$got'"
    fi
}

for m in llama-tied gpt2-tied; do
    finetune $m
done
$have_transformers ||
    echo "note: no Python with torch and transformers ($py): the transformers check is left out"

"$sc" eval --model "$data/gpt2-tied" --data "$work/none.bin" >/dev/null 2>"$work/eval.err"
grep -q "none.bin" "$work/eval.err" && pass "eval names a missing shard: $(cat "$work/eval.err")" ||
    fail "eval with no data: $(cat "$work/eval.err")"
[ "$failures" -eq 0 ]
