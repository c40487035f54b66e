# shellcheck shell=bash disable=SC2154 # sc is set by the benchmark that sources this file
# A coordinator and CPU workers on this host, for the benchmarks that train on them: sourced by
# bench_freeze.sh, bench_allreduce.sh and bench_ckpt_copies.sh, which set sc (the binary) and
# call local_scratch first. A variable set before a call (STAGECRAFT_LOG=debug local_workers ...)
# reaches the processes it starts.

# local_scratch NAME: a scratch folder `work` (/tmp/stagecraft-bench-NAME.*) and the list `pids`
# of the processes started, all stopped and the folder removed when the benchmark exits.
local_scratch() {
    work=$(mktemp -d "/tmp/stagecraft-bench-$1.XXXXXX")
    pids=()
    trap local_cleanup EXIT
}

local_cleanup() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}

# local_coordinator STATE_DIR: starts it on a free loopback port (log $work/coord.log) and exports
# STAGECRAFT_COORDINATOR and its tokens; exits 1 when it does not start within 30 s.
local_coordinator() {
    "$sc" coordinator --listen 127.0.0.1:0 --state "$1" >"$work/coord.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 300); do grep -q "listening on port" "$work/coord.log" && break; sleep 0.1; done
    local port
    port=$(sed -n 's/^coordinator listening on port \([0-9]*\).*/\1/p' "$work/coord.log")
    [ -n "$port" ] || { echo "the coordinator did not start: $(tail -n 3 "$work/coord.log")" >&2; exit 1; }
    export STAGECRAFT_COORDINATOR=127.0.0.1:$port
    STAGECRAFT_JOIN_TOKEN=$(cat "$1/join.token")
    STAGECRAFT_TOKEN=$(cat "$1/client.token")
    export STAGECRAFT_JOIN_TOKEN STAGECRAFT_TOKEN
}

# local_workers "NAME..." [FLAGS...]: a worker per name (log $work/NAME.log, state $work/wNAME)
# with FLAGS; waits (at most 20 s) until that many are alive.
local_workers() {
    local names=$1 w n=0
    shift
    for w in $names; do
        "$sc" worker --name "$w" --state "$work/w$w" "$@" >"$work/$w.log" 2>&1 &
        pids+=($!)
        n=$((n + 1))
    done
    for _ in $(seq 1 200); do
        [ "$("$sc" workers --json | grep -c '"state": "alive"')" -ge "$n" ] && break
        sleep 0.1
    done
}
