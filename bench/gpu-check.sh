#!/usr/bin/env bash
# Checks stagecraft on a GPU machine. Logs go to $OUT (default ./gpu-check-out).
#
#   bench/gpu-check.sh [DEBS_DIR]
#
# The layer library alone: builds common/ and kernels/ with CUDA (STAGECRAFT_KERNELS_ONLY, which
# needs only jansson and cmocka besides the CUDA toolkit), runs the CPU and GPU tests (tests/gpu:
# every CUDA op against the CPU reference, whole models), and the GPU benchmark (GPT-2 124M step:
# tokens/s, MFU, matmul vs cuBLAS) with PyTorch eager's same step beside it where python3 has it.
# DEBS_DIR (optional): Debian packages of jansson and cmocka for a machine that lacks them, e.g.
# made on a Debian 12 machine with
#   mkdir -p .gpudeps && (cd .gpudeps && apt-get download libjansson4 libjansson-dev \
#       libcmocka0 libcmocka-dev)
# They are unpacked under /tmp/stagecraft-deps and found through pkg-config.
#
#   bench/gpu-check.sh --full BUNDLE_DIR
#
# The whole project on a machine without its Debian packages: BUNDLE_DIR/debs holds the .deb
# files of deploy/offline-bundle.sh (about 47 MB; made on a Debian 12 machine with network).
# They are unpacked under /tmp/stagecraft-bundle and used through deploy/offline-env.sh. NCCL
# comes from NCCL_ROOT, else /usr/local/cuda, else the nvidia-nccl Python package of the machine's
# python3 (headers and libnccl.so.2, linked under /tmp/stagecraft-nccl). Builds everything with
# CUDA and NCCL, runs every test (the GPU ones included: the kernels, the nccl transport, GPU
# stages), then bench_stages (whole model vs stages on one GPU) and bench_kernels_gpu.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$top/gpu-check-out}
mkdir -p "$out"
cuda=${CUDAToolkit_ROOT:-$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")}

# unpack_debs DIR ROOT: every DIR/*.deb into ROOT
unpack_debs() {
    mkdir -p "$2"
    for d in "$1"/*.deb; do
        if command -v dpkg-deb >/dev/null; then
            dpkg-deb -x "$d" "$2"
        else # no dpkg: a .deb is an ar archive holding data.tar.*
            (cd "$(mktemp -d)" && ar x "$d" && tar xf data.tar.* -C "$2")
        fi
    done
}

# find_nccl: sets NCCL_ROOT to a folder with include/nccl.h and lib/libnccl.so, or fails
find_nccl() {
    if [ -n "${NCCL_ROOT:-}" ] || [ -f "$cuda/include/nccl.h" ]; then
        return 0
    fi
    # the wheel's layout differs between CUDA versions: look for its header
    local sites hdr pkg lib
    sites=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) || return 1
    # shellcheck disable=SC2086
    hdr=$(find $sites -path '*nvidia*' -name nccl.h 2>/dev/null | head -1)
    [ -n "$hdr" ] || return 1
    pkg=$(dirname "$(dirname "$hdr")")
    lib=$(ls "$pkg"/lib/libnccl.so* 2>/dev/null | head -1)
    [ -n "$lib" ] || return 1
    mkdir -p /tmp/stagecraft-nccl/lib
    ln -sfn "$pkg/include" /tmp/stagecraft-nccl/include
    ln -sf "$lib" /tmp/stagecraft-nccl/lib/libnccl.so
    ln -sf "$lib" /tmp/stagecraft-nccl/lib/"$(basename "$lib")"
    export NCCL_ROOT=/tmp/stagecraft-nccl
    export LD_LIBRARY_PATH=/tmp/stagecraft-nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# torch_run FLAGS...: PyTorch's same GPT-2 124M step (batch 8, sequence 1024, AdamW) with FLAGS
# (bench_cpu_vs_torch.py: --precision, --fused, --compile), where the machine's python3 has
# PyTorch with CUDA; prints its result line ("step_ms=... median_ms=...") or nothing
torch_run() {
    python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
        return 0
    timeout "${GPU_CHECK_STEP_S:-240}" python3 "$top/bench/bench_cpu_vs_torch.py" --device cuda \
        --gpt 50257,1024,12,768,12 --batch 8 --steps 10 "$@" 2>&1 | tail -n 1
}

# ratio NAME SC_LOG PT_LINE: stagecraft's best step in SC_LOG (bench_kernels_gpu) against
# PyTorch's in PT_LINE (above 1: stagecraft is faster)
ratio() {
    local sc_ms pt_ms
    sc_ms=$(sed -n 's/^step: mean [0-9.]* ms, best \([0-9.]*\) ms.*/\1/p' "$2")
    pt_ms=$(sed -n 's/^step_ms=\([0-9.]*\) .*/\1/p' <<<"$3")
    [ -n "$sc_ms" ] && [ -n "$pt_ms" ] &&
        awk -v n="$1" -v s="$sc_ms" -v p="$pt_ms" 'BEGIN { printf "gpu-check: %s: stagecraft %s ms vs PyTorch %s ms: %.2fx PyTorch'"'"'s speed\n", n, s, p, p / s }'
}

# torch_peer LOG: PyTorch eager TF32 beside bench_kernels_gpu's TF32 log LOG
torch_peer() {
    local pt
    pt=$(torch_run --precision tf32)
    [ -n "$pt" ] || { echo "gpu-check: no PyTorch with CUDA here: no peer figure"; return 0; }
    echo "gpu-check: PyTorch eager TF32, the same step: $pt"
    ratio "TF32 vs eager TF32" "$1" "$pt"
}

if [ "${1:-}" = "--full" ]; then
    bundle=${2:?usage: bench/gpu-check.sh --full BUNDLE_DIR (BUNDLE_DIR/debs from deploy/offline-bundle.sh)}
    unpack_debs "$bundle/debs" /tmp/stagecraft-bundle/root
    # shellcheck source=../deploy/offline-env.sh
    . "$top/deploy/offline-env.sh" /tmp/stagecraft-bundle
    find_nccl || { echo "gpu-check: no NCCL found (set NCCL_ROOT)"; exit 1; }
    build=/tmp/stagecraft-full
    {
        nvidia-smi || true
        echo "NCCL_ROOT=${NCCL_ROOT:-$cuda}"
        # warnings are not errors here: CI's Release build holds them to Debian's compiler, and
        # a newer compiler's new warning should not stop the GPU checks
        cmake -S "$top" -B $build -DCMAKE_BUILD_TYPE=Release -DSTAGECRAFT_CUDA=ON \
            -DSTAGECRAFT_WERROR=OFF -DCUDAToolkit_ROOT="$cuda" ${NCCL_ROOT:+-DNCCL_ROOT="$NCCL_ROOT"} &&
            cmake --build $build -j "$(nproc)"
    } >"$out/build.log" 2>&1 || { echo "gpu-check: build failed, see $out/build.log"; exit 1; }
    grep -E "^-- stagecraft: " "$out/build.log"
    # the checks only a GPU can make come first, each under a time limit (GPU_CHECK_STEP_S, 240 s)
    # so that a hang still leaves its log; six log files in all: build, gpu-tests, bench-gpu
    # (kernels, PyTorch peers, stages, a profile per block), jobs (the job path: one and two
    # workers on the GPU),
    # demo, tests (ctest, bounded by GPU_CHECK_CTEST_S, 900 s; 0 leaves it out, as
    # GPU_CHECK_DEMO=0 leaves the demo out, GPU_CHECK_COMPILE=0 PyTorch's compiled step,
    # GPU_CHECK_TORCH=0 every PyTorch figure, GPU_CHECK_STAGES=0 bench_stages;
    # GPU_CHECK_PRECISIONS lists the precisions of bench_kernels_gpu, "tf32 bf16 fp16")
    step=${GPU_CHECK_STEP_S:-240}
    : >"$out/gpu-tests.log"
    for t in $build/tests/gpu/gpu_test_*; do
        echo "==== $(basename "$t")" >>"$out/gpu-tests.log"
        timeout "$step" "$t" 2>&1 | tee "$build/$(basename "$t").log" >>"$out/gpu-tests.log"
        rc=$? # the program's (or timeout's 124): pipefail
        echo "gpu-check: $(basename "$t") exit $rc ($(grep -cE '^\[  SKIPPED \]' "$build/$(basename "$t").log") skipped)"
    done
    grep -E "^(bf16|fp16|loss)" "$out/gpu-tests.log" || true
    # the kernels: GPT-2 124M, batch 8 x 1024, in each precision, PyTorch beside them
    bench="$out/bench-gpu.log"
    : >"$bench"
    for p in ${GPU_CHECK_PRECISIONS:-tf32 bf16 fp16}; do
        echo "==== bench_kernels_gpu --precision $p" >>"$bench"
        timeout "$step" $build/bench/bench_kernels_gpu --precision $p >"$build/bench-$p.log" 2>&1
        echo "gpu-check: bench_kernels_gpu --precision $p exit $?"
        cat "$build/bench-$p.log" >>"$bench"
        grep -E "^step:" "$build/bench-$p.log"
    done
    [ "${GPU_CHECK_TORCH:-1}" = 0 ] || {
        echo "==== PyTorch"
        pt_tf32=$(torch_run --precision tf32)
        pt_bf16=$(torch_run --precision bf16 --fused)
        pt_comp=
        [ "${GPU_CHECK_COMPILE:-1}" = 0 ] || pt_comp=$(torch_run --precision bf16 --fused --compile)
        echo "eager TF32: $pt_tf32"
        echo "eager bf16 autocast, fused AdamW: $pt_bf16"
        echo "compiled bf16 autocast, fused AdamW: $pt_comp"
        ratio "TF32 vs eager TF32" "$build/bench-tf32.log" "$pt_tf32"
        ratio "bf16 vs eager bf16 autocast + fused AdamW" "$build/bench-bf16.log" "$pt_bf16"
        ratio "bf16 vs compiled bf16 (best)" "$build/bench-bf16.log" "$pt_comp"
        ratio "bf16 vs compiled bf16 (median)" "$build/bench-bf16.log" \
            "step_ms=$(sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p' <<<"$pt_comp") x"
    } >>"$bench" 2>&1
    grep -E "^(eager|compiled|gpu-check)" "$bench"
    if [ "${GPU_CHECK_STAGES:-1}" != 0 ]; then
        echo "==== bench_stages" >>"$bench"
        timeout "$step" $build/bench/bench_stages >>"$bench" 2>&1
        echo "gpu-check: bench_stages exit $?"
    fi
    # where a step's time goes: each block of GPT-2 124M alone, batch 8, in bf16
    printf '%s' '{"format": "stagecraft-model", "version": 1, "kind": "gpt", "vocab": 50257, "seq_len": 1024, "layers": 12, "width": 768, "heads": 12}' >"$build/gpt2.json"
    echo "==== stagecraft profile, bf16, micro-batch 8" >>"$bench"
    timeout "$step" $build/cli/stagecraft profile --model "$build/gpt2.json" --device cuda:0 \
        --precision bf16 --microbatch 8 >"$build/profile.json" 2>>"$bench" &&
        python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for b in d["blocks"]: print("gpu-check: block %-12s forward %7.2f ms backward %7.2f ms" % (b.get("name", "?"), b.get("forward_s", 0) * 1e3, b.get("backward_s", 0) * 1e3))' "$build/profile.json" | tee -a "$bench"
    # the job path: GPT-2 124M shapes, batch 32 = 8 micro-batches of 4 x 1024, minmax, 1f1b,
    # one worker and two workers sharing the GPU
    timeout "$((2 * step))" bash "$top/bench/gpu_job.sh" $build/cli/stagecraft "$build/jobs" \
        --workers "1 2" --precision "${GPU_CHECK_PRECISION:-bf16}" --steps "${GPU_CHECK_JOB_STEPS:-24}" \
        >"$out/jobs.log" 2>&1
    echo "gpu-check: gpu_job exit $?"
    for f in "$build"/jobs/status-*.txt; do echo "== $f"; cat "$f"; done >>"$out/jobs.log" 2>/dev/null
    grep -E "^gpu_job" "$out/jobs.log"
    if [ "${GPU_CHECK_DEMO:-1}" != 0 ]; then
        timeout "$step" $build/cli/stagecraft demo --device cuda --workers 2 --steps 100 --data "$top/README.md" \
            --finetune "$top/tests/data/hf/llama-tied" --finetune-steps 50 >"$out/demo.log" 2>&1
        rc=$?
        echo "gpu-check: demo --device cuda exit $rc"
        if [ $rc -ne 0 ]; then # a failed demo keeps its scratch folder: its processes' logs
            for f in /tmp/stagecraft-demo-*/*.log; do echo "== $f"; tail -n 40 "$f"; done >>"$out/demo.log"
        fi
        tail -n 8 "$out/demo.log"
    fi
    if [ "${GPU_CHECK_CTEST_S:-900}" -gt 0 ]; then
        timeout "${GPU_CHECK_CTEST_S:-900}" ctest --test-dir $build --output-on-failure -j 8 \
            >"$out/tests.log" 2>&1
        echo "gpu-check: tests exit $? ($(grep -E 'tests passed' "$out/tests.log"))"
    fi
    exit 0
fi

debs=${1:-}
if [ -n "$debs" ]; then
    root=/tmp/stagecraft-deps
    unpack_debs "$debs" "$root"
    lib=$(find "$root" -name 'libjansson.so*' -printf '%h\n' | head -1)
    export PKG_CONFIG_SYSROOT_DIR=$root
    PKG_CONFIG_LIBDIR=$(find "$root" -name '*.pc' -printf '%h\n' | sort -u | paste -sd:)
    export PKG_CONFIG_LIBDIR
    export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
fi
{
    nvidia-smi || true
    cmake -S "$top" -B /tmp/stagecraft-gpu -DCMAKE_BUILD_TYPE=Release -DSTAGECRAFT_KERNELS_ONLY=ON \
        -DSTAGECRAFT_CUDA=ON -DCUDAToolkit_ROOT="$cuda" &&
        cmake --build /tmp/stagecraft-gpu -j "$(nproc)"
} >"$out/build.log" 2>&1 || { echo "gpu-check: build failed, see $out/build.log"; exit 1; }
ctest --test-dir /tmp/stagecraft-gpu --output-on-failure >"$out/tests.log" 2>&1
echo "gpu-check: tests exit $? ($(grep -E 'tests passed' "$out/tests.log"))"
/tmp/stagecraft-gpu/tests/gpu/gpu_test_kernels_gpu >"$out/gpu-tests.log" 2>&1
echo "gpu-check: GPU tests exit $?"
/tmp/stagecraft-gpu/bench/bench_kernels_gpu >"$out/bench-gpu.log" 2>&1
echo "gpu-check: GPU benchmark exit $?"
tail -n 20 "$out/bench-gpu.log"
torch_peer "$out/bench-gpu.log"
