#!/usr/bin/env bash
# Chaos: faults drawn at random (seeded; the seed is printed, STAGECRAFT_CHAOS_SEED=N replays
# it: the same faults at the same checkpoints, though not the same timing) are injected into a
# running two-stage 1f1b job on three CPU workers (one spare), with
# `stress-ng --cpu 2` competing for the cores when it is installed. The faults drawn from:
#   kill9   kill -9 of a worker of the job, started again under its name
#   stop    SIGSTOP of a worker of the job (hung: dead after --dead-after), SIGCONT once the job
#           runs without it (it is fenced: nothing it sends then is applied)
#   corrupt kill -9 of a worker of the job and a flipped byte in the newest checkpoint of
#           stage 0, then the worker started again (the job falls back to the older step)
#   coord   kill -9 of the coordinator, started again on the same port and state folder
# The job must succeed; every resume after a fault must start at or after the last checkpoint
# the coordinator knew when the fault struck (the step before it for `corrupt`, whose newest
# checkpoint is the one broken), at a checkpointed step; the job ends at its requested step;
# and its final parameters are bit for bit those of the same job run without faults (CPU
# kernels are deterministic and a synchronous schedule applies the same updates in the same
# order whatever the re-plans).
# Usage: test_chaos.sh PATH/TO/stagecraft
sc=${1:?usage: test_chaos.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || { echo "SKIP: needs jq"; exit 77; }

seed=${STAGECRAFT_CHAOS_SEED:-$(($(date +%s) % 100000))}
echo "chaos seed: $seed (replay with STAGECRAFT_CHAOS_SEED=$seed)"
RANDOM=$seed
faults=(kill9 stop corrupt coord)
# three faults (STAGECRAFT_CHAOS_FAULTS=N for more) in about a minute; two in a slow build
every=10 steps=1500 n_faults=3
[ "${STAGECRAFT_SLOW_BUILD:-0}" = 1 ] && steps=600 n_faults=2
n_faults=${STAGECRAFT_CHAOS_FAULTS:-$n_faults}
start_coordinator coord "$work/state" --heartbeat-ms 200 --dead-after 5
port=${STAGECRAFT_COORDINATOR##*:}
declare -A wpid
for w in a b c; do
    start_worker "$w"
    wpid[$w]=$worker_pid
done
wait_alive 30 3 || fail "workers did not register"

cat >"$work/job.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "chaos",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 16, "layers": 2, "width": 32, "heads": 2},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 4, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": $steps, "seed": 7,
 "optimizer": {"kind": "adamw", "lr": 0.003}, "checkpoint_every": $every,
 "checkpoint_keep": 4, "checkpoint_replicas": 0}
JSON
submit() { "$sc" submit "$1" --json | jq -r .job_id; }
# transitions JOB: "to<TAB>reason" of each transition, oldest first
transitions() { "$sc" status "$1" --json | jq -r '.transitions[] | "\(.to)\t\(.reason)"'; }
ckpt_known() { field "$1" last_checkpoint_step; }
# job_workers JOB: the names of the workers its plan uses
job_workers() {
    local ids
    ids=$("$sc" status "$1" --json | jq -c '[.stage_figures[].worker_ids[]] | unique')
    "$sc" workers --json | jq -r --argjson ids "$ids" '.workers[] | select(.id as $i | $ids | index($i)) | .name'
}
wait_running() { wait_for "$1" is_state "$2" running; }

# the reference: the same job without faults or load
ref=$(submit "$work/job.json")
wait_for 240 is_state "$ref" succeeded || fail "reference $ref is $(job_state "$ref")"

if command -v stress-ng >/dev/null; then
    stress-ng --cpu 2 --timeout 600 >"$work/stress.log" 2>&1 &
    pids+=("$!")
    echo "stress-ng --cpu 2 runs beside the job"
else
    echo "note: stress-ng is not installed; the job runs without competing load"
fi

id=$(submit "$work/job.json")
wait_running 120 "$id" || fail "$id is $(job_state "$id"): $(field "$id" reason)"
# targets: the checkpointed steps at which the faults strike, spread over the job's first 80%
targets=()
for ((i = 1; i <= n_faults; i++)); do targets+=($((steps * 8 * i / (10 * (n_faults + 1)) / every * every))); done
drawn=()
for ((i = 0; i < n_faults; i++)); do drawn+=("${faults[RANDOM % ${#faults[@]}]}"); done
echo "faults: ${drawn[*]} at checkpoints ${targets[*]}"

# restart WORKER: starts the worker again under its name
restart() {
    start_worker "$1"
    wpid[$1]=$worker_pid
}
# lowest_resume JOB FROM: the lowest step a "training on" transition from index FROM on resumed
# at (0 for one that started afresh); empty when none did
lowest_resume() {
    transitions "$1" | tail -n +"$(($2 + 1))" | grep -P '^running\ttraining on' |
        sed -n '/from the checkpoint of step/{s/.*from the checkpoint of step \([0-9]*\).*/\1/p;d}; s/.*/0/p' |
        sort -n | head -1
}

# mark: counts the job's transitions as a fault strikes (those after it are its consequences)
mark() { n_before=$(transitions "$id" | wc -l); }
# since JOB FROM STATE: a transition to STATE came after the first FROM ones
since() { transitions "$1" | tail -n +"$(($2 + 1))" | grep -q "^$3"; }
# resumed: the job runs again after the fault (a "training on" transition came since it struck),
# or it is already done
resumed() {
    is_state "$id" succeeded ||
        { is_state "$id" running && [ -n "$(lowest_resume "$id" "$n_before")" ]; }
}

for ((i = 0; i < n_faults; i++)); do
    f=${drawn[i]} target=${targets[i]}
    wait_running 120 "$id" || fail "$id is $(job_state "$id") before fault $i"
    mapfile -t victims < <(job_workers "$id")
    v=${victims[RANDOM % ${#victims[@]}]}
    case $f in
    kill9)
        freeze_when_known 120 "$id" "$target" "${wpid[$v]}" ||
            fail "$id did not checkpoint step $target"
        mark
        known=$(ckpt_known "$id")
        kill -KILL "${wpid[$v]}"; wait "${wpid[$v]}" 2>/dev/null
        restart "$v"
        floor=$known ;;
    stop)
        freeze_when_known 120 "$id" "$target" "${wpid[$v]}" ||
            fail "$id did not checkpoint step $target"
        mark
        known=$(ckpt_known "$id")
        wait_for 60 since "$id" "$n_before" recovering || fail "$id did not notice $v stopped"
        wait_for 180 resumed || fail "$id did not run again without $v"
        kill -CONT "${wpid[$v]}"
        floor=$known ;;
    corrupt)
        # every worker stops, so that none saves a newer checkpoint meanwhile; stage 0's files of
        # the newest step the coordinator knows (and any newer one) get a flipped byte
        freeze_when_known 120 "$id" "$target" "${wpid[@]}" ||
            fail "$id did not checkpoint step $target"
        mark
        known=$(ckpt_known "$id")
        kill -KILL "${wpid[$v]}"; wait "${wpid[$v]}" 2>/dev/null
        flipped=()
        for ck in "$work/wstate/checkpoints/$id"/stage0-step*.ckpt; do
            n=${ck##*step}; n=${n%.ckpt}
            [ "$n" -ge "$known" ] || continue
            byte=$(od -An -tu1 -j 200 -N1 "$ck" | tr -d ' ')
            printf "\\$(printf '%03o' $((byte ^ 1)))" | dd of="$ck" bs=1 seek=200 conv=notrunc 2>/dev/null
            flipped+=("$n")
        done
        echo "    flipped a byte of stage 0's checkpoint of step(s) $(printf '%s\n' "${flipped[@]}" | sort -n | head -3 | tr '\n' ' ')(${#flipped[@]} in all)"
        for w in "${!wpid[@]}"; do [ "$w" != "$v" ] && kill -CONT "${wpid[$w]}"; done
        restart "$v"
        floor=$((known - every)) ;;
    coord)
        # polled without an interval, as freeze_when_known does: the job may not end meanwhile
        deadline=$((SECONDS + 120)) known=0
        until [ "$known" -ge "$target" ] 2>/dev/null || [ $SECONDS -ge $deadline ]; do known=$(ckpt_known "$id"); done
        [ "$known" -ge "$target" ] 2>/dev/null || fail "$id did not checkpoint step $target"
        mark
        kill -KILL "$coord_pid"; wait "$coord_pid" 2>/dev/null
        v=coordinator
        listen=127.0.0.1:$port start_coordinator "coord$i" "$work/state" --heartbeat-ms 200 --dead-after 5
        floor=$known ;;
    esac
    wait_alive 60 3 || fail "fault $i ($f): the workers did not come back"
    wait_for 180 resumed || fail "fault $i ($f on $v): $id is $(job_state "$id"): $(field "$id" reason)"
    r=$(lowest_resume "$id" "$n_before")
    if [ -z "$r" ]; then
        echo "note: fault $i ($f on $v) struck after the job had nothing left to resume"
    elif [ "$r" -ge "$floor" ] && [ $((r % every)) -eq 0 ]; then
        pass "fault $i: $f on $v at checkpoint $known: resumed from step $r (>= $floor)"
    else
        fail "fault $i: $f on $v at checkpoint $known: resumed from step $r, below $floor or not a checkpoint"
    fi
done

wait_for 300 is_state "$id" succeeded && pass "$id succeeded through ${drawn[*]}" ||
    fail "$id is $(job_state "$id"): $(field "$id" reason)"
[ "$(field "$id" step)" = "$steps" ] && pass "$id ended at step $steps" ||
    fail "$id ended at step $(field "$id" step), not $steps"
transitions "$id" | grep -E '^(recovering|running)' | cut -c1-160 | sed 's/^/    /'
for s in 0 1; do
    cmp -s "$work/wstate/checkpoints/$ref/stage$s-step$steps.ckpt" \
        "$work/wstate/checkpoints/$id/stage$s-step$steps.ckpt" &&
        pass "stage $s: the parameters equal the fault-free run's bit for bit" ||
        fail "stage $s: the parameters differ from the fault-free run's"
done
finish
