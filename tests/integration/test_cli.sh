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

if [ $failures -ne 0 ]; then
    echo "test_cli: $failures failure(s)"
    exit 1
fi
echo "test_cli: all checks passed"
