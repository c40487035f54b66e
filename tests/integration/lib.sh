# Shared helpers of the integration tests: a scratch folder, process cleanup, polling, checks.
# Source it after setting `sc` to the stagecraft binary.
# shellcheck shell=bash disable=SC2154 # sc is set by the script that sources this file
set -u
work=$(mktemp -d /tmp/sc-itest.XXXXXX)
pids=()
failures=0

cleanup() {
    for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done
    sleep 0.3
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    if [ "$failures" -ne 0 ]; then
        for f in "$work"/*.log; do echo "---- $f"; tail -n 30 "$f"; done
    fi
    rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# wait_for SECONDS COMMAND...: polls every 0.1 s until COMMAND succeeds; false on time-out.
wait_for() {
    local deadline=$((SECONDS + $1)); shift
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -ge "$deadline" ] && return 1
        sleep 0.1
    done
}

# start_coordinator NAME STATE_DIR [FLAGS...]: starts a coordinator on $listen (default a free
# port); sets coord_pid and exports STAGECRAFT_COORDINATOR and the tokens.
start_coordinator() {
    local name=$1 state=$2; shift 2
    "$sc" coordinator --listen "${listen:-127.0.0.1:0}" --state "$state" "$@" >"$work/$name.log" 2>&1 &
    coord_pid=$!
    pids+=("$coord_pid")
    wait_for 10 grep -q "listening on port" "$work/$name.log" || { fail "$name did not start"; exit 1; }
    local port
    port=$(sed -n 's/^coordinator listening on port \([0-9]*\).*/\1/p' "$work/$name.log")
    export STAGECRAFT_COORDINATOR=127.0.0.1:$port
    STAGECRAFT_JOIN_TOKEN=$(cat "$state/join.token")
    STAGECRAFT_TOKEN=$(cat "$state/client.token")
    export STAGECRAFT_JOIN_TOKEN STAGECRAFT_TOKEN
}

# start_worker NAME [FLAGS...]: sets worker_pid.
start_worker() {
    local name=$1; shift
    "$sc" worker --name "$name" --state "$work/wstate" "$@" >>"$work/$name.log" 2>&1 &
    worker_pid=$!
    pids+=("$worker_pid")
}

# worker_state NAME: alive, suspect or dead as `stagecraft workers --json` says.
worker_state() {
    "$sc" workers --json | tr -d ' \n' | grep -o "\"name\":\"$1\",\"host\":\"[^\"]*\",\"state\":\"[a-z]*\"" |
        sed 's/.*"state":"\([a-z]*\)"/\1/'
}

# worker_epoch NAME: the epoch of the worker's current registration, from `stagecraft workers --json`.
worker_epoch() {
    "$sc" workers --json | tr -d ' \n' | sed 's/{"id"/\n{"id"/g' | grep "\"name\":\"$1\"" |
        sed -n 's/.*"epoch":\([0-9]*\).*/\1/p'
}

job_state() {
    "$sc" status "$1" --json | sed -n 's/^  "state": "\([a-z]*\)",*/\1/p'
}

is_state() { [ "$(job_state "$1")" = "$2" ]; }
# field JOB KEY: a top-level value of `status JOB --json`, unquoted
field() { "$sc" status "$1" --json | sed -n "s/^  \"$2\": //p" | sed 's/,$//; s/^"//; s/"$//'; }
worker_is() { [ "$(worker_state "$1")" = "$2" ]; }
# alive_is N: exactly N registered workers are alive.
alive_is() { [ "$("$sc" workers --json | grep -c '"state": "alive"')" -eq "$1" ]; }
# wait_alive SECONDS N: waits until N workers are alive.
wait_alive() { wait_for "$1" alive_is "$2"; }

# running PID: PID exists and has not exited (a zombie has: only its parent's wait is due).
running() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ] && [ "${stat%% *}" != X ]
}

# freeze_when_known SECONDS JOB STEP PID...: stops (SIGSTOP) the PIDs as soon as the coordinator
# knows a checkpoint of STEP or later for JOB (its last_checkpoint_step, from the workers'
# reports, which go out at most every 50 ms while a small job steps hundreds of times a second:
# polled without an interval, so that the job cannot end between two polls); false if it does
# not within SECONDS (the PIDs are stopped anyway). The job then resumes from that step or a
# later one.
freeze_when_known() {
    local deadline=$((SECONDS + $1)) id=$2 step=$3
    shift 3
    knows() { [ "$(field "$id" last_checkpoint_step)" -ge "$step" ] 2>/dev/null; }
    until knows || [ $SECONDS -ge $deadline ]; do :; done
    kill -STOP "$@"
    knows
}

# need_lab TOOL...: skips the test (exit 77) where the uneven lab (deploy/lab) cannot be built:
# not root, a tool missing (iproute2 and jq always, plus TOOLs), no network namespaces or no
# cgroup hierarchy. Sets `lab` to the lab script.
# need_fast_build: skips (77) in a sanitizer or unoptimised build (STAGECRAFT_SLOW_BUILD), whose
# steps run too slowly for a test's timing deadlines, unless STAGECRAFT_TIMING_TESTS=1 asks.
need_fast_build() {
    if [ "${STAGECRAFT_SLOW_BUILD:-0}" = 1 ] && [ "${STAGECRAFT_TIMING_TESTS:-0}" != 1 ]; then
        echo "SKIP: a slow build; set STAGECRAFT_TIMING_TESTS=1 to run it"
        exit 77
    fi
}

need_lab() {
    skip() { echo "SKIP: $*"; exit 77; }
    [ "$(id -u)" -eq 0 ] || skip "needs root"
    local t probe=scl-probe$$
    for t in ip tc jq unshare "$@"; do command -v "$t" >/dev/null 2>&1 || skip "needs $t"; done
    ip netns add "$probe" 2>/dev/null || skip "cannot make network namespaces"
    ip netns del "$probe"
    grep -qE '^[^ ]+ [^ ]+ cgroup2? ' /proc/mounts || skip "no cgroup hierarchy mounted"
    # shellcheck disable=SC2034 # for the test that sources this file
    lab=$(cd "$(dirname "$0")/../../deploy/lab" && pwd)/lab
}

finish() {
    if [ "$failures" -ne 0 ]; then
        echo "$(basename "$0"): $failures failure(s)"
        exit 1
    fi
    echo "$(basename "$0"): all checks passed"
}
