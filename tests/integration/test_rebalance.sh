#!/usr/bin/env bash
# Rebalancing a running job on demand (`stagecraft rebalance`): a dry run shows the plan and the
# predicted gain and changes nothing; a rebalance pauses every stage after one step, re-plans,
# and the new stages take their blocks over from the paused workers (not from checkpoint files);
# the job ends with the same parameters, bit for bit, as the same job run without it; the
# history says why and how long it took. A worker lost while blocks move sends the job to
# recovery from its last checkpoint, and it still ends with the same parameters.
# Usage: test_rebalance.sh PATH/TO/stagecraft
sc=${1:?usage: test_rebalance.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

# heartbeats may be late on a loaded machine: a worker counts as dead after 10 s without one
start_coordinator coord "$work/state" --heartbeat-ms 200 --suspect-after 25 --dead-after 50
start_worker a
start_worker b
wait_alive 20 2 || fail "workers did not register"

# a slower build (sanitizers) trains a narrower model: what is checked is the order of events
width=64
[ "${STAGECRAFT_SLOW_BUILD:-0}" = 1 ] && width=16
spec() { # NAME WORKERS
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 32, "layers": 4, "width": $width, "heads": 2, "cpu_kernels": "reference"},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2, "schedule": "1f1b",
 "strategy": "uniform", "workers": $2, "steps": 400, "seed": 5, "checkpoint_every": 50,
 "rebalance": "off"}
JSON
}
history() { "$sc" status "$1" --json | jq -r '.transitions[] | "\(.to): \(.reason)"'; }
step_of() { field "$1" step; }
past() { [ "$(step_of "$1")" -ge "$2" ] 2>/dev/null; }
ckpt=$work/wstate/checkpoints
# same_params JOB REF: the final checkpoints of both jobs hold the same bytes, stage by stage
same_params() {
    local s found=0
    for f in "$ckpt/$2"/stage*-step400.ckpt; do
        s=$(basename "$f")
        cmp -s "$f" "$ckpt/$1/$s" || return 1
        found=$((found + 1))
    done
    [ $found -ge 2 ]
}

# 1. the reference: the same job, never rebalanced
spec ref 2 >"$work/ref.json"
"$sc" submit "$work/ref.json" >/dev/null || fail "submit ref"
wait_for 400 is_state job-1 succeeded || fail "job-1 is $(job_state job-1): $(field job-1 reason)"

# 2. a dry run changes nothing; a rebalance moves the job to a new run after a pause
spec moved 2 >"$work/moved.json"
"$sc" submit "$work/moved.json" >/dev/null || fail "submit moved"
wait_for 300 past job-2 20 || fail "job-2 did not reach step 20: $(job_state job-2)"
dry=$("$sc" rebalance job-2 --dry-run --json)
[ "$(jq -r .started <<<"$dry")" = false ] && [ "$(jq '.plan.stages | length' <<<"$dry")" -ge 1 ] &&
    jq -e '.new_iteration_s > 0 and .current_iteration_s > 0' <<<"$dry" >/dev/null &&
    grep -q "dry run, nothing changed" <<<"$dry" &&
    pass "a dry run shows the plan and the predicted times: $(jq -r .message <<<"$dry")" ||
    fail "dry run: $dry"
history job-2 | grep -q "^rebalancing" && fail "a dry run rebalanced: $(history job-2)"
out=$("$sc" rebalance job-2)
answered_ms=$(date +%s%3N)
grep -q "rebalancing after step" <<<"$out" && pass "rebalance started: $out" || fail "rebalance: $out"
# status says what happens from the moment the pause is asked for: the job turned rebalancing
# (its history stamps when) before the command's answer came back, whatever happened since
pause=$(sed -n 's/.*rebalancing after step \([0-9]*\):.*/\1/p' <<<"$out")
began=$("$sc" status job-2 --json | jq -r --arg p "$pause" '[.transitions[] |
    select(.to == "rebalancing" and (.reason | test("(pausing|paused) after step " + $p + "\\b")))]
    | first | .at_unix_ms // empty')
[ -n "$began" ] && [ "$began" -le "$answered_ms" ] &&
    pass "the job was rebalancing (pausing after step $pause) before the command answered" ||
    fail "no rebalancing transition before the answer ($answered_ms): $("$sc" status job-2 --json | jq -c '.transitions[-3:]')"
# the move's measured cost: the reason of its first step, then what the next decision weighs
reason_has() { field "$1" reason | grep -q "$2"; }
if wait_for 300 reason_has job-2 "s after every stage paused (the move's cost"; then
    dry=$("$sc" rebalance job-2 --dry-run --json 2>&1)
    if is_state job-2 running; then
        grep -q "a move costs about [0-9.e-]* s, measured on the last move" <<<"$dry" &&
            pass "the next decision weighs the move's measured cost" || fail "after the move: $dry"
    fi
else
    fail "no measured cost of the move: $(field job-2 reason)"
fi
wait_for 400 is_state job-2 succeeded || fail "job-2 is $(job_state job-2): $(field job-2 reason)"
h=$(history job-2)
grep -q "^rebalancing: rebalance asked for: .*predicted .* s per iteration now (.* s measured), .* re-planned (gain .*); detected in .*, planned in .*; paused after step [0-9]* in" <<<"$h" &&
    grep -q "^running: rebalanced after step [0-9]* to 2 stage(s), predicted .*stages assigned in" <<<"$h" &&
    pass "the history has the rebalance, why, the predicted gain and its timings" ||
    fail "history of job-2: $h"
# (a pause that falls on a checkpoint step resumes each stage from its own checkpoint instead)
paused=$(sed -n 's/^rebalancing: .*paused after step \([0-9]*\) in.*/\1/p' <<<"$h" | head -n 1)
if [ -n "$paused" ] && [ $((paused % 50)) -eq 0 ]; then
    [ "$(grep -c "job job-2 stage [0-9]*: resumed from its own checkpoint of step $paused" "$work/a.log" "$work/b.log" |
        awk -F: '{ n += $2 } END { print n }')" -ge 2 ] &&
        pass "the pause fell on checkpoint step $paused: the stages resumed from their own checkpoints" ||
        fail "paused at checkpoint step $paused: $(grep -h 'job-2' "$work/a.log" "$work/b.log" | tail -n 5)"
else
    grep -q "took blocks .* of step [0-9]* over: [0-9]* bytes from other workers" "$work/a.log" "$work/b.log" &&
        pass "the new stages took their blocks over from the paused workers" ||
        fail "no blocks taken over: $(grep -h 'job-2' "$work/a.log" "$work/b.log" | tail -n 5)"
fi
same_params job-2 job-1 && pass "the rebalanced job ends with the reference's parameters, bit for bit" ||
    fail "job-2's final checkpoints differ from job-1's"

# 3. only a running job rebalances
out=$("$sc" rebalance job-1 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q "job-1 is succeeded; only a running job rebalances" <<<"$out" &&
    pass "a finished job is refused: $out" || fail "rebalance of a finished job: rc $rc, $out"
out=$("$sc" rebalance job-99 2>&1)
[ $? -ne 0 ] && grep -q "NOT_FOUND" <<<"$out" && pass "an unknown job is refused" || fail "$out"

# 4. a worker lost while the blocks move: recovery from the last checkpoint, same parameters
STAGECRAFT_WORKER_FAULTS=die-on-move start_worker c
c_pid=$worker_pid
wait_alive 20 3 || fail "worker c did not register"
spec lost '["a", "c"]' >"$work/lost.json"
"$sc" submit "$work/lost.json" >/dev/null || fail "submit lost"
knows_ckpt() { [ "$(field job-3 last_checkpoint_step)" -ge 50 ] 2>/dev/null; }
wait_for 300 knows_ckpt || fail "job-3 has no checkpoint: $(job_state job-3)"
"$sc" rebalance job-3 >/dev/null || fail "rebalance job-3"
wait "$c_pid" 2>/dev/null
wait_for 30 is_state job-3 recovering && pass "a worker killed mid-move sends the job to recovery" ||
    fail "job-3 is $(job_state job-3): $(field job-3 reason)"
start_worker c
wait_for 400 is_state job-3 succeeded || fail "job-3 is $(job_state job-3): $(field job-3 reason)"
history job-3 | grep -q "running: training on 2 stage(s) from the checkpoint of step" &&
    pass "it resumed from its last checkpoint" || fail "history of job-3: $(history job-3)"
same_params job-3 job-1 && pass "and ends with the reference's parameters, bit for bit" ||
    fail "job-3's final checkpoints differ from job-1's"

finish
