#!/usr/bin/env bash
# The uneven lab, measured: stagecraft on servers and workers of unequal speed (deploy/lab).
#
# 1. Planning for unequal workers: four CPU workers on two servers, capped at 0.45, 0.45, 0.25
#    and 0.15 of a core, a GPT job trained with each strategy (and with the fastest worker
#    alone); for each, the measured throughput over wall-clock time, the iteration it implies
#    against the plan's prediction, and the ratio to uniform.
# 2. Links matter: the slow server's uplink at RATE (default 10mbit): the job planned knowing
#    the link (the link is slow from the start) against the job planned on a fast link that
#    turns slow once it runs.
# 3. Honest numbers: every row prints the throughput (samples/s over wall-clock, as status
#    reports it) beside batch / the measured iteration time (the slowest stage's own timing).
#
# Each job runs STEPS steps (default 120); figures are taken at its end, from the last 5-10 s.
# The GPT has LAYERS layers (default 8) of WIDTH (default 128), sequence 64, vocabulary 256:
# enough layers that a plan can give each worker a number of them close to its share.
# Usage (root): bench/bench_lab.sh PATH/TO/stagecraft [--steps N] [--link RATE] [--only 1|2]
#                                  [--layers N] [--width N] [--history FILE]
#   --history: append each job's state changes with their reasons (plans, rebalances) to FILE
set -euo pipefail
sc=$(readlink -f "${1:?usage: bench_lab.sh PATH/TO/stagecraft [--steps N] [--link RATE] [--only 1|2]}")
shift
steps=120 link=10mbit only="" layers=8 width=128 history=/dev/null
while [ $# -gt 0 ]; do
    case $1 in
    --steps) steps=$2; shift 2 ;;
    --link) link=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --history) history=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --width) width=$2; shift 2 ;;
    *) echo "bench_lab: unknown flag $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" -eq 0 ] || { echo "bench_lab: run as root" >&2; exit 2; }
lab=$(cd "$(dirname "$0")/../deploy/lab" && pwd)/lab
work=$(mktemp -d /tmp/stagecraft-bench-lab.XXXXXX)
name=benchlab
cat >"$work/lab.json" <<JSON
{"format": "stagecraft-lab", "version": 1, "name": "$name", "subnet": "198.18.200.0/24",
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

batch=16
# job STRATEGY WORKERS: a GPT job spec (WORKERS: a count or a JSON list of names)
job() {
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "bench-$1",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 64, "layers": $layers, "width": $width, "heads": 4},
 "data": {"kind": "synthetic"}, "batch_size": $batch, "microbatches": 4, "schedule": "1f1b",
 "strategy": "$1", "workers": $2, "steps": $steps, "seed": 7,
 "optimizer": {"kind": "adamw", "lr": 0.003}}
JSON
}

field() { jq -r "$2" <<<"$1"; }

# run LABEL STRATEGY WORKERS [SLOW_AFTER_START]: trains a job, prints its row, sets $tput
run() {
    local label=$1 strategy=$2 workers=$3 slow_after=${4:-}
    job "$strategy" "$workers" >"$work/job.json"
    local id
    id=$("$sc" submit "$work/job.json" --json | jq -r .job_id)
    if [ -n "$slow_after" ]; then
        until [ "$("$sc" status "$id" --json | jq -r .state)" = running ]; do sleep 0.1; done
        "$lab" set --lab "$name" slow rate="$slow_after"
    fi
    # the figures of the last 5-10 s, read just before the job ends
    local st prev=""
    while :; do
        st=$("$sc" status "$id" --json)
        case $(field "$st" .state) in
        succeeded) break ;;
        failed | cancelled) echo "$label: $(field "$st" .reason)" >&2; prev=""; break ;;
        esac
        [ "$(field "$st" .step)" -ge $((steps * 9 / 10)) ] 2>/dev/null && [ -z "$prev" ] && prev=$st
        sleep 0.2
    done
    [ -n "$prev" ] || prev=$st
    { echo "== $label ($id)"; field "$st" '.transitions[] | "\(.to): \(.reason)"'; } >>"$history"
    local pred tput meas stages used
    pred=$(field "$prev" .predicted_iteration_s)
    tput=$(field "$prev" .samples_per_s)
    meas=$(field "$prev" .measured_iteration_s)
    stages=$(field "$st" '.plan.stages | length')
    used=$(field "$st" '[.plan.stages[].devices | length] | add')
    awk -v l="$label" -v s="$stages" -v u="$used" -v p="$pred" -v t="$tput" -v m="$meas" -v b=$batch \
        -v base="${uniform_tput:-0}" 'BEGIN {
        it = (t > 0) ? b / t : 0
        err = (p > 0) ? 100 * (it - p) / p : 0
        vs = (base > 0) ? sprintf("%.2fx", t / base) : "-"
        printf "%-22s %6d %7d %11.4f %11.4f %7.1f%% %10.1f %11.4f %8s\n", l, s, u, p, it, err, t, m, vs }'
    last_tput=$tput
}

header() {
    printf "%-22s %6s %7s %11s %11s %8s %10s %11s %8s\n" plan stages workers predicted_s \
        measured_s error samples/s slowest_s vs_uniform
}

if [ "$only" != 2 ]; then
    echo "== 1. planning for unequal workers: CPU shares 0.45 0.45 0.25 0.15, links 1gbit, GPT of $layers layers of width $width, $steps steps"
    header
    uniform_tput=""
    run uniform uniform 4
    uniform_tput=$last_tput
    for s in hetero minmax pipedream; do run "$s" "$s" 4; done
    run "fastest alone (fast-0)" uniform '["fast-0"]'
fi
if [ "$only" != 1 ]; then
    echo
    echo "== 2. links matter: the slow server's uplink at $link"
    header
    uniform_tput=""
    "$lab" set --lab "$name" slow rate="$link"
    run "hetero, knows the link" hetero 4
    "$lab" set --lab "$name" slow rate=1gbit
    run "hetero, planned fast" hetero 4 "$link"
    "$lab" set --lab "$name" slow rate=1gbit
fi
