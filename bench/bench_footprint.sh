#!/usr/bin/env bash
# What a program that needs no GPU costs on a host: for each stagecraft binary given, the
# resident memory of an idle coordinator (2 s after it listens), how many of its memory mappings
# are CUDA libraries (CUDA runtime, cuBLAS, NCCL), and the wall time of `stagecraft version`.
# Give a build from before the GPU backend module beside a current one to compare them.
# Usage: bench/bench_footprint.sh STAGECRAFT [STAGECRAFT...]
set -u
[ $# -ge 1 ] || { echo "usage: bench_footprint.sh STAGECRAFT [STAGECRAFT...]" >&2; exit 2; }
printf '%-48s %14s %14s %12s\n' binary "idle RSS (MB)" "CUDA mappings" "version (ms)"
for bin in "$@"; do
    dir=$(mktemp -d)
    "$bin" coordinator --listen 127.0.0.1:0 --state "$dir/state" >"$dir/log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do grep -q "listening on port" "$dir/log" 2>/dev/null && break; sleep 0.1; done
    sleep 2
    rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
    maps=$(grep -cE "lib(cudart|cublas|cublasLt|nccl)" "/proc/$pid/maps")
    kill "$pid"
    wait "$pid" 2>/dev/null
    t0=$(date +%s%N)
    for _ in 1 2 3 4 5; do "$bin" version >/dev/null; done
    t1=$(date +%s%N)
    printf '%-48s %14.1f %14d %12d\n' "$bin" "$(awk -v k="$rss" 'BEGIN{print k / 1024}')" "$maps" \
        $(((t1 - t0) / 5000000))
    rm -rf "$dir"
done
