#!/usr/bin/env bash
# The links training measures: a two-stage job on loopback reports, per direction between its
# two workers, the effective speed of its messages (status --json "links"): the activations of
# stage 0 to stage 1 and the gradients back, each message of micro-batch x sequence x width
# floats, as many per step as micro-batches, at a smoothed speed and the expected one.
# Usage: test_link_speed.sh PATH/TO/stagecraft
sc=${1:?usage: test_link_speed.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null 2>&1 || { echo "SKIP: needs jq"; exit 77; }

start_coordinator coord "$work/state" --heartbeat-ms 200 --suspect-after 25 --dead-after 50
start_worker a
start_worker b
wait_alive 20 2 || fail "workers did not register"

width=64
[ "${STAGECRAFT_SLOW_BUILD:-0}" = 1 ] && width=16
cat >"$work/job.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "links",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 32, "layers": 4, "width": $width, "heads": 2, "cpu_kernels": "reference"},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "stages": 2, "steps": 100000, "seed": 5, "rebalance": "off"}
JSON
"$sc" submit "$work/job.json" >/dev/null || fail "submit"
links() { "$sc" status job-1 --json | jq -c '.links'; }
# both directions measured (a reference: 8 samples after the first 10 steps)
both() { [ "$(links | jq 'length')" -eq 2 ]; }
wait_for 240 both || fail "no two links measured: $(links); job-1 is $(job_state job-1): $(field job-1 reason)"
st=$("$sc" status job-1 --json)
w0=$(jq -r '.stage_figures[0].worker_ids[0]' <<<"$st")
w1=$(jq -r '.stage_figures[1].worker_ids[0]' <<<"$st")
bytes=$((4 * 32 * 4 * width)) # a micro-batch of 4 samples, 32 positions, $width floats each
for dir in "$w0 $w1" "$w1 $w0"; do
    set -- $dir
    l=$(jq -c ".links[] | select(.from == \"$1\" and .to == \"$2\")" <<<"$st")
    [ -n "$l" ] && jq -e ".message_bytes == $bytes and .messages_per_step == 2 and .samples >= 8 and
        .measured_bytes_per_s > 0 and .expected_bytes_per_s > 0 and
        .expected_bytes_per_s == .reference_bytes_per_s" <<<"$l" >/dev/null &&
        pass "link $1 -> $2: $(jq -r '"\(.message_bytes) bytes a message, \(.messages_per_step) a step, \(.measured_bytes_per_s) bytes/s measured, \(.expected_bytes_per_s) expected"' <<<"$l")" ||
        fail "link $1 -> $2: '$l' (expected $bytes bytes a message, 2 a step)"
done
"$sc" status job-1 | grep -q "^links: " && pass "status shows them" || fail "status: $("$sc" status job-1)"
"$sc" cancel job-1 >/dev/null || fail "cancel"
wait_for 60 is_state job-1 cancelled || fail "job-1 is $(job_state job-1)"
finish
