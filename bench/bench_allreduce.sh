#!/usr/bin/env bash
# The copies' all-reduce, planned and measured: the same GPT job on two CPU workers of this host
# (one thread each), alternately with "rebalance": "off" and "auto", R rounds. The first plan is
# the planner's choice from the profiles (one stage on both workers as copies, or a two-stage
# pipeline); with "auto", a stage whose measured all-reduce is far off what the plan charged has
# the job re-planned with the measured figure. Prints per run: the first plan's stages and copies,
# the rebalance (if any) with its reason, the plan it ended on, the iteration time over the
# second half of the steps (from the job's status polled every 0.2 s), the run's wall time and,
# when the last plan has copies, their all-reduce as measured (the last figure while it ran) and
# as planned.
# --mlp N trains a one-block MLP (N x N, batch 512, 2 micro-batches) instead: one block cannot be
# cut, so every plan is one stage on both workers as copies, and the figure to read is their
# all-reduce.
# Usage: bench/bench_allreduce.sh PATH/TO/stagecraft [--rounds 3] [--steps 600] [--layers 8]
#        [--width 128] [--mlp N]
set -euo pipefail
sc=$(readlink -f "${1:?usage: bench_allreduce.sh PATH/TO/stagecraft [--rounds R] [--steps N]}")
shift
rounds=3 steps=600 layers=8 width=128 mlp=0
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --width) width=$2; shift 2 ;;
    --mlp) mlp=$2; shift 2 ;;
    *) echo "bench_allreduce: unknown flag $1" >&2; exit 2 ;;
    esac
done
command -v jq >/dev/null || { echo "bench_allreduce: needs jq" >&2; exit 2; }
# shellcheck source=local_cluster.sh
. "$(dirname "$0")/local_cluster.sh"
local_scratch allreduce
local_coordinator "$work/coord"
local_workers "a b" --threads 1

# the stages of a plan document: "2 stages" or "1 stage x2 copies"
shape() { jq -r '.stages | if length == 1 then "1 stage x\(.[0].replicas) copies" else "\(length) stages" end'; }

model="{\"kind\": \"gpt\", \"vocab\": 256, \"seq_len\": 64, \"layers\": $layers, \"width\": $width, \"heads\": 4}"
batch='"batch_size": 8, "microbatches": 4'
label="GPT $layers layers, width $width, seq 64, batch 8, 4 micro-batches"
if [ "$mlp" -gt 0 ]; then
    model="{\"kind\": \"mlp\", \"sizes\": [$mlp, $mlp]}"
    batch='"batch_size": 512, "microbatches": 2'
    label="MLP $mlp x $mlp (one block), batch 512, 2 micro-batches"
fi
echo "$label, 1f1b, $steps steps, 2 CPU workers (1 thread each)"
printf "%-4s %-8s %-18s %-18s %12s %8s %s\n" run rebalance "first plan" "last plan" "2nd_half_s" "wall_s" \
    "all-reduce_s measured/planned (copies)"
for r in $(seq 1 "$rounds"); do
    for mode in off auto; do
        cat >"$work/job.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$mode-$r",
 "model": $model,
 "data": {"kind": "synthetic"}, $batch,
 "schedule": "1f1b", "strategy": "hetero", "workers": 2, "steps": $steps, "seed": 3,
 "optimizer": {"kind": "adamw", "lr": 0.001}, "rebalance": "$mode"}
JSON
        id=$("$sc" submit "$work/job.json" | sed -n 's/^submitted \(job-[0-9]*\).*/\1/p')
        [ -n "$id" ] || { echo "bench_allreduce: submit failed" >&2; exit 1; }
        : >"$work/poll"
        echo '{}' >"$work/running"
        first=""
        while :; do
            s=$("$sc" status "$id" --json)
            state=$(jq -r .state <<<"$s")
            [ -z "$first" ] && [ "$state" = running ] && first=$(jq '.plan' <<<"$s" | shape)
            [ "$state" = running ] && echo "$s" >"$work/running" # figures end with the job
            echo "$(date +%s.%N) $(jq -r .step <<<"$s")" >>"$work/poll"
            case $state in succeeded) break ;; failed | cancelled) echo "bench_allreduce: $id $state" >&2; exit 1 ;; esac
            sleep 0.2
        done
        "$sc" status "$id" --json >"$work/status"
        last=$(jq '.plan' "$work/status" | shape)
        half=$(awk -v n="$steps" '{ t[NR] = $1; s[NR] = $2 }
            END { for (i = 1; i <= NR; i++) { if (s[i] >= n / 2 && a == "") { a = t[i]; sa = s[i] }
                                               if (s[i] < n) { b = t[i]; sb = s[i] } }
                  printf "%.4f", (sb > sa) ? (b - a) / (sb - sa) : 0 }' "$work/poll")
        wall=$(awk 'NR == 1 { a = $1 } { b = $1 } END { printf "%.1f", b - a }' "$work/poll")
        reduce=$(jq -r '.stage_figures[0] | select(.predicted_allreduce_s > 0) |
            "\(.measured_allreduce_s * 1e4 | round / 1e4)/\(.predicted_allreduce_s * 1e4 | round / 1e4)"' "$work/running")
        printf "%-4s %-8s %-18s %-18s %12s %8s %s\n" "$r" "$mode" "$first" "$last" "$half" "$wall" "$reduce"
        jq -r '.transitions[] | select(.to == "rebalancing") | "     " + .reason' "$work/status" |
            sed 's/; predicted.*re-planned/; re-planned/'
    done
done
