#!/usr/bin/env bash
# Runs every fuzz target of a libFuzzer build (STAGECRAFT_FUZZ=ON) for SECONDS each over its
# committed corpus (tests/fuzz/corpus/NAME, read only) plus a scratch corpus in BUILD/corpus/NAME
# that keeps what the run found; crashes go to BUILD/crashes/. Prints one line per target:
# executions, executions per second, coverage (libFuzzer's cov: edges, ft: features) and the
# scratch corpus size. Exit status 1 when any target crashed.
#   usage: tests/fuzz/run.sh BUILD SECONDS [NAME...]
set -u
build=${1:?usage: run.sh BUILD SECONDS [NAME...]}
seconds=${2:?usage: run.sh BUILD SECONDS [NAME...]}
shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    names=(jobspec model profile cluster topology rpc control checkpoint data safetensors)
fi
case $seconds in '' | *[!0-9]*) echo "run.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;; esac
mkdir -p "$build/crashes"
failed=0
printf '%-11s %12s %9s %7s %7s %7s\n' target execs exec/s cov ft corpus
for n in "${names[@]}"; do
    bin=$build/tests/fuzz/fuzz_$n
    if [ ! -x "$bin" ]; then
        echo "run.sh: $bin is missing: build the fuzz_all target of $build first" >&2
        exit 2
    fi
    mkdir -p "$build/corpus/$n"
    log=$build/fuzz-$n.log
    # hwloc's own leaks on refused XML are suppressed as in the tests (tests/lsan.supp)
    LSAN_OPTIONS="suppressions=$root/tests/lsan.supp:print_suppressions=0" \
        STAGECRAFT_LOG=error "$bin" -max_total_time="$seconds" -max_len=8192 -timeout=20 \
        -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$build/crashes/$n-" \
        "$build/corpus/$n" "$root/tests/fuzz/corpus/$n" >"$log" 2>&1
    rc=$?
    # the last status line: "#12345 DONE cov: 678 ft: 910 corp: 11/2Kb ..." (or pulse/NEW)
    last=$(grep -E '^#[0-9]+' "$log" | tail -1)
    execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
    rate=$(grep -E '^stat::average_exec_per_sec' "$log" | awk '{print $2}')
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(ls "$build/corpus/$n" | wc -l)
    printf '%-11s %12s %9s %7s %7s %7s\n' "$n" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$corp"
    if [ $rc -ne 0 ]; then
        failed=1
        echo "  fuzz_$n stopped with status $rc; see $log and $build/crashes/" >&2
        grep -E 'ERROR|fuzz: |SUMMARY' "$log" | head -5 >&2
    fi
done
exit $failed
