#!/usr/bin/env bash
# The copies' all-reduce as training measures it: a one-block model on two workers runs as one
# stage with a copy on each (the planner cannot cut one block; two copies halve its compute), the
# copies all-reduce their gradients through host memory each step and report it, and the job's
# status shows that stage's all-reduce per iteration as the plan charged it and as measured:
# both positive, the measured one (the wait for the slower copy left out) below the measured
# iteration time, in `status --json` and in the text.
# Usage: test_allreduce_measured.sh PATH/TO/stagecraft
sc=${1:?usage: test_allreduce_measured.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null 2>&1 || { echo "SKIP: needs jq"; exit 77; }

start_coordinator coord "$work/state"
start_worker a --threads 1
start_worker b --threads 1
wait_alive 20 2 || fail "workers did not register"

width=768
[ "${STAGECRAFT_SLOW_BUILD:-0}" = 1 ] && width=256
cat >"$work/job.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "copies",
 "model": {"kind": "mlp", "sizes": [$width, $width]},
 "data": {"kind": "synthetic"}, "batch_size": 512, "microbatches": 2, "schedule": "1f1b",
 "strategy": "hetero", "workers": 2, "steps": 100000, "seed": 5, "rebalance": "off"}
JSON
# the plan comes from measured profiles: submit again (3 plans at most) until it has copies
id=""
for _ in 1 2 3; do
    id=$("$sc" submit "$work/job.json" --json | sed -n 's/.*"job_id": "\(job-[0-9]*\)".*/\1/p')
    [ -n "$id" ] || { fail "submit"; finish; exit 1; }
    wait_for 120 is_state "$id" running || { fail "$id is $(job_state "$id"): $(field "$id" reason)"; break; }
    copies=$("$sc" status "$id" --json | jq '.plan.stages[0].replicas')
    [ "$copies" = 2 ] && break
    echo "plan of $id: $copies copy; submitting again"
    "$sc" cancel "$id" >/dev/null
    wait_for 60 is_state "$id" cancelled || fail "$id is $(job_state "$id")"
done
if [ "${copies:-}" != 2 ]; then
    echo "SKIP: the planner kept one copy in 3 plans on this machine's profiles"
    exit 77
fi
stage() { "$sc" status "$id" --json | jq -c '.stage_figures[0]'; }
measured() { stage | jq -e '.measured_allreduce_s > 0' >/dev/null; }
wait_for 240 measured || fail "no all-reduce measured: $(stage); $id is $(job_state "$id")"
st=$("$sc" status "$id" --json)
jq -e '.plan.stages[0].allreduce_s > 0 and
       .stage_figures[0].predicted_allreduce_s == .plan.stages[0].allreduce_s' <<<"$st" >/dev/null &&
    pass "the plan charges the copies' all-reduce $(jq '.plan.stages[0].allreduce_s' <<<"$st") s" ||
    fail "planned all-reduce: $(jq -c '[.plan.stages[0], .stage_figures[0]]' <<<"$st")"
jq -e '.stage_figures[0].measured_allreduce_s < .measured_iteration_s' <<<"$st" >/dev/null &&
    pass "measured $(jq '.stage_figures[0].measured_allreduce_s' <<<"$st") s, iteration $(jq '.measured_iteration_s' <<<"$st") s" ||
    fail "measured all-reduce not below the iteration: $(jq -c '[.stage_figures[0], .measured_iteration_s]' <<<"$st")"
"$sc" status "$id" | grep -q "^all-reduce: stage 0 .* s measured, .* s planned" &&
    pass "status shows it" || fail "status: $("$sc" status "$id")"
"$sc" cancel "$id" >/dev/null || fail "cancel"
wait_for 60 is_state "$id" cancelled || fail "$id is $(job_state "$id")"
finish
