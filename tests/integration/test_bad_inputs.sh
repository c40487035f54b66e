#!/usr/bin/env bash
# Inputs a careless user gives the client subcommands: each is refused at once with one line
# naming what was wrong and what would do, and exit status 2, before anything is started.
# Usage: test_bad_inputs.sh PATH/TO/stagecraft
sc=${1:?usage: test_bad_inputs.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

# expect_usage WHAT PATTERN COMMAND...: COMMAND exits 2 within 20 s, its first stderr line
# matches PATTERN (a glob)
expect_usage() {
    local what=$1 pattern=$2; shift 2
    local err rc
    err=$(timeout 20 "$@" 2>&1 >/dev/null); rc=$?
    # shellcheck disable=SC2053 # $pattern is a glob
    if [ $rc -eq 2 ] && [[ $(echo "$err" | head -1) == $pattern ]]; then
        pass "$what"
    else
        fail "$what: exit $rc: $(echo "$err" | head -1)"
    fi
}

# demo --data: what the workers could not train on is refused before the cluster starts
: >"$work/empty.txt"
printf 'too short for one sample' >"$work/short.txt"
mkfifo "$work/fifo"
expect_usage "demo --data of an empty file" "*--data $work/empty.txt: 0 bytes, fewer than*65*" \
    "$sc" demo --data "$work/empty.txt"
expect_usage "demo --data shorter than one sample" "*--data $work/short.txt: 24 bytes*at least 65*" \
    "$sc" demo --data "$work/short.txt"
expect_usage "demo --data of a folder" "*--data $work: not a regular file*" "$sc" demo --data "$work"
expect_usage "demo --data of a FIFO" "*--data $work/fifo: not a regular file*" \
    "$sc" demo --data "$work/fifo"
expect_usage "demo --data of a missing file" "*--data $work/none: No such file*" \
    "$sc" demo --data "$work/none"
expect_usage "demo --cpu-kernels of an unknown kind" "*--cpu-kernels 'fastest': expected fast or reference*" \
    "$sc" demo --cpu-kernels fastest
expect_usage "demo --finetune of a folder without config.json" \
    "*--finetune $work: not a Hugging Face checkpoint folder*" "$sc" demo --finetune "$work"

# worker --name over the limit of 127 characters is refused, not cut to 127 (a job listing the
# long name would wait for good); 127 characters serve. No coordinator: the first check happens
# before registration, the second only needs the worker to start serving.
export STAGECRAFT_JOIN_TOKEN=t
n127=$(printf 'w%.0s' $(seq 127))
expect_usage "worker --name of 128 characters" \
    "*--name '${n127:0:40}...' (128 characters): use 1 to 127 letters, digits, '-', '_' or '.'*" \
    "$sc" worker --coordinator 127.0.0.1:1 --name "${n127}x" --state "$work/ws"
expect_usage "worker --name with a space" "*--name 'a b' (3 characters): use 1 to 127 letters*" \
    "$sc" worker --coordinator 127.0.0.1:1 --name "a b" --state "$work/ws"
"$sc" worker --coordinator 127.0.0.1:1 --name "$n127" --state "$work/ws" >"$work/w127.log" 2>&1 &
pids+=($!)
wait_for 20 grep -q "worker '$n127' (cpu" "$work/w127.log" &&
    pass "worker --name of exactly 127 characters serves under its whole name" ||
    fail "worker --name of 127 characters: $(head -1 "$work/w127.log")"
finish
