#!/usr/bin/env bash
# `stagecraft advise` validated on the uneven lab (deploy/lab): the lab's four CPU workers
# (shares 0.45, 0.45, 0.25 and 0.15 of a core on two servers) get prices, advise picks the
# cheapest set of them that reaches a throughput, the job is trained on exactly that set, and
# its measured samples/s is compared with advise's prediction (the goal: within 10%).
#
# 1. `advise --workers --json` profiles the job's model on the idle workers and prints their
#    cluster (one device type per measured speed) and the planner's profile.
# 2. Each type gets a price: PRICE_BASE + the worker's CPU share per hour (a fixed part per
#    worker, so that small workers are dearer per unit of speed and the cheapest set is not
#    simply all of them).
# 3. `advise --catalog` on that priced cluster with --objective min-cost-at=TARGET, TARGET being
#    FRACTION (default 0.6) of what all four plan, picks the set; the job runs on it by name.
# 4. The job's samples/s over wall-clock (status, the last 5-10 s before it ends) against
#    advise's samples_per_s for the set.
# Usage (root): bench/bench_advise_lab.sh PATH/TO/stagecraft [--steps N] [--fraction F]
#                                         [--price-base P] [--layers N] [--width N]
set -euo pipefail
sc=$(readlink -f "${1:?usage: bench_advise_lab.sh PATH/TO/stagecraft [--steps N] [--fraction F]}")
shift
steps=150 fraction=0.6 price_base=0.2 layers=8 width=128
while [ $# -gt 0 ]; do
    case $1 in
    --steps) steps=$2; shift 2 ;;
    --fraction) fraction=$2; shift 2 ;;
    --price-base) price_base=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --width) width=$2; shift 2 ;;
    *) echo "bench_advise_lab: unknown flag $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" -eq 0 ] || { echo "bench_advise_lab: run as root (the lab makes namespaces and cgroups)" >&2; exit 2; }
for t in jq ip tc; do command -v $t >/dev/null || { echo "bench_advise_lab: needs $t" >&2; exit 2; }; done
lab=$(cd "$(dirname "$0")/../deploy/lab" && pwd)/lab
work=$(mktemp -d /tmp/stagecraft-bench-advise.XXXXXX)
name=advlab
cat >"$work/lab.json" <<JSON
{"format": "stagecraft-lab", "version": 1, "name": "$name", "subnet": "198.18.210.0/24",
 "servers": [{"name": "fast", "rate": "1gbit"}, {"name": "slow", "rate": "1gbit"}],
 "workers": [{"name": "fast-0", "server": "fast", "cpu": 0.45},
             {"name": "fast-1", "server": "fast", "cpu": 0.45},
             {"name": "slow-0", "server": "slow", "cpu": 0.25},
             {"name": "slow-1", "server": "slow", "cpu": 0.15}]}
JSON
trap '"$lab" down "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"$lab" up "$work/lab.json" --bin "$sc" >/dev/null
eval "$("$lab" env "$name")"
for _ in $(seq 1 300); do
    [ "$("$sc" workers --json | grep -c '"state": "alive"')" -ge 4 ] && break
    sleep 0.1
done

batch=16 micro=4
# job WORKERS: the GPT job (WORKERS: a count or a JSON list of worker names)
job() {
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "advise-lab",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 64, "layers": $layers, "width": $width, "heads": 4},
 "data": {"kind": "synthetic"}, "batch_size": $batch, "microbatches": $micro, "schedule": "1f1b",
 "strategy": "hetero", "workers": $1, "steps": $steps, "seed": 7, "rebalance": "off",
 "optimizer": {"kind": "adamw", "lr": 0.003}}
JSON
}

# 1. the workers at their measured speeds
job 4 >"$work/job4.json"
"$sc" advise --workers --model "$work/job4.json" --json >"$work/workers.json"
jq -r '"all four plan \(.all.samples_per_s) samples/s (the coordinator: \(.coordinator_plan.samples_per_s))"' "$work/workers.json"
jq -r '.drop[] | "  dropping \(.worker): \(.change * 100 | round)%"' "$work/workers.json"

# 2. prices: each type gets PRICE_BASE + the CPU share of its first worker (device i is
#    workers[i]; the cluster lists its servers' devices in order)
share() { jq -r --arg n "$1" '.workers[] | select(.name == $n) | .cpu' "$work/lab.json"; }
jq -c '[.workers[] | {name, device}]' "$work/workers.json" >"$work/devices.json"
jq -c '[.cluster.servers[].devices[]]' "$work/workers.json" >"$work/types.json"
cp "$work/workers.json" "$work/priced.json"
for i in $(seq 0 $(($(jq length "$work/devices.json") - 1))); do
    wname=$(jq -r ".[] | select(.device == $i) | .name" "$work/devices.json")
    type=$(jq -r ".[$i]" "$work/types.json")
    price=$(awk -v b="$price_base" -v s="$(share "$wname")" 'BEGIN { printf "%.4f", b + s }')
    jq --arg t "$type" --argjson p "$price" \
        'if .cluster.device_types[$t].price_per_hour == null then .cluster.device_types[$t].price_per_hour = $p else . end' \
        "$work/priced.json" >"$work/tmp.json" && mv "$work/tmp.json" "$work/priced.json"
    echo "  $wname: type $type, $price per hour"
done
jq '.cluster' "$work/priced.json" >"$work/catalog.json"
jq '.profile' "$work/priced.json" >"$work/profile.json"

# 3. the cheapest set that reaches FRACTION of all four
target=$(jq -r --argjson f "$fraction" '.all.samples_per_s * $f' "$work/workers.json")
"$sc" advise --model "$work/profile.json" --catalog "$work/catalog.json" --batch $batch \
    --microbatches $micro --schedule 1f1b --strategy hetero --objective "min-cost-at=$target" \
    --json >"$work/advice.json"
predicted=$(jq -r '.best.samples_per_s' "$work/advice.json")
names=$(jq -c --slurpfile d "$work/devices.json" \
    '[.best.devices[] as $i | $d[0][] | select(.device == $i) | .name]' "$work/advice.json")
echo "target $target samples/s: advise picks $names at $(jq -r .best.cost_per_hour "$work/advice.json") per hour, predicting $predicted samples/s"

# 4. the job on exactly that set, measured
job "$names" >"$work/job.json"
id=$("$sc" submit "$work/job.json" --json | jq -r .job_id)
prev="" st=""
while :; do
    st=$("$sc" status "$id" --json)
    case $(jq -r .state <<<"$st") in
    succeeded) break ;;
    failed | cancelled) echo "job $id: $(jq -r .reason <<<"$st")" >&2; exit 1 ;;
    esac
    [ "$(jq -r .step <<<"$st")" -ge $((steps * 9 / 10)) ] 2>/dev/null && [ -z "$prev" ] && prev=$st
    sleep 0.2
done
[ -n "$prev" ] || prev=$st
measured=$(jq -r .samples_per_s <<<"$prev")
coord_pred=$(jq -r '.predicted_iteration_s' <<<"$prev")
awk -v m="$measured" -v p="$predicted" -v c="$coord_pred" -v b=$batch 'BEGIN {
    printf "measured %.4g samples/s, advise predicted %.4g (the coordinator planned %.4g): %+.1f%%\n",
        m, p, (c > 0 ? b / c : 0), (p > 0 ? 100 * (m - p) / p : 0)
    exit (p > 0 && (m - p) / p <= 0.1 && (p - m) / p <= 0.1) ? 0 : 1 }' &&
    echo "within 10% of the prediction" || { echo "more than 10% off the prediction"; exit 1; }
