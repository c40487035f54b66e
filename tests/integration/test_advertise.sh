#!/usr/bin/env bash
# The address a coordinator tells workers for its control channel. Listening on every interface
# without --advertise, it picks one of this host's non-loopback addresses by itself and says
# which (a worker then registers and stays alive through it); --advertise is taken as given;
# on a host whose only interface is loopback (a network namespace of its own, as root) it
# refuses to start, naming --advertise, and leaves no state behind.
# Usage: test_advertise.sh PATH/TO/stagecraft
sc=${1:?usage: test_advertise.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"

# this host's non-loopback IPv4 addresses, one a line
own_addrs() { ip -4 -o addr show 2>/dev/null | awk '{split($4, a, "/"); print a[1]}' | grep -v '^127\.'; }
control_host() { sed -n 's|^coordinator listening on port [0-9]*, control tcp://\(.*\):[0-9]*$|\1|p' "$work/$1.log"; }

# 1. picked by itself
if [ -n "$(own_addrs)" ]; then
    listen=0.0.0.0:0 start_coordinator auto "$work/auto"
    host=$(control_host auto)
    if own_addrs | grep -qxF "$host"; then
        pass "listening on 0.0.0.0 without --advertise, workers are told $host, an address of this host"
    else
        fail "advertised '$host'; this host's non-loopback addresses: $(own_addrs | tr '\n' ' ')"
    fi
    grep -q "without --advertise: workers are told $host (interface [^ ]*, the first non-loopback one)" "$work/auto.log" &&
        pass "the coordinator logs which address it picked and why" ||
        fail "no log line saying which address: $(head -n 3 "$work/auto.log")"
    start_worker w
    wait_alive 30 1 || fail "worker w did not register: $(worker_state w)"
    # heartbeats come over the control channel only: a newer one proves it reachable
    hb() { "$sc" workers --json | jq -r '.. | objects | select(.name? == "w") | .last_heartbeat_unix_ms'; }
    first=$(hb)
    newer() { [ "$(hb)" -gt "$first" ] 2>/dev/null; }
    wait_for 30 newer && worker_is w alive &&
        pass "a worker registers and heartbeats through the picked control address" ||
        fail "worker w is $(worker_state w), last heartbeat $(hb) (at registration $first)"
    grep -q "control tcp://$host:" "$work/w.log" || fail "the worker was not told $host: $(grep control "$work/w.log")"
    kill -TERM "$worker_pid" "$coord_pid"
    wait "$worker_pid" "$coord_pid" 2>/dev/null
else
    echo "skip: this host has no non-loopback IPv4 address (part 1)"
fi

# 2. given (the tokens of part 1 would be taken from the environment)
unset STAGECRAFT_JOIN_TOKEN STAGECRAFT_TOKEN
listen=0.0.0.0:0 start_coordinator given "$work/given" --advertise coord.example
[ "$(control_host given)" = coord.example ] && pass "--advertise coord.example is taken as given" ||
    fail "advertised '$(control_host given)' with --advertise coord.example"
kill -TERM "$coord_pid"
wait "$coord_pid" 2>/dev/null

# 3. nothing to advertise: loopback only
if [ "$(id -u)" -eq 0 ] && unshare -n true 2>/dev/null; then
    # the host name may resolve to this host's real address, which the namespace lacks:
    # resolve it to loopback only (a UTS namespace with a name of its own, no DNS for it)
    out=$(unshare -n -u sh -c 'hostname sc-no-such-host.invalid && exec timeout 20 "$0" coordinator --state "$1" --listen 0.0.0.0:0' \
        "$sc" "$work/lo" 2>&1)
    rc=$?
    if [ $rc -eq 2 ] && echo "$out" | grep -q "no address that other hosts can reach.*give --advertise HOST"; then
        pass "loopback only: refused, naming --advertise: $out"
    else
        fail "loopback only: exit $rc: $out"
    fi
    [ ! -e "$work/lo/join.token" ] && pass "the refused coordinator wrote no token" ||
        fail "the refused coordinator wrote $work/lo/join.token"
else
    echo "skip: loopback-only namespace needs root and unshare (part 3)"
fi

finish
