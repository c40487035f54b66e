#!/usr/bin/env bash
# The measured timeline: `stagecraft trace JOB --out FILE` writes one Chrome trace of a running
# job's last iterations (every stage's forward, backward, sends and receives, on the
# coordinator's clock) with the planned iteration beside it; bad requests are refused clearly;
# a worker that does not answer is named and left out. A job that ended (cancelled, finished)
# answers with the last window kept when it ended, also after the coordinator restarts.
# Usage: test_trace.sh PATH/TO/stagecraft
sc=${1:?usage: test_trace.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

# the worker stopped in part 4 must not be declared dead meanwhile (the job would recover): 30 s
start_coordinator coord "$work/state" --dead-after 30
start_worker a
start_worker b
pid_b=$worker_pid
wait_alive 30 2 || fail "workers did not register"

cat >"$work/job.json" <<'JSON'
{"format": "stagecraft-job", "version": 1, "name": "traced",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 8, "layers": 2, "width": 16, "heads": 2},
 "data": {"kind": "synthetic"}, "batch_size": 4, "microbatches": 2, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": 1000000, "seed": 3, "rebalance": "off",
 "optimizer": {"kind": "adamw", "lr": 0.003}}
JSON
"$sc" submit "$work/job.json" >/dev/null || fail "submit"
wait_for 120 is_state job-1 running || fail "job-1 did not start: $(job_state job-1)"
# both stages have run more iterations than they keep (8)
past() { [ "$(field job-1 step)" -ge "$1" ] 2>/dev/null; }
wait_for 120 past 12 || fail "job-1 did not reach step 12: $(field job-1 step)"

# 1. the trace and its summary
out=$("$sc" trace job-1 --out "$work/trace.json" 2>"$work/trace.err")
rc=$?
[ $rc -eq 0 ] && grep -Eq '^job-1: [0-9]+ events, 8 iterations, 2 workers; iteration measured [0-9.e-]+ s, planned [0-9.e-]+ s' <<<"$out" &&
    pass "trace wrote the file and summed it up: $out" || fail "trace: rc $rc: $out $(cat "$work/trace.err")"
jq -e '.traceEvents | length > 0' "$work/trace.json" >/dev/null && pass "the trace is JSON with events" ||
    fail "not a trace: $(head -c 300 "$work/trace.json")"

# rows: pid of "measured: stage S copy 0 ..." and "planned: stage S"
row() { jq -r --arg n "$1" '.traceEvents[] | select(.ph == "M" and .name == "process_name" and (.args.name | startswith($n))) | .pid' "$work/trace.json" | head -1; }
kinds() { jq -r --argjson p "$1" '[.traceEvents[] | select(.ph == "X" and .pid == $p) | .cat] | unique | join(" ")' "$work/trace.json"; }
for s in 0 1; do
    p=$(row "measured: stage $s copy 0 (worker w-")
    [ -n "$p" ] || { fail "no measured row for stage $s"; continue; }
    k=$(kinds "$p")
    want="forward backward"
    [ $s -eq 0 ] && want="$want send_activation recv_gradient" || want="$want recv_activation send_gradient"
    missing=""
    for w in $want optimizer; do grep -qw "$w" <<<"$k" || missing="$missing $w"; done
    [ -z "$missing" ] && pass "stage $s measured: $k" || fail "stage $s lacks$missing (has: $k)"
    # one runner runs one action at a time: in order, each ending before the next starts, all
    # at or after time 0 and inside the window of iterations
    bad=$(jq --argjson p "$p" '[.traceEvents[] | select(.ph == "X" and .pid == $p)] as $e
        | .otherData as $o
        | [range(1; $e | length) | select($e[.].ts + 0.002 < $e[. - 1].ts + $e[. - 1].dur)] | length
          + ([$e[] | select(.ts < 0 or .args.iteration < $o.first_iteration
                            or .args.iteration > $o.last_iteration)] | length)' "$work/trace.json")
    [ "$bad" = 0 ] && pass "stage $s events are ordered and inside the window" ||
        fail "stage $s: $bad events out of order or outside the window"
    p=$(row "planned: stage $s")
    planned=$(jq -r --argjson p "${p:-0}" '[.traceEvents[] | select(.ph == "X" and .pid == $p) | .name | split(" ")[0]] | unique | join(" ")' "$work/trace.json")
    [ -n "$p" ] && grep -qw forward <<<"$planned" && grep -qw backward <<<"$planned" &&
        pass "stage $s has planned events: $planned" ||
        fail "no planned row for stage $s"
done
n_iter=$(jq '.otherData.last_iteration - .otherData.first_iteration + 1' "$work/trace.json")
[ "$n_iter" = 8 ] && pass "the window is the last 8 iterations" || fail "window of $n_iter iterations"

# 2. --iterations and --json
"$sc" trace job-1 --out "$work/two.json" --iterations 2 --json >"$work/two.out" 2>&1 &&
    jq -e '.iterations == 2 and .workers == 2 and .events > 0 and (.missing | length) == 0' "$work/two.out" >/dev/null &&
    pass "--iterations 2 --json: $(cat "$work/two.out")" || fail "--iterations 2: $(cat "$work/two.out")"

# 3. refusals
"$sc" trace job-99 --out "$work/x.json" >"$work/r1.out" 2>&1
[ $? -eq 2 ] && grep -q 'job-99' "$work/r1.out" && [ ! -e "$work/x.json" ] &&
    pass "an unknown job is refused (exit 2, no file)" || fail "unknown job: $(cat "$work/r1.out")"
"$sc" trace job-1 >"$work/r2.out" 2>&1
[ $? -eq 2 ] && grep -q -- '--out' "$work/r2.out" && pass "--out is required" || fail "no --out: $(cat "$work/r2.out")"
"$sc" trace job-1 --out "$work/x.json" --iterations 0 >"$work/r3.out" 2>&1
[ $? -eq 2 ] && pass "--iterations 0 is bad usage" || fail "--iterations 0: $(cat "$work/r3.out")"

# 4. a worker that does not answer is named; the other's timeline is still traced
kill -STOP "$pid_b"
"$sc" trace job-1 --out "$work/part.json" --json >"$work/part.out" 2>"$work/part.err"
rc=$?
kill -CONT "$pid_b"
[ $rc -eq 0 ] && jq -e '.workers == 1 and (.missing | length) == 1' "$work/part.out" >/dev/null &&
    grep -q 'not in the trace: worker w-' "$work/part.err" &&
    pass "a silent worker is named and left out: $(cat "$work/part.err")" ||
    fail "silent worker: rc $rc $(cat "$work/part.out" "$work/part.err")"

# 5. a cancelled job: its last window was kept when it ended
"$sc" cancel job-1 >/dev/null || fail "cancel"
wait_for 30 is_state job-1 cancelled || fail "job-1 not cancelled: $(job_state job-1)"
# measured_rows FILE: the stages whose measured row has events in the trace, e.g. "0 1"
measured_rows() {
    local s p out=""
    for s in 0 1; do
        p=$(jq -r --arg n "measured: stage $s copy 0" '.traceEvents[] | select(.ph == "M" and .name == "process_name" and (.args.name | startswith($n))) | .pid' "$1" | head -1)
        [ -n "$p" ] && [ "$(jq --argjson p "$p" '[.traceEvents[] | select(.ph == "X" and .pid == $p)] | length' "$1")" -gt 0 ] &&
            out="$out $s"
    done
    echo "${out# }"
}
"$sc" trace job-1 --out "$work/y.json" >"$work/r4.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(measured_rows "$work/y.json")" = "0 1" ] &&
    pass "a cancelled job's last window was kept: $(cat "$work/r4.out")" ||
    fail "cancelled job: rc $rc $(cat "$work/r4.out")"

# 6. a short job that finished: its trace has the measured events of each stage
sed 's/"steps": 1000000/"steps": 20/; s/"traced"/"short"/' "$work/job.json" >"$work/short.json"
"$sc" submit "$work/short.json" >/dev/null || fail "submit short"
wait_for 120 is_state job-2 succeeded || fail "job-2 did not succeed: $(job_state job-2)"
"$sc" trace job-2 --out "$work/done.json" --json >"$work/done.out" 2>&1
rc=$?
[ $rc -eq 0 ] && jq -e '.workers == 2 and .iterations == 8 and .events > 0' "$work/done.out" >/dev/null &&
    [ "$(measured_rows "$work/done.json")" = "0 1" ] &&
    [ "$(jq '.otherData.last_iteration' "$work/done.json")" -ge 19 ] &&
    pass "a finished job's last 8 iterations, both stages measured: $(cat "$work/done.out")" ||
    fail "finished job: rc $rc $(cat "$work/done.out")"

# the profiling phase's time, from the history, in status and status --json
prof=$(field job-2 profiling_s)
awk -v p="$prof" 'BEGIN { exit !(p > 0) }' && "$sc" status job-2 | grep -Eq '^profiling: [0-9.e+-]+ s' &&
    pass "status shows the profiling time: $prof s" || fail "profiling time: '$prof' $("$sc" status job-2)"

# 7. a job that ended without running has nothing kept, and is told so with its state
sed 's/"workers": 2/"workers": 3/; s/"traced"/"waits"/' "$work/job.json" >"$work/waits.json"
"$sc" submit "$work/waits.json" >/dev/null || fail "submit waits"
"$sc" cancel job-3 >/dev/null || fail "cancel job-3"
"$sc" trace job-3 --out "$work/z.json" >"$work/r5.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q 'cancelled' "$work/r5.out" && grep -q 'no trace' "$work/r5.out" &&
    [ ! -e "$work/z.json" ] && pass "a job that never ran is refused, naming its state" ||
    fail "never-run job: rc $rc $(cat "$work/r5.out")"

# 8. the kept windows outlive the coordinator
kill -TERM "$coord_pid"
wait "$coord_pid" 2>/dev/null
start_coordinator coord2 "$work/state" --dead-after 30
"$sc" trace job-2 --out "$work/again.json" >"$work/r6.out" 2>&1 &&
    cmp -s "$work/done.json" "$work/again.json" &&
    pass "a finished job's trace is the same after a restart" ||
    fail "after a restart: $(cat "$work/r6.out")"

finish
