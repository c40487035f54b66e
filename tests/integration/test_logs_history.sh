#!/usr/bin/env bash
# Workers' recent log lines and a job's training series, through the coordinator:
# `stagecraft logs JOB` prints lines of every worker of the job (in time order, each with its
# worker's id), `logs WORKER` one worker's, --lines bounds them, --follow prints new ones; a
# worker that does not answer is named and the others are printed; /api/logs/JOB serves the
# same lines; `status JOB --history`
# (table and JSON) and /api/jobs/JOB/history give every step the job ran with a finite loss,
# also after the coordinator restarts; bad targets and counts are refused.
# Usage: test_logs_history.sh PATH/TO/stagecraft
sc=${1:?usage: test_logs_history.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null 2>&1 || { echo "SKIP: needs jq"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: needs python3"; exit 77; }

http_port() { sed -n 's/^dashboard and metrics on http port \([0-9]*\).*/\1/p' "$work/$1.log"; }
http_get() {
    python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' "$1"
}

# the worker stopped in part 3 must not be declared dead meanwhile: 30 s
start_coordinator coord "$work/state" --dead-after 30 --http 127.0.0.1:0
start_worker a
pid_a=$worker_pid
start_worker b
pid_b=$worker_pid
wait_alive 30 2 || fail "workers did not register"
id_a=$("$sc" workers --json | jq -r '.workers[] | select(.name == "a") | .id')
id_b=$("$sc" workers --json | jq -r '.workers[] | select(.name == "b") | .id')

job() { # job NAME STEPS
    cat <<JSON
{"format": "stagecraft-job", "version": 1, "name": "$1",
 "model": {"kind": "gpt", "vocab": 64, "seq_len": 8, "layers": 2, "width": 16, "heads": 2},
 "data": {"kind": "synthetic"}, "batch_size": 4, "microbatches": 2, "schedule": "1f1b",
 "strategy": "uniform", "workers": 2, "steps": $2, "seed": 3, "rebalance": "off",
 "optimizer": {"kind": "adamw", "lr": 0.003}}
JSON
}
job first 40 >"$work/job1.json"
"$sc" submit "$work/job1.json" >/dev/null || fail "submit"
wait_for 120 is_state job-1 succeeded || fail "job-1 did not succeed: $(job_state job-1)"

# 1. logs of the job: lines of both its workers, in time order, each prefixed with its id
"$sc" logs job-1 >"$work/logs.out" 2>"$work/logs.err" || fail "logs job-1: $(cat "$work/logs.err")"
for id in "$id_a" "$id_b"; do
    grep -q "^$id: 20[0-9-]*T[0-9:.]*Z [EWID] \[" "$work/logs.out" &&
        pass "logs job-1 has lines of $id" || fail "logs job-1 lacks $id: $(head -5 "$work/logs.out")"
done
sorted=$(sed 's/^[^:]*: //' "$work/logs.out" | cut -c1-24)
[ "$sorted" = "$(LC_ALL=C sort -s <<<"$sorted")" ] && pass "the lines are in time order" ||
    fail "lines out of time order"
"$sc" logs job-1 --json >"$work/logs.json" 2>&1 &&
    jq -e --arg a "$id_a" --arg b "$id_b" '[.workers[].worker_id] | sort == ([$a, $b] | sort)' "$work/logs.json" >/dev/null &&
    jq -e 'all(.workers[]; .error == null and (.lines | length) > 0 and .newest_seq >= (.lines[-1].seq))' "$work/logs.json" >/dev/null &&
    pass "logs --json: both workers answered with lines" || fail "logs --json: $(head -c 400 "$work/logs.json")"

port=$(http_port coord)
http_get "http://127.0.0.1:$port/api/logs/job-1?lines=5" >"$work/api_logs.json" 2>&1
jq -e '.target == "job-1" and (.workers | length) == 2 and all(.workers[]; .error == null and (.lines | length) == 5)' "$work/api_logs.json" >/dev/null &&
    pass "/api/logs/job-1?lines=5: five lines of each worker" || fail "/api/logs: $(head -c 300 "$work/api_logs.json")"

# one worker, by name; --lines bounds it
"$sc" logs a --lines 3 >"$work/a.out" 2>&1
[ "$(wc -l <"$work/a.out")" = 3 ] && [ "$(grep -c "^$id_a: " "$work/a.out")" = 3 ] &&
    pass "logs a --lines 3: three lines of $id_a" || fail "logs a --lines 3: $(cat "$work/a.out")"
"$sc" logs "$id_b" --lines 1000 >"$work/b.out" 2>&1 && ! grep -qv "^$id_b: " "$work/b.out" &&
    pass "logs $id_b: only its lines ($(wc -l <"$work/b.out"))" || fail "logs $id_b: $(head -3 "$work/b.out")"

# 2. the training series: every step 1..40 with a finite loss
"$sc" status job-1 --history --json >"$work/hist.json" 2>&1
jq -e '[.history[].step] == [range(1; 41)] and all(.history[]; (.loss | type) == "number" and .iteration_s > 0)' "$work/hist.json" >/dev/null &&
    pass "status --history --json: steps 1-40, each with a finite loss" ||
    fail "status --history --json: $(jq -c '.history[:3], (.history | length)' "$work/hist.json" 2>&1 | head -c 400)"
"$sc" status job-1 --history >"$work/hist.out" 2>&1
head -1 "$work/hist.out" | grep -q '^job-1 (succeeded): 40 steps recorded, 1 to 40$' &&
    [ "$(grep -cE '^ +[0-9]+ +[0-9.]+ +([0-9.]+|-) +[0-9.e-]+$' "$work/hist.out")" = 40 ] &&
    pass "status --history: a table of 40 rows" || fail "status --history: $(head -4 "$work/hist.out")"
http_get "http://127.0.0.1:$port/api/jobs/job-1/history" >"$work/api.json" 2>&1
jq -e --slurpfile cli "$work/hist.json" '.job_id == "job-1" and .history == $cli[0].history' "$work/api.json" >/dev/null &&
    pass "/api/jobs/job-1/history is the CLI's series" || fail "/api/jobs/job-1/history: $(head -c 300 "$work/api.json")"

# 3. a worker that does not answer is named, the other's lines are printed, no hang
kill -STOP "$pid_b"
"$sc" logs job-1 >"$work/part.out" 2>"$work/part.err"
rc=$?
kill -CONT "$pid_b"
[ $rc -eq 0 ] && grep -q "^no lines from $id_b (b): " "$work/part.err" && grep -q "^$id_a: " "$work/part.out" &&
    ! grep -q "^$id_b: " "$work/part.out" &&
    pass "a silent worker is named: $(cat "$work/part.err")" ||
    fail "silent worker: rc $rc: $(cat "$work/part.err") $(head -3 "$work/part.out")"

# 4. --follow prints lines logged after it started (a second job's)
"$sc" logs a --follow --lines 1 >"$work/follow.out" 2>"$work/follow.err" &
follow_pid=$!
pids+=("$follow_pid")
wait_for 20 grep -q "^$id_a: " "$work/follow.out" || fail "logs --follow printed nothing"
job second 5 >"$work/job2.json"
"$sc" submit "$work/job2.json" >/dev/null || fail "submit job-2"
wait_for 120 is_state job-2 succeeded || fail "job-2 did not succeed: $(job_state job-2)"
wait_for 30 grep -q "^$id_a: .*job-2" "$work/follow.out" &&
    pass "logs --follow printed job-2's lines as they came" || fail "logs --follow: $(tail -3 "$work/follow.out")"
kill -TERM "$follow_pid"
wait "$follow_pid" 2>/dev/null
n_seq=$(grep -c . "$work/follow.out")
[ "$(sort "$work/follow.out" | uniq -d | wc -l)" = 0 ] && pass "--follow printed $n_seq lines, none twice" ||
    fail "--follow repeated lines"

# 5. the series survives a restart of the coordinator
kill -TERM "$coord_pid"
wait "$coord_pid" 2>/dev/null
listen=$STAGECRAFT_COORDINATOR start_coordinator coord2 "$work/state" --dead-after 30 --http off
"$sc" status job-1 --history --json >"$work/hist2.json" 2>&1
jq -e --slurpfile before "$work/hist.json" '.history == $before[0].history' "$work/hist2.json" >/dev/null &&
    pass "after a restart, job-1's series is the same 40 steps" || fail "after restart: $(head -c 300 "$work/hist2.json")"
jq -e '[.history[].step] == [range(1; 6)]' <("$sc" status job-2 --history --json) >/dev/null &&
    pass "job-2 has its own series of 5 steps" || fail "job-2's series"

# 6. refusals
"$sc" logs job-99 >"$work/r1.out" 2>&1
[ $? -eq 2 ] && grep -q "no worker or job 'job-99'" "$work/r1.out" && pass "an unknown target is refused" ||
    fail "unknown target: $(cat "$work/r1.out")"
"$sc" logs a --lines 0 >"$work/r2.out" 2>&1
[ $? -eq 2 ] && grep -q -- "--lines '0'" "$work/r2.out" && pass "--lines 0 is bad usage" ||
    fail "--lines 0: $(cat "$work/r2.out")"
"$sc" status --history >"$work/r3.out" 2>&1
[ $? -eq 2 ] && grep -q -- "--history needs a JOB" "$work/r3.out" && pass "--history without a job is bad usage" ||
    fail "--history alone: $(cat "$work/r3.out")"
: "$pid_a"
finish
