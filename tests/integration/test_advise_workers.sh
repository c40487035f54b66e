#!/usr/bin/env bash
# `stagecraft advise --workers` and `--job`: the coordinator's idle workers (and a running job's)
# with their measured speeds; every worker is named with what dropping it is worth, a
# catalogue's server with what adding it is worth, and the figure for all the workers equals
# the coordinator's own plan of the job on them.
# Usage: test_advise_workers.sh PATH/TO/stagecraft
sc=${1:?usage: test_advise_workers.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || { echo "SKIP: needs jq"; exit 77; }

start_coordinator coord "$work/state"
start_worker a
start_worker b
start_worker c
wait_alive 20 3 || fail "workers did not register"

job() {
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "mlp", "sizes": [32, 64, 64, 64, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2,
 "strategy": "minmax", "workers": 3, "steps": $2, "rebalance": "off"}
JSON
}
job advice 10 >"$work/job.json"
job long 100000000 >"$work/long.json"

# equal within a relative 1e-8 (the coordinator's plan JSON carries 9 significant digits)
same() { jq -e -n --argjson a "$1" --argjson b "$2" '($a - $b | fabs) <= 1e-8 * ($a | fabs) and $a > 0' >/dev/null; }

"$sc" advise --workers --model "$work/job.json" --json >"$work/w.json" 2>"$work/w.err" ||
    fail "advise --workers: $(cat "$work/w.err")"
names=$(jq -r '[.workers[].name] | sort | join(",")' "$work/w.json")
[ "$names" = "a,b,c" ] && pass "advise --workers names the three workers" || fail "workers: $names"
ids=$(jq -r '[.workers[].id] | sort | join(",")' "$work/w.json")
dropped=$(jq -r '[.drop[] | select(.samples_per_s > 0) | .worker] | sort | join(",")' "$work/w.json")
[ -n "$ids" ] && [ "$dropped" = "$ids" ] && pass "a marginal for every worker ($dropped)" ||
    fail "drop margins for '$dropped', workers '$ids'"
all=$(jq '.all.samples_per_s' "$work/w.json")
coord=$(jq '.coordinator_plan.samples_per_s' "$work/w.json")
same "$all" "$coord" && pass "all three plan $all samples/s, as the coordinator plans them" ||
    fail "advise predicts $all samples/s for all workers, the coordinator plans $coord"

# the workers as a catalogue: their cluster with a price on each type, searched by advise --catalog
jq '.cluster | .device_types[] += {"price_per_hour": 0.5}' "$work/w.json" >"$work/workers-cat.json"
jq '.profile' "$work/w.json" >"$work/profile.json"
"$sc" advise --model "$work/profile.json" --catalog "$work/workers-cat.json" --batch 8 \
    --microbatches 2 --strategy minmax --objective min-cost-at=1 --json >"$work/c.json" 2>&1 &&
    [ "$(jq '.best.devices | length' "$work/c.json")" -ge 1 ] &&
    pass "the workers' cluster with prices is a catalogue advise --catalog searches" ||
    fail "advise --catalog on the workers: $(head -c 600 "$work/c.json")"

# the text form, with a catalogue: dropping each worker, adding the catalogue's server
cat >"$work/catalog.json" <<'JSON'
{"format": "stagecraft-cluster", "version": 1,
 "device_types": {"A10": {"relative_speed": 1.0, "memory_bytes": 24e9, "price_per_hour": 1.2}},
 "servers": [{"name": "extra", "devices": ["A10", "A10"],
              "intra_bandwidth_bytes_per_s": 16e9, "nic_bandwidth_bytes_per_s": 1.25e9}]}
JSON
"$sc" advise --workers --model "$work/job.json" --catalog "$work/catalog.json" >"$work/w.txt" 2>&1 ||
    fail "advise --workers --catalog: $(cat "$work/w.txt")"
for id in $(jq -r '.workers[].id' "$work/w.json"); do
    grep -qE "^  dropping $id (costs|gains) [0-9]+%" "$work/w.txt" ||
        fail "no line for dropping $id: $(cat "$work/w.txt")"
done
grep -qE '^  adding 2 x A10 on extra: [-+][0-9]+% samples/s for \+2\.40/h' "$work/w.txt" &&
    pass "adding the catalogue's server is priced" || fail "no adding line: $(cat "$work/w.txt")"

# bad usage is refused naming the flags
"$sc" advise --workers --job job-9 --model "$work/job.json" >"$work/bad.txt" 2>&1
[ $? -eq 2 ] && grep -q "not both" "$work/bad.txt" && pass "--workers with --job is refused" ||
    fail "--workers --job: $(cat "$work/bad.txt")"

# a running job: its workers with the speeds its training measured
"$sc" submit "$work/long.json" >/dev/null || fail "submit long"
wait_for 60 is_state job-1 running || fail "job-1 is $(job_state job-1)"
stepped() { [ "$(field job-1 step)" -gt 5 ]; }
wait_for 30 stepped || fail "job-1 did not step: $(field job-1 step)"
"$sc" advise --job job-1 --json >"$work/j.json" 2>"$work/j.err" || fail "advise --job: $(cat "$work/j.err")"
n=$(jq '.drop | length' "$work/j.json")
[ "$n" -ge 1 ] && pass "advise --job job-1 names $n workers' margins" || fail "advise --job: $(cat "$work/j.json")"
all=$(jq '.all.samples_per_s' "$work/j.json")
coord=$(jq '.coordinator_plan.samples_per_s' "$work/j.json")
same "$all" "$coord" && pass "the job's workers plan $all samples/s at its measured speeds, as the coordinator plans" ||
    fail "advise --job predicts $all, the coordinator plans $coord"
"$sc" cancel job-1 >/dev/null || fail "cancel job-1"
finish
