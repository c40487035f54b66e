#!/usr/bin/env bash
# The same GPT training step (forward, backward, AdamW; fp32) in stagecraft's CPU kernels
# (bench_kernels, fast path) and in PyTorch eager on this machine, at 1 thread and at all the
# cores this process may use, on three models, best of STEPS steps each, the two programs run
# turn about (twice each) so that both see the same load. Prints milliseconds per step, tokens/s
# and the ratio (PyTorch's step time over stagecraft's: above 1, stagecraft is faster); then the
# 256x768x768 GEMM: the layer's forward, OpenBLAS's own sgemm and torch.mm, in GFLOP/s.
#
# With --job, also what a user sees: a one-worker job (a coordinator and one `stagecraft worker
# --threads N` on this machine, synthetic data, one micro-batch per step) trains the same model,
# and its iteration time is read from `stagecraft status --json` in the job's second half
# (polled every 3 s once training runs; batch / samples_per_s over the last seconds: wall-clock,
# control and data overheads included), against PyTorch's mean step (a mean against a mean: the
# job's figure is no best-of); status's
# measured_iteration_s (the stage's own timing) is printed beside it.
#
# usage: bench/bench_cpu_vs_torch.sh BUILD_DIR [--steps N] [--venv DIR] [--models a,b,c] [--job]
#   BUILD_DIR  a build with bench/bench_kernels (RelWithDebInfo or Release), and cli/stagecraft
#              for --job
#   --venv     where PyTorch is installed (default BUILD_DIR/bench-torch-venv): made with
#              python3 -m venv and pip (the CPU wheel index, else PyPI) when it has no torch;
#              without network or python3-venv the PyTorch column says "skipped"
#   --models   which rows (default a,b,c): a = 4 layers, width 128, seq 64, vocab 256, batch 4;
#              b = 2 layers, width 768, seq 128, vocab 1024, batch 4; c = GPT-2 124M shapes
#              (12 layers, width 768, 12 heads, vocab 50257), seq 256, batch 1
set -euo pipefail

build=${1:?usage: bench_cpu_vs_torch.sh BUILD_DIR [--steps N] [--venv DIR] [--models a,b,c]}
shift
steps=5
venv=$build/bench-torch-venv
models=a,b,c
jobs=0
while [ $# -gt 0 ]; do
    case $1 in
    --steps) steps=${2:?--steps N}; shift 2 ;;
    --venv) venv=${2:?--venv DIR}; shift 2 ;;
    --models) models=${2:?--models a,b,c}; shift 2 ;;
    --job) jobs=1; shift ;;
    *) echo "bench_cpu_vs_torch: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
bk=$build/bench/bench_kernels
[ -x "$bk" ] || { echo "bench_cpu_vs_torch: no $bk (build the bench_kernels target)" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
coord_pid="" worker_pid=""
cleanup() {
    [ -n "$worker_pid" ] && kill "$worker_pid" 2>/dev/null && wait "$worker_pid" 2>/dev/null
    [ -n "$coord_pid" ] && kill "$coord_pid" 2>/dev/null && wait "$coord_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

# --- PyTorch, in its own virtual environment ------------------------------------------------
py=""
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    py=$venv/bin/python
elif python3 -m venv "$venv" >"$tmp/venv.log" 2>&1; then
    echo "bench_cpu_vs_torch: installing PyTorch into $venv (once)"
    if "$venv/bin/pip" install -q --index-url https://download.pytorch.org/whl/cpu torch \
        >>"$tmp/venv.log" 2>&1 || "$venv/bin/pip" install -q torch >>"$tmp/venv.log" 2>&1; then
        py=$venv/bin/python
    fi
fi
if [ -z "$py" ]; then
    echo "bench_cpu_vs_torch: PyTorch unavailable (no network or no python3-venv); its column is skipped"
    tail -2 "$tmp/venv.log" 2>/dev/null | sed 's/^/  /'
fi

cores=$(nproc)
echo "machine: $(nproc) cores available ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average $(cut -d' ' -f1-3 /proc/loadavg)"
[ -n "$py" ] && echo "PyTorch $("$py" -c 'import torch; print(torch.__version__)'), stagecraft $bk"

spec() { # V T L C H -> a stagecraft-model file
    printf '{"format": "stagecraft-model", "version": 1, "kind": "gpt", "vocab": %s, "seq_len": %s, "layers": %s, "width": %s, "heads": %s}\n' "$@" >"$tmp/model.json"
}
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | tail -1; }
min() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "") print b; else if (b == "" || a < b) print a; else print b }'; }

# row LABEL THREADS SC_MS TORCH_MS TOKENS_PER_STEP
row() {
    local tok ratio
    tok=$(awk -v ms="$3" -v n="$5" 'BEGIN { printf "%.0f", n / ms * 1e3 }')
    if [ -n "$4" ]; then
        ratio=$(awk -v a="$4" -v b="$3" 'BEGIN { printf "%.2fx", a / b }')
        printf '%-44s %7s %9.1f ms %9.1f ms %12s %8s\n' "$1" "$2" "$3" "$4" "$tok" "$ratio"
    else
        printf '%-44s %7s %9.1f ms %12s %12s %8s\n' "$1" "$2" "$3" skipped "$tok" -
    fi
}

# job_iteration THREADS V T L C H BATCH STEPS: a one-worker job's iteration in ms (batch over
# samples_per_s, read at 90% of its steps), then its stage's own measured iteration in ms
sc=$build/cli/stagecraft
job_iteration() {
    local t=$1 V=$2 T=$3 L=$4 C=$5 H=$6 batch=$7 steps=$8
    rm -rf "$tmp/state" "$tmp/wstate"
    "$sc" coordinator --listen 127.0.0.1:0 --state "$tmp/state" >"$tmp/coord.log" 2>&1 &
    coord_pid=$!
    until grep -q "listening on port" "$tmp/coord.log"; do sleep 0.1; done
    local port
    port=$(sed -n 's/^coordinator listening on port \([0-9]*\).*/\1/p' "$tmp/coord.log")
    STAGECRAFT_COORDINATOR=127.0.0.1:$port
    STAGECRAFT_JOIN_TOKEN=$(cat "$tmp/state/join.token")
    STAGECRAFT_TOKEN=$(cat "$tmp/state/client.token")
    export STAGECRAFT_COORDINATOR STAGECRAFT_JOIN_TOKEN STAGECRAFT_TOKEN
    "$sc" worker --name w --state "$tmp/wstate" --threads "$t" >"$tmp/worker.log" 2>&1 &
    worker_pid=$!
    until "$sc" workers --json 2>/dev/null | grep -q '"alive"'; do sleep 0.2; done
    cat >"$tmp/job.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "cpu-vs-torch",
 "model": {"kind": "gpt", "vocab": $V, "seq_len": $T, "layers": $L, "width": $C, "heads": $H},
 "data": {"kind": "synthetic"}, "batch_size": $batch, "microbatches": 1, "workers": 1,
 "steps": $steps, "optimizer": {"kind": "adamw", "lr": 0.0003}}
JSON
    local id st prev="" state step
    id=$("$sc" submit "$tmp/job.json" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p')
    while :; do
        st=$("$sc" status "$id" --json)
        state=$(jq -r '"\(.state) \(.step)"' <<<"$st")
        step=${state#* } state=${state% *}
        case $state in succeeded | failed | cancelled) break ;; esac
        # the figures of the second half (the throughput is over the coordinator's window, so
        # nothing is lost between polls); the job's last running figures, its end clears them
        [ "$state" = running ] && [ "$step" -ge $((steps / 2)) ] 2>/dev/null && prev=$st
        # a poll (a process, its RPC, jq) costs CPU beside a worker that uses every core: the
        # 2-thread job ran 5-10% slower polled every 0.5 s than every 4 s, so once training
        # runs, rarely
        if [ "$step" -ge 1 ] 2>/dev/null; then sleep 3; else sleep 0.5; fi
    done
    [ -n "$prev" ] || prev=$st
    kill "$worker_pid" "$coord_pid" 2>/dev/null
    wait "$worker_pid" "$coord_pid" 2>/dev/null || true
    worker_pid="" coord_pid=""
    [ "$state" = succeeded ] || { echo "job $state: $(jq -r .reason <<<"$st")" >&2; return; }
    jq -r --argjson b "$batch" 'if .samples_per_s > 0 then "\($b / .samples_per_s * 1000) \(.measured_iteration_s * 1000)" else empty end' <<<"$prev"
}

printf '%-44s %7s %12s %12s %12s %8s\n' model threads "stagecraft" "PyTorch" "tokens/s sc" "ratio"
for m in ${models//,/ }; do
    case $m in
    a) dims="256 64 4 128 4"; batch=4; label="L4 C128 T64 V256, batch 4" ;;
    b) dims="1024 128 2 768 12"; batch=4; label="L2 C768 T128 V1024, batch 4" ;;
    c) dims="50257 256 12 768 12"; batch=1; label="GPT-2 124M (V50257), T256, batch 1" ;;
    *) echo "bench_cpu_vs_torch: unknown model '$m' (valid: a, b, c)" >&2; exit 2 ;;
    esac
    set -- $dims
    spec "$@"
    T=$2
    for t in 1 "$cores"; do
        sck="" pt="" ptm="" params=""
        for _ in 1 2; do
            out=$("$bk" --model "$tmp/model.json" --batch "$batch" --steps "$steps" --threads "$t" --no-matmul)
            sck=$(min "$sck" "$(echo "$out" | field step_ms)")
            params=$(echo "$out" | field params)
            if [ -n "$py" ]; then
                out=$("$py" "$here/bench_cpu_vs_torch.py" --threads "$t" --steps "$steps" \
                    --gpt "$(echo "$dims" | tr ' ' ',')" --batch "$batch")
                pt=$(min "$pt" "$(echo "$out" | field step_ms)")
                ptm=$(min "$ptm" "$(echo "$out" | field mean_ms)")
                tparams=$(echo "$out" | field params)
                [ "$tparams" = "$params" ] ||
                    echo "note: parameter counts differ: stagecraft $params, PyTorch $tparams"
            fi
        done
        row "$label ($params params)" "$t" "$sck" "$pt" $((batch * T))
        if [ "$jobs" = 1 ]; then
            # long enough for several polls in the second half (about 20 s or more)
            case $m in a) job_steps=1500 ;; b) job_steps=80 ;; c) job_steps=12 ;; esac
            js=$(job_iteration "$t" $dims "$batch" "$job_steps")
            if [ -n "$js" ]; then
                set -- $js
                # a job's iteration is a mean over many steps: against PyTorch's mean step
                row "  one-worker job (stage alone $(printf %.1f "$2") ms)" "$t" "$1" "$ptm" $((batch * T))
            fi
        fi
    done
done

echo "GEMM 256x768 @ 768x768^T (GFLOP/s, best of 10+):"
for t in 1 "$cores"; do
    line=$("$bk" --threads "$t" --steps 1 | grep -m1 '^matmul 256x768')
    torch_g=skipped
    [ -n "$py" ] && torch_g=$("$py" "$here/bench_cpu_vs_torch.py" --threads "$t" --gemm 256,768,768 | field gflops)
    echo "  threads $t: ${line#*: }; torch.mm $torch_g"
done
