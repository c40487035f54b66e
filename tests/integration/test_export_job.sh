#!/usr/bin/env bash
# `stagecraft export JOB`: a tiny Llama read from tests/data/hf trains as a 2-stage job on two
# workers with their own state folders (as on two machines); `export JOB --out D` fetches each
# stage's checkpoint blocks from the workers' block servers and writes D, bit for bit the folder
# the checkpoint-folder form (--model, --checkpoints) writes from the same stage files gathered
# by hand, for the last complete checkpoint and for an older --step. D evaluates with
# `stagecraft eval`; when a Python with transformers is at hand (STAGECRAFT_PYTHON, else
# python3), transformers loads D and gives the same loss. Refused, with a non-zero exit and a
# message saying why: an unknown job, a job with no complete checkpoint, a step past the last
# one, a model kind that is not exported (mlp), no client token, and workers that do not answer.
# Usage: test_export_job.sh PATH/TO/stagecraft
sc=${1:?usage: test_export_job.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
data=$(cd "$(dirname "$0")/../data/hf" && pwd)
py=${STAGECRAFT_PYTHON:-python3}

start_coordinator coord "$work/state"
start_worker a --state "$work/wa"
a_pid=$worker_pid
start_worker b --state "$work/wb"
b_pid=$worker_pid
wait_alive 20 2 || fail "workers did not register"

submit() { "$sc" submit "$1" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p'; }
model='{"kind": "hf", "path": "'$data/llama-untied'", "seq_len": 16, "cpu_kernels": "reference"}'
echo "$model" | sed 's/^{/{"format": "stagecraft-model", "version": 1, /' >"$work/model.json"
job() { # NAME STEPS EXTRA MODEL
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1", "model": ${4:-$model},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 4, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": $2, "seed": 5, "rebalance": "off",
 "optimizer": {"kind": "adamw", "lr": 0.003}$3}
JSON
}
job llama 12 ', "checkpoint_every": 6, "checkpoint_keep": 0' >"$work/job.json"
id=$(submit "$work/job.json")
wait_for 240 is_state "$id" succeeded && pass "llama trained as 2 stages ($id)" ||
    fail "job $id is $(job_state "$id"): $("$sc" status "$id" 2>&1 | tail -5)"

# the checkpoint-folder form, from the stage files of both workers gathered in one folder
mkdir -p "$work/gathered"
cp "$work"/w[ab]/checkpoints/"$id"/stage*-step*.ckpt "$work/gathered/" ||
    fail "no stage checkpoints: $(ls -R "$work"/w[ab]/checkpoints 2>&1 | head)"
by_files() { # OUT [--step N]
    local out=$1
    shift
    "$sc" export --model "$work/model.json" --checkpoints "$work/gathered" --out "$out" "$@" \
        >"$work/files.out" 2>&1 || fail "checkpoint-folder export: $(cat "$work/files.out")"
}
same_folder() { cmp -s "$1/model.safetensors" "$2/model.safetensors" && cmp -s "$1/config.json" "$2/config.json"; }

if "$sc" export "$id" --out "$work/d12" --json >"$work/export.out" 2>&1 &&
    grep -q '"step": 12' "$work/export.out"; then
    pass "export $id: $(cat "$work/export.out")"
else
    fail "export $id: $(cat "$work/export.out")"
fi
by_files "$work/f12"
same_folder "$work/d12" "$work/f12" &&
    pass "export JOB wrote the same bytes as the checkpoint-folder form (step 12)" ||
    fail "export JOB and the checkpoint-folder form differ: $(ls -l "$work/d12" "$work/f12" 2>&1)"
"$sc" export "$id" --step 6 --out "$work/d6" >"$work/export6.out" 2>&1 ||
    fail "export --step 6: $(cat "$work/export6.out")"
by_files "$work/f6" --step 6
same_folder "$work/d6" "$work/f6" && ! cmp -s "$work/d6/model.safetensors" "$work/d12/model.safetensors" &&
    pass "export JOB --step 6: $(cat "$work/export6.out")" ||
    fail "export --step 6 differs from the checkpoint-folder form, or equals step 12"

# a shard of llm.c tokens (vocabulary 96) for eval
"$py" - "$work/tokens.bin" <<'PY' || fail "cannot write the token shard"
import struct, sys
toks = [(i * 37 + 11) % 96 for i in range(2 * 16 * 3 + 1)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(toks), *toks))
PY
tuned=$("$sc" eval --model "$work/d12" --data "$work/tokens.bin" --seq-len 16 --batch 2 --json)
orig=$("$sc" eval --model "$data/llama-untied" --data "$work/tokens.bin" --seq-len 16 --batch 2 --json)
[ -f "$work/d12/config.json" ] && [ -n "$tuned" ] && [ "$tuned" != "$orig" ] &&
    pass "eval of the export $tuned, of the original $orig" || fail "eval: '$tuned' / '$orig'"
if "$py" -c 'import torch, transformers' 2>/dev/null; then
    ref=$("$py" - "$work/d12" "$work/tokens.bin" <<'PY'
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
)
    got=$(echo "$tuned" | sed 's/.*"loss": \([0-9.e+-]*\).*/\1/')
    awk -v a="$got" -v b="$ref" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-4) }' &&
        pass "transformers loads the export: loss $ref, stagecraft $got" ||
        fail "transformers gives '$ref', stagecraft '$got'"
else
    echo "note: no Python with torch and transformers ($py): the transformers check is left out"
fi

# refused: exit status non-zero, stderr saying why
refused() { # WHAT PATTERN ARGS...
    local what=$1 pattern=$2
    shift 2
    if "$sc" export "$@" >"$work/refused.out" 2>&1; then
        fail "$what: exported anyway: $(cat "$work/refused.out")"
    elif grep -q "$pattern" "$work/refused.out"; then
        pass "$what: $(cat "$work/refused.out")"
    else
        fail "$what: '$(cat "$work/refused.out")' does not say '$pattern'"
    fi
}
refused "unknown job" "no job 'job-999'" job-999 --out "$work/x"
refused "step past the last checkpoint" "last complete checkpoint is of step 12" "$id" --step 18 --out "$work/x"
echo wrong >"$work/wrong.token"
refused "a wrong client token" "needs the client token" "$id" --out "$work/x" --token-file "$work/wrong.token"
refused "JOB with --checkpoints" "not both" "$id" --out "$work/x" --checkpoints "$work/gathered"
job plain 400 "" >"$work/plain.json"
plain=$(submit "$work/plain.json")
refused "a job with no checkpoint" "has no complete checkpoint" "$plain" --out "$work/x"
# (cancelled, or done already on a fast machine: either frees the workers for the next)
ended() { is_state "$1" cancelled || is_state "$1" succeeded; }
"$sc" cancel "$plain" >/dev/null 2>&1
wait_for 60 ended "$plain" || fail "$plain did not end: $(job_state "$plain")"
job mlp 400 ', "checkpoint_every": 5' '{"kind": "mlp", "sizes": [32, 64, 64, 10]}' >"$work/mlp.json"
mlp=$(submit "$work/mlp.json")
refused "an mlp job" 'kind "hf" (GPT-2, Llama)' "$mlp" --out "$work/x"
"$sc" cancel "$mlp" >/dev/null 2>&1
wait_for 60 ended "$mlp" || fail "$mlp did not end: $(job_state "$mlp")"

# workers that do not answer (stopped): every one asked is named with why
kill -STOP "$a_pid" "$b_pid"
refused "stopped workers" "no answer within 300 ms" "$id" --out "$work/x" --timeout-ms 300
kill -CONT "$a_pid" "$b_pid"
[ ! -e "$work/x" ] && pass "nothing written by a refused export" || fail "$work/x was written"
[ "$failures" -eq 0 ]
