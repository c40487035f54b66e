#!/usr/bin/env bash
# Rebalancing, measured on the uneven lab (deploy/lab): three CPU workers at SHARE of a core
# (default 0.2) train a GPT job (hetero, "rebalance": "auto"); at step 60 the worker with the most
# blocks is cut to CUT of a core (default 0.05). For each model size, one row:
#   - params: the model's parameters; moved: bytes the new stages took over from the paused
#     workers and the longest take-over (seconds), from the workers' logs;
#   - detect: steps from the cut to the step the job paused after;
#   - recovered: seconds from the cut to the first step after the move;
#   - samples/s before the cut, after the move (over 60 steps), and of the same job planned from
#     scratch with the worker already cut (profiled and planned anew), and after / scratch.
# Usage (root): bench/bench_rebalance.sh PATH/TO/stagecraft [--widths "64 128 256"]
#               [--share 0.2] [--cut 0.05] [--history FILE]
#   --history: append each job's state changes with their reasons (rebalances: why, predicted
#              gain, what moved) to FILE
set -euo pipefail
sc=$(readlink -f "${1:?usage: bench_rebalance.sh PATH/TO/stagecraft [--widths \"64 128 256\"]}")
shift
widths="64 128 256" share=0.2 cut_to=0.05 history=/dev/null
while [ $# -gt 0 ]; do
    case $1 in
    --widths) widths=$2; shift 2 ;;
    --share) share=$2; shift 2 ;;
    --cut) cut_to=$2; shift 2 ;;
    --history) history=$2; shift 2 ;;
    *) echo "bench_rebalance: unknown flag $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" -eq 0 ] || { echo "bench_rebalance: run as root" >&2; exit 2; }
lab=$(cd "$(dirname "$0")/../deploy/lab" && pwd)/lab
work=$(mktemp -d /tmp/stagecraft-bench-rebalance.XXXXXX)
export STAGECRAFT_LAB_RUN=$work/run
name=benchrb
cat >"$work/lab.json" <<JSON
{"format": "stagecraft-lab", "version": 1, "name": "$name", "subnet": "198.18.201.0/24",
 "servers": [{"name": "a", "rate": "1gbit"}],
 "workers": [{"name": "w0", "server": "a", "cpu": $share},
             {"name": "w1", "server": "a", "cpu": $share},
             {"name": "w2", "server": "a", "cpu": $share}]}
JSON
trap '[ -z "${STAGECRAFT_BENCH_KEEP:-}" ] || cp -r "$work/run" "$STAGECRAFT_BENCH_KEEP"; "$lab" down "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"$lab" up "$work/lab.json" --bin "$sc" >/dev/null
eval "$("$lab" env "$name")"
for _ in $(seq 1 300); do
    [ "$("$sc" workers --json | grep -c '"state": "alive"')" -ge 3 ] && break
    sleep 0.1
done
run=$STAGECRAFT_LAB_RUN/$name
batch=8

spec() { # WIDTH
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "rb-$1",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 32, "layers": 6, "width": $1, "heads": 2},
 "data": {"kind": "synthetic"}, "batch_size": $batch, "microbatches": 4, "schedule": "1f1b",
 "strategy": "hetero", "workers": 3, "steps": 100000, "seed": 7}
JSON
}
st() { "$sc" status "$1" --json; }
state() { st "$1" | jq -r .state; }
step() { st "$1" | jq -r .step; }
rebalances() { st "$1" | jq '[.transitions[] | select(.to == "rebalancing")] | length'; }
wait_until() { # SECONDS COMMAND...
    local end=$((SECONDS + $1)); shift
    until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.05; done
}
at_step() { [ "$(step "$1")" -ge "$2" ] 2>/dev/null; }
# rate JOB STEPS: samples/s over the next STEPS steps (wall clock)
rate() {
    local s0 t0 s1 t1
    s0=$(step "$1"); t0=$(date +%s.%N)
    wait_until 600 at_step "$1" $((s0 + $2))
    s1=$(step "$1"); t1=$(date +%s.%N)
    echo "($s1 - $s0) * $batch / ($t1 - $t0)" | bc -l
}
id_of() { "$sc" workers --json | jq -r ".workers[] | select(.name == \"$1\") | .id"; }
blocks_of() { st "$1" | jq "[.stage_figures[] | select(.worker_ids | index(\"$2\")) | .last_block - .first_block + 1] | add // 0"; }

printf "%-8s %10s %12s %9s %7s %10s %12s %12s %12s %7s\n" width params moved_bytes move_s detect recovered_s before after scratch ratio
n=0
for w in $widths; do
    spec "$w" >"$work/job.json"
    n=$((n + 1)); a=job-$((2 * n - 1)); b=job-$((2 * n))
    "$sc" submit "$work/job.json" >/dev/null
    wait_until 300 at_step "$a" 40
    before=$(rate "$a" 20)
    slow=w0
    for x in w1 w2; do
        [ "$(blocks_of "$a" "$(id_of $x)")" -gt "$(blocks_of "$a" "$(id_of $slow)")" ] && slow=$x
    done
    had=$(rebalances "$a")
    "$lab" set --lab "$name" $slow cpu="$cut_to" >/dev/null
    cut=$(step "$a"); t_cut=$(date +%s.%N)
    more() { [ "$(rebalances "$a")" -gt "$had" ]; }
    wait_until 300 more
    paused=$(st "$a" | jq -r "[.transitions[] | select(.to == \"rebalancing\")][$had].reason" |
        sed -n -E 's/.*(pausing|paused) after step ([0-9]+).*/\2/p')
    wait_until 120 at_step "$a" $((paused + 1))
    t_back=$(date +%s.%N)
    after=$(rate "$a" 60)
    moved=$(grep -h "job $a stage .*took blocks" "$run"/logs/*.log |
        sed -n 's/.*over: \([0-9]*\) bytes from other workers, [0-9]* kept here, in [0-9]* piece(s), \([0-9.]*\) s$/\1 \2/p' |
        awk '{ b += $1; if ($2 > s) s = $2 } END { printf "%d %.3f\n", b, s }')
    keep_history() { # JOB LABEL
        { echo "== width $w, $2 ($1)"; st "$1" | jq -r '.transitions[] | "\(.to): \(.reason)"'; } >>"$history"
    }
    keep_history "$a" "cut at step $cut"
    "$sc" cancel "$a" >/dev/null
    # the same job planned from scratch with the worker already cut
    "$sc" submit "$work/job.json" >/dev/null
    wait_until 300 at_step "$b" 40
    scratch=$(rate "$b" 60)
    keep_history "$b" "from scratch"
    "$sc" cancel "$b" >/dev/null
    "$lab" set --lab "$name" $slow cpu="$share" >/dev/null
    # the model's parameters: its profile's parameter bytes / 4
    jq '.model' "$work/job.json" | jq '{format: "stagecraft-model", version: 1} + .' >"$work/model.json"
    nparams=$("$sc" profile --model "$work/model.json" --repeats 1 --warmup 0 |
        jq '[.blocks[].parameter_bytes] | add / 4')
    printf "%-8s %10s %12s %9s %7s %10.2f %12.1f %12.1f %12.1f %7.2f\n" "$w" "$nparams" \
        "${moved% *}" "${moved#* }" "$((paused - cut))" "$(echo "$t_back - $t_cut" | bc -l)" \
        "$before" "$after" "$scratch" "$(echo "$after / $scratch" | bc -l)"
    sleep 1
done
