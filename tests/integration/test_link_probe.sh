#!/usr/bin/env bash
# The link probe: profiling a job also measures each worker's link to the coordinator, and the
# job's cluster model takes the measured figure ("nic_bandwidth_source": "measured"). A worker
# that refuses the probe (as one without the method would) costs nothing but the figure: the job
# trains all the same on its reported NIC bandwidth, and the coordinator says why in its log.
# Usage: test_link_probe.sh PATH/TO/stagecraft
sc=${1:?usage: test_link_probe.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null 2>&1 || { echo "skipped: needs jq"; exit 77; }

start_coordinator coord "$work/state" --heartbeat-ms 200
start_worker a
STAGECRAFT_WORKER_FAULTS=refuse-probe start_worker b
wait_alive 20 2 ||
    fail "workers did not register"

job() {
    cat >"$work/$1.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "mlp", "sizes": [32, 64, 64, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2,
 "strategy": "minmax", "workers": ["$1"], "steps": 5}
JSON
    "$sc" submit "$work/$1.json" >/dev/null || fail "submit $1"
}
# server KEY: that key of the (one) server of job-N's cluster model
server() { "$sc" status "$1" --json | jq -r ".plan | if type == \"string\" then fromjson else . end | .cluster.servers[0].$2"; }

job a
wait_for 30 is_state job-1 succeeded && pass "a job on a probed worker trains" ||
    fail "job-1 is $(job_state job-1): $("$sc" status job-1 | sed -n 2p)"
src=$(server job-1 nic_bandwidth_source)
bw=$(server job-1 nic_bandwidth_bytes_per_s)
[ "$src" = measured ] && awk -v b="$bw" 'BEGIN { exit !(b > 1e6) }' &&
    pass "its server's NIC bandwidth is measured: $bw bytes/s over loopback" ||
    fail "job-1's server: nic_bandwidth_source '$src', nic_bandwidth_bytes_per_s '$bw'"
grep -q "('a'): link to the coordinator .* bytes/s (up .* down .* latency" "$work/coord.log" &&
    pass "the coordinator logs the figures of both directions" || fail "no probe figures logged"

job b
wait_for 30 is_state job-2 succeeded && pass "a worker that refuses the probe still trains its job" ||
    fail "job-2 is $(job_state job-2): $("$sc" status job-2 | sed -n 2p)"
[ "$("$sc" status job-2 | grep -c ' s  profiling ')" -eq 1 ] && pass "profiled once, not retried" ||
    fail "job-2 was profiled $("$sc" status job-2 | grep -c ' s  profiling ') times"
src=$(server job-2 nic_bandwidth_source)
[ "$src" = nic ] || [ "$src" = assumed ] && pass "its server keeps the reported figure ($src)" ||
    fail "job-2's server: nic_bandwidth_source '$src'"
grep -q "('b'): link probe failed, so its server's NIC bandwidth is the hardware report's .*refuse-probe" \
    "$work/coord.log" && pass "the coordinator logs why" || fail "no probe failure logged"
finish
