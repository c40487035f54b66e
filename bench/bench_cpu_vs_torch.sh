#!/usr/bin/env bash
# The same GPT training step (forward, backward, AdamW; fp32) in stagecraft's CPU kernels
# (bench_kernels, fast path) and in PyTorch eager on this machine, at 1 thread and at all the
# cores this process may use, on three models, best of STEPS steps each, the two programs run
# turn about (twice each) so that both see the same load. Prints milliseconds per step, tokens/s
# and the ratio (PyTorch's step time over stagecraft's: above 1, stagecraft is faster); then the
# 256x768x768 GEMM: the layer's forward, OpenBLAS's own sgemm and torch.mm, in GFLOP/s.
#
# usage: bench/bench_cpu_vs_torch.sh BUILD_DIR [--steps N] [--venv DIR] [--models a,b,c]
#   BUILD_DIR  a build with bench/bench_kernels (RelWithDebInfo or Release)
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
while [ $# -gt 0 ]; do
    case $1 in
    --steps) steps=${2:?--steps N}; shift 2 ;;
    --venv) venv=${2:?--venv DIR}; shift 2 ;;
    --models) models=${2:?--models a,b,c}; shift 2 ;;
    *) echo "bench_cpu_vs_torch: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
bk=$build/bench/bench_kernels
[ -x "$bk" ] || { echo "bench_cpu_vs_torch: no $bk (build the bench_kernels target)" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

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
        sc="" pt="" params=""
        for round in 1 2; do
            out=$("$bk" --model "$tmp/model.json" --batch "$batch" --steps "$steps" --threads "$t" --no-matmul)
            sc=$(min "$sc" "$(echo "$out" | field step_ms)")
            params=$(echo "$out" | field params)
            if [ -n "$py" ]; then
                out=$("$py" "$here/bench_cpu_vs_torch.py" --threads "$t" --steps "$steps" \
                    --gpt "$(echo "$dims" | tr ' ' ',')" --batch "$batch")
                pt=$(min "$pt" "$(echo "$out" | field step_ms)")
                tparams=$(echo "$out" | field params)
                [ "$tparams" = "$params" ] ||
                    echo "note: parameter counts differ: stagecraft $params, PyTorch $tparams"
            fi
        done
        tok=$(awk -v ms="$sc" -v n=$((batch * T)) 'BEGIN { printf "%.0f", n / ms * 1e3 }')
        if [ -n "$pt" ]; then
            ratio=$(awk -v a="$pt" -v b="$sc" 'BEGIN { printf "%.2fx", a / b }')
            printf '%-44s %7s %9.1f ms %9.1f ms %12s %8s\n' "$label ($params params)" "$t" "$sc" "$pt" "$tok" "$ratio"
        else
            printf '%-44s %7s %9.1f ms %12s %12s %8s\n' "$label ($params params)" "$t" "$sc" skipped "$tok" -
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
