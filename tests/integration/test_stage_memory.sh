#!/usr/bin/env bash
# Each stage's memory, predicted by the plan and measured by its workers' allocators: a GPT job
# on two CPU workers under gpipe, 1f1b and zb1 (different stashes in flight, zb1's W stashes);
# status shows both per stage, and they agree within 10% (the plan counts the parameters and
# their state, the stashes in flight, and each stage's scratch: workspace, gradient buffers).
# Usage: test_stage_memory.sh PATH/TO/stagecraft
sc=${1:?usage: test_stage_memory.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

start_coordinator coord "$work/state"
start_worker a
start_worker b
wait_alive 20 2 || fail "workers did not register"

n=0
for sch in gpipe 1f1b zb1; do
    n=$((n + 1))
    cat >"$work/$sch.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "mem-$sch",
 "model": {"kind": "gpt", "vocab": 512, "seq_len": 32, "layers": 4, "width": 64, "heads": 4},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 4, "schedule": "$sch",
 "strategy": "uniform", "workers": 2, "steps": 6, "rebalance": "off"}
JSON
    "$sc" submit "$work/$sch.json" >/dev/null || fail "submit $sch"
    wait_for 120 is_state "job-$n" succeeded || {
        fail "$sch: job-$n is $(job_state "job-$n")"
        continue
    }
    "$sc" status "job-$n" --json >"$work/$sch.status"
    out=$(python3 - "$work/$sch.status" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
for s in d["stage_figures"]:
    p, m = s["predicted_memory_bytes"], s["measured_memory_bytes"]
    print(f"stage {s['stage']}: predicted {p:.0f}, measured {m:.0f} bytes")
    if not (m > 0 and p > 0 and abs(p - m) <= 0.10 * m):
        bad.append(s["stage"])
print("BAD" if bad or len(d["stage_figures"]) != 2 else "GOOD")
PY
)
    echo "$out" | sed 's/^/  /'
    [ "$(echo "$out" | tail -n 1)" = GOOD ] &&
        pass "$sch: each stage's predicted memory within 10% of its measured" ||
        fail "$sch: predicted and measured memory disagree"
    "$sc" status "job-$n" | grep -q "^memory:  stage 0 .* MB (planned .*) stage 1 " ||
        fail "$sch: status shows no memory line: $("$sc" status "job-$n" | head -n 6)"
done
finish
