#!/usr/bin/env bash
# A CUDA build on a host without the CUDA libraries: the program links none of them (the GPU
# backend module holds every CUDA call and is loaded only when a CUDA device is asked for), so it
# starts, and a coordinator and a CPU worker train a job; asking for a CUDA device says which
# library could not be loaded. The libraries are hidden in a mount namespace of the test's own
# (each file the backend module would load is covered with an empty one), so the rest of the
# machine sees nothing. Skipped for a CPU-only build and without root.
# Usage: test_no_cuda_libs.sh PATH/TO/stagecraft
sc=${1:?usage: test_no_cuda_libs.sh PATH/TO/stagecraft}
case "$("$sc" version | sed -n 's/^build //p')" in
CUDA*) ;;
*) echo "SKIP: a CPU-only build (no GPU backend to hide)"; exit 77 ;;
esac
module=$(cd "$(dirname "$sc")/.." && pwd)/lib/libstagecraft-gpu.so
[ -f "$module" ] || { echo "FAIL: the build has no GPU backend module at $module"; exit 1; }
if [ -z "${SC_CUDA_HIDDEN:-}" ]; then
    [ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (a mount namespace)"; exit 77; }
    command -v unshare >/dev/null || { echo "SKIP: needs unshare"; exit 77; }
    unshare --mount --propagation private true 2>/dev/null ||
        { echo "SKIP: cannot make a mount namespace here"; exit 77; }
    SC_CUDA_HIDDEN=1 exec unshare --mount --propagation private bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"

# every copy of the CUDA runtime, cuBLAS(Lt) and NCCL the dynamic loader could find, covered
hidden=0
while read -r lib; do
    [ -n "$lib" ] && [ -f "$lib" ] || continue
    mount --bind /dev/null "$lib" || { fail "cannot cover $lib"; exit 1; }
    hidden=$((hidden + 1))
done < <({
    ldd "$module" | awk '/=> \//{print $3}'
    ldconfig -p | awk '{print $NF}'
} | grep -E '/lib(cudart|cublas|cublasLt|nccl)\.so' | xargs -r readlink -f | sort -u)
[ "$hidden" -gt 0 ] || { fail "found no CUDA library to hide"; exit 1; }
pass "$hidden CUDA library file(s) hidden from this test's processes"

out=$("$sc" version 2>&1) && echo "$out" | grep -q "^build CUDA" &&
    echo "$out" | grep -q "^gpu backend not loaded: .*lib\(cudart\|cublas\|cublasLt\|nccl\)" &&
    pass "the CUDA build starts and says why its GPU backend does not load: $(echo "$out" | sed -n 's/^gpu backend //p' | cut -c1-160)" ||
    fail "stagecraft version: $out"
! ldd "$sc" | grep -qE "lib(cudart|cublas|cublasLt|nccl)\.so" &&
    pass "the program links no CUDA library" ||
    fail "the program links: $(ldd "$sc" | grep -E 'cudart|cublas|nccl' | tr '\n' ' ')"

cat >"$work/mlp.json" <<JSON
{"format": "stagecraft-model", "version": 1, "kind": "mlp", "sizes": [16, 32, 4]}
JSON
out=$("$sc" profile --model "$work/mlp.json" --device cuda:0 2>&1)
rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "GPU backend .* cannot be loaded: .*lib\(cudart\|cublas\|cublasLt\|nccl\)" &&
    pass "a CUDA device asked for is refused, naming the library: $(echo "$out" | head -n 1 | cut -c1-200)" ||
    fail "profile --device cuda:0 exited $rc: $out"

start_coordinator coord "$work/state" --heartbeat-ms 200
start_worker a --device cpu
a_pid=$worker_pid
start_worker b --device cpu
wait_alive 20 2 || fail "workers did not register"
cat >"$work/job.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "nocuda",
 "model": {"kind": "mlp", "sizes": [32, 64, 64, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "stages": 2, "steps": 50, "seed": 3}
JSON
"$sc" submit "$work/job.json" >/dev/null || fail "submit"
wait_for 120 is_state job-1 succeeded && pass "a coordinator and two CPU workers trained a job" ||
    fail "job-1 is $(job_state job-1): $(field job-1 reason)"
grep -qE "lib(cudart|cublas|nccl)" "/proc/$coord_pid/maps" "/proc/$a_pid/maps" &&
    fail "a CUDA library is mapped into the coordinator or a worker" ||
    pass "neither the coordinator nor a CPU worker maps a CUDA library"

finish
