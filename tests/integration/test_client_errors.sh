#!/usr/bin/env bash
# What the client commands say when something is off: a coordinator address where something
# accepts connections but never answers gRPC (the address, how long was waited, the likely
# causes), cancelling a job twice (idempotent: exit 0, "already cancelled"), and which calls
# need the client token (rebalance --dry-run does not, rebalance does).
# Usage: test_client_errors.sh PATH/TO/stagecraft
sc=${1:?usage: test_client_errors.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

# A listener that accepts TCP connections and never says a word (a wrong port, another program).
python3 - "$work/silent.port" <<'PY' &
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
held = []
while True:
    c, _ = s.accept()
    held.append(c)
PY
pids+=("$!")
wait_for 10 test -s "$work/silent.port" || { fail "the silent listener did not start"; exit 1; }
silent=127.0.0.1:$(cat "$work/silent.port")
err=$("$sc" status --coordinator "$silent" 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] || fail "status against a silent listener exited $rc, want 1"
for want in "$silent" "after waiting 10.0 s" "no gRPC connection was made" "wrong port" \
    "TLS on one side and plaintext on the other"; do
    [[ $err == *"$want"* ]] || fail "silent listener: the message lacks '$want': $err"
done
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "silent listener: not one line: $err"

start_coordinator coord "$work/state"
# a job that waits for ever: it names a worker that never registers
cat >"$work/job.json" <<'JSON'
{"format": "stagecraft-job", "version": 1, "name": "waits",
 "model": {"kind": "mlp", "sizes": [32, 64, 10]},
 "data": {"kind": "synthetic"}, "batch_size": 8, "microbatches": 2,
 "workers": ["nobody"], "steps": 5}
JSON
"$sc" submit "$work/job.json" >/dev/null || fail "submit"
# a job that has not trained has no loss and no rate: null, not 0; "-" in the text
st=$("$sc" status job-1 --json)
[ "$(jq -c '[.loss, .samples_per_s]' <<<"$st")" = "[null,null]" ] ||
    fail "an untrained job's figures: $(jq -c '[.loss, .samples_per_s]' <<<"$st")"

# rebalance --dry-run needs no token; the job is not running, so it is refused for that
out=$(env -u STAGECRAFT_TOKEN "$sc" rebalance job-1 --dry-run 2>&1); rc=$?
[[ $out != *"client token"* ]] || fail "rebalance --dry-run asked for the token: $out"
[[ $out == *"submitted"* || $out == *"not running"* ]] ||
    fail "rebalance --dry-run of a waiting job: $out"
# a real rebalance does need it
out=$(env -u STAGECRAFT_TOKEN "$sc" rebalance job-1 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $out == *"PERMISSION_DENIED"*"client token"* ]] ||
    fail "rebalance without a token: exit $rc: $out"

out=$("$sc" cancel job-1 --reason "first" 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$out" = "job-1 is cancelled" ] || fail "cancel: exit $rc: $out"
out=$("$sc" cancel job-1 --reason "second" 2>&1); rc=$?
[ $rc -eq 0 ] && [[ $out == "job-1 is already cancelled ("*"first)" ]] ||
    fail "cancel twice: exit $rc: $out"
"$sc" cancel job-1 --json | grep -q '"already_cancelled": true' ||
    fail "cancel --json of a cancelled job lacks already_cancelled"
# the second cancel recorded nothing: one transition into cancelled
n=$("$sc" status job-1 --json | grep -c '"to": "cancelled"')
[ "$n" -eq 1 ] || fail "$n transitions into cancelled, want 1"

[ "$failures" -eq 0 ] && echo "all client error checks passed"
exit $((failures > 0))
