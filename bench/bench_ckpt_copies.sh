#!/usr/bin/env bash
# What checkpoint copies cost: the same GPT job on two local CPU workers (2 stages, 1f1b,
# checkpoint_every EVERY) trained with "checkpoint_replicas": 0 and 1, alternately, ROUNDS times
# each. For each setting: seconds per iteration (from the job's last start to its success, over
# its steps; median of the rounds) and the ratio copies / none; for the copies: bytes per copy
# and seconds per copy (take over the data network and write, from the workers' logs).
# Usage: bench/bench_ckpt_copies.sh PATH/TO/stagecraft [--width 128] [--layers 4] [--steps 300]
#        [--every 10] [--rounds 3]
set -euo pipefail
sc=$(readlink -f "${1:?usage: bench_ckpt_copies.sh PATH/TO/stagecraft [--width 128]}")
shift
width=128 layers=4 steps=300 every=10 rounds=3
while [ $# -gt 0 ]; do
    case $1 in
    --width) width=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "bench_ckpt_copies: unknown flag $1" >&2; exit 2 ;;
    esac
done
command -v jq >/dev/null || { echo "bench_ckpt_copies: needs jq" >&2; exit 2; }
# shellcheck source=local_cluster.sh
. "$(dirname "$0")/local_cluster.sh"
local_scratch copies
local_coordinator "$work/state"
STAGECRAFT_LOG=debug local_workers "a b"

spec() { # REPLICAS
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "copies-$1",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 32, "layers": $layers, "width": $width, "heads": 2},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 4, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": $steps, "seed": 3, "checkpoint_every": $every,
 "rebalance": "off", "checkpoint_replicas": $1}
JSON
}
# run REPLICAS: seconds per iteration of one job
run() {
    spec "$1" >"$work/job.json"
    local id state
    id=$("$sc" submit "$work/job.json" --json | jq -r .job_id)
    while :; do
        state=$("$sc" status "$id" --json | jq -r .state)
        case $state in succeeded) break ;; failed | cancelled) echo "job $id $state" >&2; exit 1 ;; esac
        sleep 0.2
    done
    "$sc" status "$id" --json | jq --argjson n "$steps" '
        [.transitions[] | select(.to == "running")][-1].at_unix_ms as $t0 |
        [.transitions[] | select(.to == "succeeded")][-1].at_unix_ms as $t1 |
        ($t1 - $t0) / 1000 / $n'
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
: >"$work/r0" && : >"$work/r1"
for _ in $(seq 1 "$rounds"); do
    run 0 >>"$work/r0"
    run 1 >>"$work/r1"
done
none=$(median <"$work/r0") copies=$(median <"$work/r1")
per_copy=$(cat "$work"/a.log "$work"/b.log | sed -n 's/.*copied stage [0-9]* of step [0-9]* from .*: \([0-9]*\) bytes in \([0-9.]*\) s.*/\1 \2/p' |
    awk '{b += $1; s += $2; n++} END {if (n) printf "%d copies, %.0f bytes and %.4f s per copy (%.1f MB/s)", n, b / n, s / n, b / s / 1e6; else print "no copies logged"}')
echo "width $width, layers $layers, $steps steps, checkpoint_every $every, $rounds round(s)"
printf 'seconds per iteration: none %.5f, copies %.5f, ratio copies/none %.3f\n' "$none" "$copies" \
    "$(awk -v a="$copies" -v b="$none" 'BEGIN {print a / b}')"
echo "runs (none): $(tr '\n' ' ' <"$work/r0")"
echo "runs (copies): $(tr '\n' ' ' <"$work/r1")"
echo "copies: $per_copy"
