#!/usr/bin/env bash
# Freezing, measured: the same GPT job trained on two CPU workers of this host (one thread each)
# without freezing and then with each --freeze setting (default: "auto", the conservative policy,
# and the bare criterion of ALGORITHMS.md: tau the median, uncapped). Prints for each: the
# iteration time over the first and the last tenth of the steps (measured, from the job's status
# polled every 0.2 s), the whole run's wall time, the loss at the last step and the mean loss
# over the last tenth of the steps both jobs logged (the coordinator logs every step's loss at
# the debug level; both jobs see the same batches at the same step), each freeze, and the ratios
# against the job without freezing. The tail loss of "off" is against the first setting's steps.
# Usage: bench/bench_freeze.sh PATH/TO/stagecraft [--layers 8] [--width 128] [--steps 600]
#        [--data FILE] [--freeze JSON]...   (a text file; default the GPL-3 text Debian ships)
set -euo pipefail
sc=$(readlink -f "${1:?usage: bench_freeze.sh PATH/TO/stagecraft [--layers N] [--width N] [--steps N]}")
shift
layers=8 width=128 steps=600 data=/usr/share/common-licenses/GPL-3 freezes=()
while [ $# -gt 0 ]; do
    case $1 in
    --freeze) freezes+=("$2"); shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --width) width=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    *) echo "bench_freeze: unknown flag $1" >&2; exit 2 ;;
    esac
done
[ -r "$data" ] || { echo "bench_freeze: cannot read the text file $data (give --data FILE)" >&2; exit 2; }
# the default policy, and ALGORITHMS.md's criterion alone (tau the median, uncapped)
[ ${#freezes[@]} -gt 0 ] || freezes=('"auto"' "{\"interval\": $((steps / 10)), \"max_change\": 1000}")
# the coordinator logs every step's loss at the debug level: the loss curves compared below
# shellcheck source=local_cluster.sh
. "$(dirname "$0")/local_cluster.sh"
local_scratch freeze
STAGECRAFT_LOG=debug local_coordinator "$work/coord"
local_workers "a b" --threads 1

spec() { # NAME FREEZE
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 64, "layers": $layers, "width": $width, "heads": 4},
 "data": {"kind": "text", "path": "$data"}, "batch_size": 8, "microbatches": 4,
 "schedule": "1f1b", "strategy": "hetero", "workers": 2, "steps": $steps, "seed": 3,
 "optimizer": {"kind": "adamw", "lr": 0.001}, "rebalance": "off", "freeze": $2}
JSON
}

# run NAME FREEZE: trains the job, polling its status; leaves "TIME STEP LOSS" lines in NAME.poll
# and "STEP LOSS" for every step in NAME.loss
run() {
    spec "$1" "$2" >"$work/$1.json"
    local id
    id=$("$sc" submit "$work/$1.json" | sed -n 's/^submitted \(job-[0-9]*\).*/\1/p')
    echo "$id" >"$work/$1.id"
    [ -n "$id" ] || { echo "bench_freeze: submit failed" >&2; exit 1; }
    : >"$work/$1.poll"
    while :; do
        local s
        s=$("$sc" status "$id" --json)
        local state
        state=$(jq -r .state <<<"$s")
        echo "$(date +%s.%N) $(jq -r '"\(.step) \(.loss)"' <<<"$s")" >>"$work/$1.poll"
        case $state in succeeded) break ;; failed | cancelled) echo "bench_freeze: $1 $state: $(jq -r .reason <<<"$s")" >&2; exit 1 ;; esac
        sleep 0.2
    done
    "$sc" status "$id" --json >"$work/$1.status"
    sed -n "s/.* job $id step \([0-9]*\): loss \([0-9.]*\)$/\1 \2/p" "$work/coord.log" | sort -n -u >"$work/$1.loss"
}

# figures NAME OTHER: "first_iter_s last_iter_s wall_s final_loss tail_loss": the tail loss is the
# mean over the last tenth's steps that both jobs logged (the same batches)
figures() {
    local final tail
    final=$(jq -r '.reason' "$work/$1.status" | sed -n 's/.*final loss \([0-9.]*\).*/\1/p')
    tail=$(awk -v hi=$((steps - steps / 10)) 'NR == FNR { seen[$1] = 1; next }
        $1 > hi && seen[$1] { sum += $2; n++ } END { printf "%.4f", n ? sum / n : 0 }' \
        "$work/$2.loss" "$work/$1.loss")
    awk -v n="$steps" -v final="$final" -v tailloss="$tail" '
        { t[NR] = $1; s[NR] = $2; l[NR] = $3 }
        END {
            lo = n / 10; hi = n - n / 10
            for (i = 1; i <= NR; i++) {
                if (s[i] >= 1 && t0 == "") t0 = t[i]
                if (s[i] >= 2 && a0 == "") { a0 = t[i]; as0 = s[i] }
                if (s[i] <= lo) { a1 = t[i]; as1 = s[i] }
                if (s[i] >= hi && b0 == "") { b0 = t[i]; bs0 = s[i] }
                if (s[i] < n) { b1 = t[i]; bs1 = s[i] }
            }
            first = (as1 > as0) ? (a1 - a0) / (as1 - as0) : 0
            last = (bs1 > bs0) ? (b1 - b0) / (bs1 - bs0) : 0
            printf "%.4f %.4f %.1f %s %s\n", first, last, t[NR] - t0, final, tailloss
        }' "$work/$1.poll"
}

run plain '"off"'
echo "GPT $layers layers, width $width, seq 64, batch 8, $steps steps, 2 CPU workers (1 thread each), data: $data"
printf "%-44s %10s %10s %8s %10s %9s\n" freeze "first_it_s" "last_it_s" "wall_s" "final_loss" "tail_loss"
i=0
for f in "${freezes[@]}"; do
    run "frozen$i" "$f"
    read -r p_first p_last p_wall p_final p_tail <<<"$(figures plain "frozen$i")"
    [ $i -gt 0 ] || printf "%-44s %10s %10s %8s %10s %9s\n" '"off"' "$p_first" "$p_last" "$p_wall" "$p_final" "$p_tail"
    read -r f_first f_last f_wall f_final f_tail <<<"$(figures "frozen$i" plain)"
    printf "%-44s %10s %10s %8s %10s %9s\n" "$f" "$f_first" "$f_last" "$f_wall" "$f_final" "$f_tail"
    jq -r '.transitions[] | select(.to == "running" and (.reason | test("frozen"))) | "    " + .reason' \
        "$work/frozen$i.status" | sed 's/, predicted.*//'
    awk -v a="$f_last" -v b="$p_last" -v c="$f_wall" -v d="$p_wall" -v g="$f_tail" -v h="$p_tail" 'BEGIN {
        printf "    against \"off\": last-tenth iteration %.2fx, wall time %.2fx, tail loss %+.2f%%\n",
            a / b, c / d, 100 * (g - h) / h }'
    # within the job (the same host load, nearer in time): before the first freeze, after the last
    steps_at=$(jq -r '[.transitions[] | select(.to == "running" and (.reason | test("frozen")))
        | .reason | capture("after step (?<s>[0-9]+)").s | tonumber] | "\(min // 0) \(max // 0)"' \
        "$work/frozen$i.status")
    read -r s_first s_last <<<"$steps_at"
    if [ "$s_first" -gt 0 ]; then
        awk -v a="$s_first" -v b="$s_last" -v n="$steps" '
            { t[NR] = $1; s[NR] = $2 }
            END {
                for (i = 1; i <= NR; i++) {
                    if (s[i] >= 10 && x0 == "") { x0 = t[i]; xs0 = s[i] }
                    if (s[i] <= a) { x1 = t[i]; xs1 = s[i] }
                    if (s[i] >= b + 10 && y0 == "") { y0 = t[i]; ys0 = s[i] }
                    if (s[i] < n) { y1 = t[i]; ys1 = s[i] }
                }
                before = xs1 > xs0 ? (x1 - x0) / (xs1 - xs0) : 0
                after = ys1 > ys0 ? (y1 - y0) / (ys1 - ys0) : 0
                if (before > 0 && after > 0)
                    printf "    within the job: %.4f s per iteration before the first freeze, %.4f s after the last (%.2fx)\n",
                        before, after, after / before
            }' "$work/frozen$i.poll"
    fi
    i=$((i + 1))
done
