#!/usr/bin/env bash
# An elastic job grows onto workers another job frees, with a plan that leaves out the worker
# that holds every block: each worker keeps its own state folder (as on separate servers), so
# the new stages can only take their blocks from the left-out worker, which still serves what it
# kept paused for the move. The job goes on from the step it paused at and succeeds.
# Usage: test_elastic_grow.sh PATH/TO/stagecraft
sc=${1:?usage: test_elastic_grow.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || { echo "SKIP: needs jq"; exit 77; }

start_coordinator coord "$work/state" --heartbeat-ms 200 --suspect-after 25 --dead-after 50 \
    --reprofile-ms 1000
own_worker() { # NAME: a worker with a state folder of its own
    "$sc" worker --name "$1" --state "$work/state-$1" >>"$work/$1.log" 2>&1 &
    worker_pid=$!
    pids+=("$worker_pid")
}
# in this order, so that a plan of two takes a and b (the first free ones) and leaves c out
own_worker a
wait_alive 20 1 || fail "a did not register"
own_worker b
wait_alive 20 2 || fail "b did not register"
own_worker c
wait_alive 20 3 || fail "c did not register"

width=64 steps=3000
[ "${STAGECRAFT_SLOW_BUILD:-0}" = 1 ] && width=16 steps=800
spec() { # NAME WORKERS STEPS
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 32, "layers": 4, "width": $width, "heads": 2, "cpu_kernels": "reference"},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 4, "schedule": "1f1b",
 "strategy": "hetero", "workers": $2, "steps": $3, "seed": 9, "checkpoint_every": 20}
JSON
}
submit() { "$sc" submit "$1" --json | jq -r .job_id; }
history() { "$sc" status "$1" --json | jq -r '.transitions[] | "\(.to): \(.reason)"'; }
id_of() { "$sc" workers --json | jq -r ".workers[] | select(.name == \"$1\") | .id"; }
stage_workers() { "$sc" status "$1" --json | jq -r '[.stage_figures[].worker_ids[]] | unique | join(" ")'; }

# a short job on a and b; the elastic one starts on c, the one left
spec short '["a", "b"]' 400 >"$work/short.json"
short=$(submit "$work/short.json")
wait_for 120 is_state "$short" running || fail "$short is $(job_state "$short")"
spec elastic '{"min": 1, "max": 2}' $steps >"$work/elastic.json"
job=$(submit "$work/elastic.json")
wait_for 120 is_state "$job" running || fail "$job is $(job_state "$job"): $(field "$job" reason)"
c=$(id_of c)
[ "$(stage_workers "$job")" = "$c" ] && pass "$job starts on c, the worker left" ||
    fail "$job runs on '$(stage_workers "$job")', not on c ($c) alone"

# the short job ends: the elastic one grows onto a and b
wait_for 300 is_state "$short" succeeded || fail "$short is $(job_state "$short")"
two() { [ "$(stage_workers "$job" | wc -w)" -eq 2 ] && is_state "$job" running; }
wait_for 180 two && pass "$job grew to two workers: $(stage_workers "$job")" ||
    fail "$job did not grow: $(history "$job" | tail -3)"
case " $(stage_workers "$job") " in
*" $c "*) fail "the new plan kept c: the case of a plan without the holder was not made" ;;
*) pass "the new plan leaves c out, which held every block" ;;
esac
wait_for 600 is_state "$job" succeeded && pass "$job succeeded" ||
    fail "$job is $(job_state "$job"): $(history "$job" | grep -E 'failed|recovering' | head -3)"
history "$job" | grep -E "^(failed|recovering)" && fail "$job failed or recovered on the way"
ls "$work/state-c/checkpoints/$job"/stage*-step$steps.ckpt >/dev/null 2>&1 &&
    fail "c still trained the job at its end"
history "$job" | grep -E "^running: rebalanced" | sed 's/^/    /'
finish
