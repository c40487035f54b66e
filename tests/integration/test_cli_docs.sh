#!/usr/bin/env bash
# `stagecraft SUBCOMMAND --help` and docs/reference/cli.md agree: every subcommand of the help's
# list has a row in cli.md's table and a section, and the flags each one's help names (in its
# usage lines and at the start of its flag lines) are the flags its section names (in its
# usage block and in the first column of its table), both ways. And the token shard writer
# that formats.md and the guide print writes a shard `stagecraft eval` reads.
# Usage: test_cli_docs.sh PATH/TO/stagecraft
set -u
sc=${1:?usage: test_cli_docs.sh PATH/TO/stagecraft}
doc="$(dirname "$0")/../../docs/reference/cli.md"
help_dir=$(mktemp -d)
trap 'rm -rf "$help_dir"' EXIT
subcommands=$("$sc" --help | awk '/^subcommands:/{on=1; next} on && /^  [a-z]/{print $1}')
[ -n "$subcommands" ] || { echo "FAIL: --help lists no subcommands"; exit 1; }
for c in $subcommands; do
    "$sc" "$c" --help >"$help_dir/$c" 2>&1 || { echo "FAIL: $c --help exited $?"; exit 1; }
done
python3 - "$doc" "$help_dir" $subcommands <<'PY'
import os, re, sys

doc_path, help_dir, names = sys.argv[1], sys.argv[2], sys.argv[3:]
doc = open(doc_path).read()
FLAG = re.compile(r"--[a-z][a-z0-9-]*")
failures = []

def help_flags(text):
    """Flags in the usage lines (up to the first blank line) and at the head of flag lines."""
    flags, lines = set(), text.splitlines()
    i = 0
    while i < len(lines) and lines[i].strip():
        flags |= set(FLAG.findall(lines[i]))
        i += 1
    for line in lines[i:]:
        m = re.match(r"^\s+(--\S.*?)(\s{2,}|$)", line)
        if m:
            flags |= set(FLAG.findall(m.group(1)))
    return flags - {"--help"}

def synopsis(text):
    """The usage lines: up to the first blank line."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            break
        out.append(line)
    return "\n".join(out)

def flag_lines(text):
    """Flags at the head of the help's flag lines (after the usage)."""
    flags, rest = set(), text.split("\n\n", 1)
    for line in (rest[1] if len(rest) > 1 else "").splitlines():
        m = re.match(r"^\s+(--\S.*?)(\s{2,}|$)", line)
        if m:
            flags |= set(FLAG.findall(m.group(1)))
    return flags

VALUES = re.compile(r"(--[a-z][a-z0-9-]*)[ =]([A-Za-z0-9:.,_]+(?:\|[A-Za-z0-9:.,_]+)+)")

def doc_flags(section):
    """Flags in the section's first code block and in its tables' first column."""
    flags = set()
    block = re.search(r"```\n(.*?)```", section, re.S)
    if block:
        flags |= set(FLAG.findall(block.group(1)))
    for line in section.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            first = line.split("|")[1]
            if first.strip() in ("flag", "variable"):
                continue
            flags |= set(FLAG.findall(first))
    return flags - {"--help"}

table = set(re.findall(r"^\| \[`([a-z]+)`\]\(#stagecraft-", doc, re.M))
for name in names:
    if name not in table:
        failures.append(f"cli.md's subcommand table lacks `{name}`")
    m = re.search(r"^## `stagecraft " + name + r"`\n(.*?)(?=^## |\Z)", doc, re.S | re.M)
    if not m:
        failures.append(f"cli.md has no section for `{name}`")
        continue
    text = open(os.path.join(help_dir, name)).read()
    h = help_flags(text)
    d = doc_flags(m.group(1))
    # the usage lines name every flag the help describes
    for f in sorted(flag_lines(text) - set(FLAG.findall(synopsis(text))) - {"--help"}):
        failures.append(f"{name}: --help describes {f} but its usage lines omit it")
    # a flag's listed values (--schedule a|b|c) are the same in both usage blocks
    block = re.search(r"```\n(.*?)```", m.group(1), re.S)
    hv = dict(VALUES.findall(synopsis(text)))
    dv = dict(VALUES.findall(block.group(1) if block else ""))
    for f in sorted(set(hv) & set(dv)):
        if hv[f] != dv[f]:
            failures.append(f"{name}: {f} takes {hv[f]} in --help, {dv[f]} in cli.md")
    for f in sorted(h - d):
        failures.append(f"{name}: --help names {f}, cli.md's section does not")
    for f in sorted(d - h):
        failures.append(f"{name}: cli.md's section names {f}, --help does not")
for name in sorted(table - set(names)):
    failures.append(f"cli.md's table lists `{name}`, which `stagecraft --help` does not")
for f in failures:
    print("FAIL:", f)
if not failures:
    print(f"ok: {len(names)} subcommands: --help and cli.md name the same flags")
sys.exit(1 if failures else 0)
PY
rc=$?

# the documented shard writer: the same code in both pages, and eval reads what it writes
root="$(dirname "$0")/../.."
writer() { awk '/^```python$/{on=1; next} /^```$/{on=0} on' "$1" | grep -A4 '^def write_shard'; }
w=$(writer "$root/docs/reference/formats.md")
[ -n "$w" ] || { echo "FAIL: formats.md prints no write_shard"; rc=1; }
[ "$w" = "$(writer "$root/docs/guide.md")" ] || { echo "FAIL: the guide's write_shard differs"; rc=1; }
printf 'import struct\n%s\nwrite_shard("%s", [(7 * i) %% 96 for i in range(200)])\n' \
    "$(awk '/^```python$/{on=1; next} /^```$/{on=0} on' "$root/docs/reference/formats.md" |
        sed -n '/^def write_shard/,/^$/p')" "$help_dir/shard.bin" >"$help_dir/write.py"
python3 "$help_dir/write.py" || { echo "FAIL: the documented writer failed"; rc=1; }
out=$("$sc" eval --model "$root/tests/data/hf/llama-tied" --data "$help_dir/shard.bin" \
    --seq-len 16 --batch 2 --batches 1 --json 2>&1) && [[ $out == *'"tokens": 32'* ]] ||
    { echo "FAIL: eval of the documented shard: $out"; rc=1; }
[ $rc -eq 0 ] && echo "ok: the documented shard writer writes what eval reads"
exit $rc
