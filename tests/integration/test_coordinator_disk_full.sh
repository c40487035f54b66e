#!/usr/bin/env bash
# The coordinator's disk fills while a job runs (its state folder on a small tmpfs, filled by
# another file): the running job goes on and its progress, its recovery from a killed worker and
# its end are still recorded (in the space the coordinator keeps in reserve); a new job is
# refused with an error that says the state folder is full; the log says so; once the tmpfs
# grows, jobs are accepted again. The database passes SQLite's integrity check, and a
# coordinator started again on it finds every job it acknowledged.
# Usage: test_coordinator_disk_full.sh PATH/TO/stagecraft
sc=${1:?usage: test_coordinator_disk_full.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (mounts a tmpfs)"; exit 77; }
for t in jq sqlite3; do command -v $t >/dev/null || { echo "SKIP: needs $t"; exit 77; }; done
state=$work/state
mkdir -p "$state"
mount -t tmpfs -o size=8m tmpfs "$state" || { echo "SKIP: cannot mount a tmpfs"; exit 77; }
trap 'umount -l "$state" 2>/dev/null; cleanup' EXIT

start_coordinator coord "$state" --heartbeat-ms 200 --dead-after 5
declare -A wpid
for w in a b c; do
    start_worker "$w"
    wpid[$w]=$worker_pid
done
wait_alive 30 3 || fail "workers did not register"
job() { # NAME STEPS
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 16, "layers": 2, "width": 32, "heads": 2},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 4, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": $2, "seed": 7, "checkpoint_every": 20}
JSON
}
long=4000
[ "${STAGECRAFT_SLOW_BUILD:-0}" = 1 ] && long=1500
job long $long >"$work/long.json"
job short 100 >"$work/short.json"
submit() { "$sc" submit "$1" --json | jq -r .job_id; }
id=$(submit "$work/long.json")
wait_for 120 is_state "$id" running || fail "$id is $(job_state "$id")"

# the disk fills
# (dd stops at "No space left on device"; the free space df shows a moment later may already be
# the coordinator's reserve, freed at its first failed write)
dd if=/dev/zero of="$state/filler" bs=64k >/dev/null 2>"$work/dd.err"
grep -q "No space left on device" "$work/dd.err" || fail "the tmpfs did not fill: $(cat "$work/dd.err"; df -h "$state" | tail -1)"
s0=$(field "$id" step)
advanced() { [ "$(field "$id" step)" -gt $((s0 + 40)) ] || is_state "$id" succeeded; }
wait_for 60 advanced && pass "$id's progress is still recorded with the disk full (step $s0 -> $(field "$id" step))" ||
    fail "$id's step stays $(field "$id" step) with the disk full"
out=$("$sc" submit "$work/short.json" 2>&1) && fail "a submit with the disk full was accepted: $out"
[[ $out == *"full"* ]] && pass "a new job is refused: $out" || fail "the refusal does not say why: $out"
grep -q "full" "$work/coord.log" && pass "the log says: $(grep -m1 "full" "$work/coord.log" | cut -c1-200)" ||
    fail "the log says nothing of the full disk"

# a worker of the job dies: its recovery onto the spare is recorded
if is_state "$id" running; then
    n_before=$("$sc" status "$id" --json | jq '.transitions | length')
    v=$("$sc" workers --json | jq -r --argjson ids "$("$sc" status "$id" --json | jq -c '[.stage_figures[].worker_ids[]]')" \
        '[.workers[] | select(.id as $i | $ids | index($i)) | .name][0]')
    kill -KILL "${wpid[$v]}"
    recovered() { [ "$("$sc" status "$id" --json | jq "[.transitions[$n_before:][] | select(.to == \"running\")] | length")" -gt 0 ] || is_state "$id" succeeded; }
    wait_for 120 recovered && pass "$id recovered from the loss of $v with the disk full" ||
        fail "$id is $(job_state "$id") after $v died: $(field "$id" reason)"
else
    echo "note: $id ended before a worker could be killed"
fi
"$sc" workers >/dev/null && pass "the coordinator still answers" || fail "the coordinator does not answer"

# space returns
mount -o remount,size=64m "$state" || fail "cannot grow the tmpfs"
accepted() { id2=$("$sc" submit "$work/short.json" --json 2>/dev/null | jq -r .job_id) && [ -n "$id2" ]; }
wait_for 30 accepted && pass "with space again, $id2 is accepted" || fail "no job is accepted with space again"
wait_for 300 is_state "$id" succeeded && pass "$id succeeded" || fail "$id is $(job_state "$id"): $(field "$id" reason)"
wait_for 120 is_state "$id2" succeeded && pass "$id2 succeeded" || fail "$id2 is $(job_state "$id2"): $(field "$id2" reason)"

# the database is whole, and a coordinator started on it knows every job it acknowledged
kill -TERM "$coord_pid"; wait "$coord_pid"
check=$(sqlite3 "$state/stagecraft.db" "PRAGMA integrity_check")
[ "$check" = ok ] && pass "PRAGMA integrity_check: ok" || fail "PRAGMA integrity_check: $check"
listen=$STAGECRAFT_COORDINATOR start_coordinator coord2 "$state" --heartbeat-ms 200 --dead-after 5
for j in "$id" "$id2"; do
    is_state "$j" succeeded && pass "after a restart $j is succeeded" || fail "after a restart $j is $(job_state "$j")"
done
[ "$("$sc" status --json | jq '[.jobs[]] | length')" -eq 2 ] ||
    fail "the restarted coordinator lists $("$sc" status --json | jq -c '[.jobs[].job_id]')"
finish
