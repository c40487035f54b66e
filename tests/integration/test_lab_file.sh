#!/usr/bin/env bash
# The lab file's checks (deploy/lab/lab), which run before anything is made and need neither
# root nor a namespace: a key the stagecraft-lab format does not define, at any level, is refused
# (exit 2) naming the key, its JSON path, line and column, the closest valid key and the valid
# ones; a valid file passes the checks (and stops later, at what this machine lacks).
# Needs jq: skipped (exit 77) without it.
# Usage: test_lab_file.sh PATH/TO/stagecraft
sc=${1:?usage: test_lab_file.sh PATH/TO/stagecraft}
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null 2>&1 || { echo "SKIP: needs jq"; exit 77; }
lab=$(cd "$(dirname "$0")/../../deploy/lab" && pwd)/lab
# a run folder of this test's own: nothing it does touches a lab a user has up
export STAGECRAFT_LAB_RUN=$work/run

cat >"$work/lab.json" <<'JSON'
{"format": "stagecraft-lab", "version": 1, "name": "typo",
 "coordinator": {"rate": "10gbit", "flags": []},
 "servers": [{"name": "a", "rate": "1gbit"},
             {"name": "b", "rate": "100mbit", "delay": "1ms"}],
 "workers": [{"name": "a0", "server": "a", "cpu": 0.5},
             {"name": "b0", "server": "b", "cpu": 0.25, "cores": "0"}]}
JSON

# refused WHAT FILE EXPECTED...: `lab up FILE` exits 2 and says each EXPECTED text
refused() {
    local what=$1 file=$2 out rc t ok=1
    shift 2
    out=$(bash "$lab" up "$file" --bin "$sc" 2>&1)
    rc=$?
    for t in "$@"; do grep -qF -- "$t" <<<"$out" || ok=0; done
    [ $rc -eq 2 ] && [ $ok = 1 ] && pass "$what refused: $out" || fail "$what: rc $rc, '$out'"
}
# edited JQ-EDIT: the lab file edited by jq, one key a line, as a user would write it
edited() {
    local out
    out=$(mktemp "$work/bad-XXXXXX.json")
    jq "$1" "$work/lab.json" >"$out"
    echo "$out"
}

f=$(edited '.subnte = "198.19.7.0/24"')
refused "a misspelt top-level key" "$f" "$f:$(grep -n '"subnte"' "$f" | cut -d: -f1):3: \$.subnte: unknown key 'subnte'" \
    "did you mean 'subnet'?" "valid keys here: format, version, name, subnet, coordinator, servers, workers"
f=$(edited '.coordinator.flag = ["--x"]')
refused "a misspelt coordinator key" "$f" "\$.coordinator.flag: unknown key 'flag'" "did you mean 'flags'?"
f=$(edited '.servers[1].rat = "1gbit"')
refused "a misspelt server key" "$f" "\$.servers[1].rat: unknown key 'rat'" "did you mean 'rate'?" \
    "valid keys here: name, rate, delay, loss"
f=$(edited '.workers[0].cpus = 0.3')
refused "a misspelt worker key" "$f" ":$(grep -n '"cpus"' "$f" | cut -d: -f1):7: \$.workers[0].cpus: unknown key 'cpus'" \
    "did you mean 'cpu'?" "valid keys here: name, server, cpu, cores, device"
f=$(edited '.workers[1].memory = "8G"')
refused "an unknown worker key far from any" "$f" "\$.workers[1].memory: unknown key 'memory'" \
    "valid keys here: name, server, cpu, cores, device"
grep -q "did you mean" <<<"$(bash "$lab" up "$f" 2>&1)" && fail "'memory' got a suggestion" ||
    pass "no suggestion for a key close to none"
f=$(edited '.workers[1] = 3')
refused "a worker that is not an object" "$f" "workers[1]: must be an object"

# the valid file passes every check: what stops it is what this machine lacks (root, a binary),
# never the file
out=$(PATH=/usr/bin:/bin bash "$lab" up "$work/lab.json" --bin "$work/no-such-binary" 2>&1)
grep -q "unknown key\|must be" <<<"$out" && fail "the valid lab file was refused: $out" ||
    pass "the valid lab file passes the checks ($out)"
[ -e "$STAGECRAFT_LAB_RUN/typo" ] && fail "a refused or stopped lab left its run folder" ||
    pass "nothing was made"
finish
