#!/usr/bin/env bash
# The systemd units in deploy/systemd/ pass `systemd-analyze verify` with nothing to say: the
# coordinator's, the worker template's for a GPU (cuda:0) and a CPU instance, and the NUMA
# worker template's for node 0 (which passes its instance as --numa-node). The units
# name /usr/local/bin/stagecraft; verify checks that the command exists, so it runs on copies
# that name the binary under test instead. Skipped (77) where systemd-analyze is missing.
# Usage: test_systemd_units.sh PATH/TO/stagecraft
sc=${1:?usage: test_systemd_units.sh PATH/TO/stagecraft}
sc=$(cd "$(dirname "$sc")" && pwd)/$(basename "$sc")
. "$(dirname "$0")/lib.sh"
units=$(cd "$(dirname "$0")/../../deploy/systemd" && pwd)

if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "skip: systemd-analyze is not installed (Debian: apt-get install systemd)"
    exit 77
fi
for f in "$units"/*.service; do
    sed "s|/usr/local/bin/stagecraft|$sc|g" "$f" >"$work/$(basename "$f")"
done
grep -q "^ExecStart=$sc coordinator " "$work/stagecraft-coordinator.service" ||
    fail "the coordinator unit does not start /usr/local/bin/stagecraft coordinator"

# An instance named cuda:0 is written cuda\x3a0 in a file name (systemd-escape); %I unescapes it.
grep -q "^ExecStart=$sc worker --device cpu --numa-node %i " "$work/stagecraft-numa-worker@.service" ||
    fail "the NUMA worker unit does not pass its instance as --numa-node"
for u in stagecraft-coordinator.service 'stagecraft-worker@cuda\x3a0.service' stagecraft-worker@cpu.service \
    stagecraft-numa-worker@0.service; do
    out=$(cd "$work" && timeout 60 systemd-analyze verify "$work/$u" 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && [ -z "$out" ]; then
        pass "systemd-analyze verify $u: clean"
    else
        fail "systemd-analyze verify $u: exit $rc: $out"
    fi
done

# a mistake is seen: verify is not silent about everything
sed 's/^Restart=on-failure/Restart=sometimes/' "$work/stagecraft-coordinator.service" >"$work/bad.service"
out=$(cd "$work" && timeout 60 systemd-analyze verify "$work/bad.service" 2>&1)
echo "$out" | grep -qi "restart" && pass "a bad Restart= value is reported: $out" ||
    fail "a bad Restart= value went unreported: $out"

finish
