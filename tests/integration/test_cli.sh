#!/usr/bin/env bash
# The `stagecraft` command's dispatch: --help on every subcommand, --version, and a one-line
# error plus usage (exit 2) for unknown subcommands and flags.
# Usage: test_cli.sh PATH/TO/stagecraft
set -u
sc=${1:?usage: test_cli.sh PATH/TO/stagecraft}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

out=$("$sc" --version) || fail "--version exited $?"
[[ $out == "stagecraft "* ]] || fail "--version printed '$out'"

"$sc" version --json | grep -q '"protocol": 1' || fail "version --json lacks the protocol"

"$sc" --help >/dev/null || fail "--help exited $?"
subcommands=$("$sc" --help | awk '/^subcommands:/{on=1; next} on && /^  [a-z]/{print $1}')
[ -n "$subcommands" ] || fail "--help lists no subcommands"
for c in $subcommands; do
    out=$("$sc" "$c" --help 2>&1); rc=$?
    [ $rc -eq 0 ] || fail "'$c --help' exited $rc"
    [[ $out == *"usage: stagecraft $c"* ]] || fail "'$c --help' shows no usage line: $out"
done

# output that cannot be written (a full disk) is an error, not a silent success
data=$(cd "$(dirname "$0")/../data/planner" && pwd)
if [ -w /dev/full ]; then
    for fmt in "" --json; do
        err=$("$sc" plan --model "$data/tiny.json" --gpus 2 --bandwidth 1e9 $fmt 2>&1 >/dev/full)
        rc=$?
        [ $rc -eq 2 ] && [[ $err == *"failed"* ]] ||
            fail "plan $fmt into a full disk: exit $rc: $err"
    done
fi

err=$("$sc" frobnicate 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "unknown subcommand exited $rc, want 2"
[[ $(echo "$err" | head -1) == "stagecraft: unknown subcommand 'frobnicate'" ]] ||
    fail "unknown subcommand message: $(echo "$err" | head -1)"
[[ $err == *"usage: stagecraft"* ]] || fail "unknown subcommand prints no usage"

err=$("$sc" --frobnicate 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "unknown top-level flag exited $rc, want 2"
[[ $err == *"unknown flag '--frobnicate'"* ]] || fail "unknown flag message: $err"

err=$("$sc" version --frobnicate 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "unknown subcommand flag exited $rc, want 2"
[[ $(echo "$err" | head -1) == "stagecraft version: unknown argument '--frobnicate'" ]] ||
    fail "unknown subcommand flag message: $(echo "$err" | head -1)"

# the client subcommands take only the flags their usage names: a token given to status is refused
err=$("$sc" status --token-file /dev/null 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] && [[ $(echo "$err" | head -1) == "stagecraft status: unknown flag '--token-file'" ]] ||
    fail "status --token-file: exit $rc: $(echo "$err" | head -1)"
err=$("$sc" workers --reason x 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "workers --reason exited $rc, want 2"

"$sc" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "no subcommand exited $rc, want 2"

err=$("$sc" --log-level loud version 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "bad --log-level exited $rc, want 2"

# a refused coordinator setting leaves its state folder untouched (no token, no database)
state=$(mktemp -d)
err=$("$sc" coordinator --state "$state" --listen 127.0.0.1:0 --suspect-after 5 --dead-after 3 \
    2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "coordinator with dead-after <= suspect-after exited $rc, want 2"
[[ $err == *"must be larger than suspect-after"* ]] || fail "dead-after message: $err"
[ -z "$(ls -A "$state")" ] || fail "a refused coordinator wrote into its state: $(ls -A "$state")"
rm -rf "$state"

# HOST:PORT values are checked before anything starts: a port is an integer in [1, 65535], or in
# [0, 65535] where the flag listens (0 picks a free one), and the host is not empty. Each refusal
# is exit 2 and one line naming the flag (or variable), the value and what is valid. A port that
# used to wrap (99999 ran on 34463) or reach gRPC raw (-1) must not start anything: `timeout`
# stops a daemon that wrongly runs.
state=$(mktemp -d)
check_addr() { # EXPECTED_TEXT COMMAND...
    local want=$1; shift
    local err rc
    err=$(STAGECRAFT_JOIN_TOKEN=t timeout 10 "$@" 2>&1 >/dev/null); rc=$?
    [ $rc -eq 2 ] || fail "'${*:2}' exited $rc, want 2: $err"
    [[ $err == *"$want"* ]] || fail "'${*:2}' message: $err"
    [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "'${*:2}': more than one line: $err"
}
check_addr "--listen '127.0.0.1:99999': the port '99999' is not an integer in [0, 65535]" \
    "$sc" coordinator --state "$state" --listen 127.0.0.1:99999
check_addr "--listen '127.0.0.1:-1': the port '-1' is not an integer in [0, 65535]" \
    "$sc" coordinator --state "$state" --listen 127.0.0.1:-1
check_addr "--listen ':7070': the host is empty" "$sc" coordinator --state "$state" --listen :7070
[ -z "$(ls -A "$state")" ] || fail "a refused --listen wrote into the state: $(ls -A "$state")"
check_addr "--listen '127.0.0.1:99999'" "$sc" worker --state "$state" --listen 127.0.0.1:99999
check_addr "--coordinator '127.0.0.1:99999': the port '99999' is not an integer in [1, 65535]" \
    "$sc" worker --state "$state" --coordinator 127.0.0.1:99999
check_addr "--coordinator '127.0.0.1:0'" "$sc" worker --state "$state" --coordinator 127.0.0.1:0
check_addr "--coordinator 'notahost:abc': the port 'abc'" \
    "$sc" worker --state "$state" --coordinator notahost:abc
check_addr "STAGECRAFT_COORDINATOR 'nohost'" env STAGECRAFT_COORDINATOR=nohost \
    "$sc" worker --state "$state"
check_addr "--coordinator '127.0.0.1:99999'" "$sc" workers --coordinator 127.0.0.1:99999
check_addr "--coordinator 'notahost:abc'" "$sc" status --coordinator notahost:abc
check_addr "STAGECRAFT_COORDINATOR '127.0.0.1:65536'" env STAGECRAFT_COORDINATOR=127.0.0.1:65536 \
    "$sc" workers
rm -rf "$state"

# the same worker started twice with the defaults (its name from the host and device, its state
# in the current folder): the second stops at once, exit 2, naming the name and the folder. No
# coordinator is needed: the first keeps retrying its registration, holding the name.
wdir=$(mktemp -d)
(cd "$wdir" && STAGECRAFT_JOIN_TOKEN=t STAGECRAFT_COORDINATOR=127.0.0.1:1 exec "$sc" \
    --log-level info worker >"$wdir/first.log" 2>&1) &
first=$!
for _ in $(seq 100); do grep -q "serving on" "$wdir/first.log" && break; sleep 0.1; done
err=$(cd "$wdir" && STAGECRAFT_JOIN_TOKEN=t STAGECRAFT_COORDINATOR=127.0.0.1:1 timeout 10 "$sc" \
    worker 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "a second default worker exited $rc, want 2: $err"
[[ $err == "stagecraft worker: worker '"*"-cpu' in state folder .: another worker process holds"* ]] ||
    fail "second default worker message: $err"
kill -0 $first 2>/dev/null || fail "the first default worker stopped: $(cat "$wdir/first.log")"
kill -TERM $first 2>/dev/null
wait $first 2>/dev/null
rm -rf "$wdir"

# a CPU worker on a server with GPUs (hwloc reads the topology of a three-GPU server instead of
# this machine's): it runs on the host's processors (it refused to start, finding no CPU device)
wdir=$(mktemp -d)
HWLOC_XMLFILE="$data/../topology/gpu_server.xml" STAGECRAFT_JOIN_TOKEN=t \
    STAGECRAFT_COORDINATOR=127.0.0.1:1 "$sc" --log-level info worker --device cpu --name gpu-host \
    --state "$wdir" >"$wdir/gpu-host.log" 2>&1 &
gpuhost=$!
for _ in $(seq 100); do
    grep -q "serving on" "$wdir/gpu-host.log" || ! kill -0 $gpuhost 2>/dev/null && break
    sleep 0.1
done
grep -q "worker 'gpu-host' (cpu, " "$wdir/gpu-host.log" ||
    fail "a CPU worker on a GPU server did not start: $(cat "$wdir/gpu-host.log")"
kill -TERM $gpuhost 2>/dev/null
wait $gpuhost 2>/dev/null
rm -rf "$wdir"

if [ $failures -ne 0 ]; then
    echo "test_cli: $failures failure(s)"
    exit 1
fi
echo "test_cli: all checks passed"
