#!/usr/bin/env bash
# Training data the workers cannot use: each such job fails at once with the reason naming the
# file and what was wrong (not retried for good), when profiling starts (a path missing on the
# workers' server is found before anything is measured), and the workers survive it: a FIFO as the data
# file used to block a worker's handler thread in open() for good; a token shard of another
# version and a file over the size limit were re-planned every few seconds forever. Afterwards
# a good job trains on the same workers.
# Usage: test_bad_data.sh PATH/TO/stagecraft
sc=${1:?usage: test_bad_data.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

state=$work/state
start_coordinator coord "$state" --heartbeat-ms 200
start_worker a
start_worker b
wait_alive 20 2 ||
    fail "workers did not register"

n=0
# run_job KIND PATH STEPS: submits a small GPT job on that data; sets job to its id
run_job() {
    n=$((n + 1))
    cat >"$work/job$n.json" <<JSON
{"format": "stagecraft-job", "version": 1, "name": "data-$n",
 "model": {"kind": "gpt", "vocab": 256, "seq_len": 16, "layers": 2, "width": 32, "heads": 2},
 "data": {"kind": "$1", "path": "$2"},
 "batch_size": 8, "microbatches": 4, "schedule": "1f1b", "strategy": "uniform",
 "workers": 2, "steps": $3}
JSON
    job=$("$sc" submit "$work/job$n.json" --json | sed -n 's/.*"job_id": "\([^"]*\)".*/\1/p')
    [ -n "$job" ] || fail "submit of job $n ($1 $2) was refused"
}
reason() { "$sc" status "$1" | sed -n 's/^state: *//p'; }
# expect_failed WHAT PATTERN: the job fails within 30 s and its reason matches PATTERN (a glob)
expect_failed() {
    # shellcheck disable=SC2053 # $2 is a glob
    if wait_for 30 is_state "$job" failed && [[ $(reason "$job") == $2 ]]; then
        pass "$1: $(reason "$job" | cut -c1-160)"
    else
        fail "$1: $job is $(reason "$job")"
    fi
}

# a path missing on the workers' server: refused when profiling starts, before any measuring
# or planning, naming the worker and the path
run_job text "$work/missing.txt" 3
expect_failed "a data path missing on the workers" \
    "failed: worker w-* ('*') did not profile: *the job's data is not usable on this worker's server: $work/missing.txt: cannot open*"
hist=$("$sc" status "$job" --json | jq -r '[.transitions[].to] | join(" ")')
[ "$hist" = "submitted profiling failed" ] && pass "it failed from profiling, not planned first" ||
    fail "the missing path's job went: $hist"

mkfifo "$work/fifo"
run_job text "$work/fifo" 3
expect_failed "a FIFO as the data file" "failed:*$work/fifo: not a regular file*expected a data file"

# an llm.c shard header of version 2: magic 20240520 (0x0134d888), version 2, 100 tokens (int32
# little-endian), the rest of the 256 ints, then the tokens
printf '\210\330\064\001\002\000\000\000\144\000\000\000' >"$work/v2.bin"
head -c $((1024 - 12 + 200)) /dev/zero >>"$work/v2.bin"
run_job tokens "$work/v2.bin" 3
expect_failed "a token shard of version 2" "failed:*$work/v2.bin: token shard version 2; supported: 1*"

truncate -s 5G "$work/huge.txt" # sparse: no disk used
run_job text "$work/huge.txt" 3
expect_failed "a data file over the 4 GiB limit" "failed:*$work/huge.txt: 5368709120 bytes, over the limit*"

for i in $(seq 1 100); do echo "line $i of some text to train on"; done >"$work/text.txt"
run_job text "$work/text.txt" 3
wait_for 60 is_state "$job" succeeded && pass "then a good job trains on the same workers" ||
    fail "the good job is $(reason "$job")"
for p in "${pids[@]}"; do running "$p" || fail "process $p died"; done
finish
