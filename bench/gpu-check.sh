#!/usr/bin/env bash
# Checks the layer library on a GPU machine: builds common/ and kernels/ with CUDA
# (STAGECRAFT_KERNELS_ONLY, which needs only jansson and cmocka besides the CUDA toolkit), runs
# the CPU and GPU tests (tests/gpu: every CUDA op against the CPU reference, whole models), the
# profiler on the GPU, and the GPU benchmark (GPT-2 124M step: tokens/s, MFU, matmul vs cuBLAS).
# Logs go to $OUT (default ./gpu-check-out).
#
#   bench/gpu-check.sh [DEBS_DIR]
#
# DEBS_DIR (optional): Debian packages of jansson and cmocka for a machine that lacks them, e.g.
# made on a Debian 12 machine with
#   mkdir -p .gpudeps && (cd .gpudeps && apt-get download libjansson4 libjansson-dev \
#       libcmocka0 libcmocka-dev)
# They are unpacked under /tmp/stagecraft-deps and found through pkg-config.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$top/gpu-check-out}
mkdir -p "$out"
debs=${1:-}
if [ -n "$debs" ]; then
    root=/tmp/stagecraft-deps
    mkdir -p "$root"
    for d in "$debs"/*.deb; do
        if command -v dpkg-deb >/dev/null; then
            dpkg-deb -x "$d" "$root"
        else # no dpkg: a .deb is an ar archive holding data.tar.*
            (cd "$(mktemp -d)" && ar x "$d" && tar xf data.tar.* -C "$root")
        fi
    done
    lib=$(find "$root" -name 'libjansson.so*' -printf '%h\n' | head -1)
    export PKG_CONFIG_SYSROOT_DIR=$root
    export PKG_CONFIG_LIBDIR=$(find "$root" -name '*.pc' -printf '%h\n' | sort -u | paste -sd:)
    export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
fi
cuda=${CUDAToolkit_ROOT:-$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")}
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
