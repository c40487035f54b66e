#!/usr/bin/env python3
"""Lists the loops of calls between the source files of one library, from its object files.

Usage: call_loops.py [--report-only] OBJECT.o...

For each object file, `nm` says which global symbols it defines and which it references but
leaves undefined. File A calls file B when A references a symbol that B defines; a loop is a
group of two or more files each of which reaches every other through such calls (a strongly
connected component of that graph). Each loop is printed with the references that close it, so
that the reader sees which call to move. Exits 1 when there is a loop (0 with --report-only),
2 when nm cannot read an object.

Static functions never appear (they cannot be called from another file), and a reference to a
global variable counts as a call: reading another file's state ties the two as much as calling.
"""

import os
import subprocess
import sys


def source_name(obj):
    """coordinator/CMakeFiles/x.dir/jobs_dispatch.c.o -> jobs_dispatch.c"""
    name = os.path.basename(obj)
    return name[:-2] if name.endswith(".o") else name


def symbols(obj):
    """(defined, undefined) global symbol sets of one object file."""
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write("call_loops: nm cannot read %s: %s" % (obj, out.stderr))
        sys.exit(2)
    defined, undefined = set(), set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        sym, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(sym)
        elif kind in "TDBRCGSVW":  # upper case: global text, data, bss, read-only, common, weak
            defined.add(sym)
    return defined, undefined


def loops(calls):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(calls):
        if root in index:
            continue
        work = [(root, iter(sorted(calls[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(calls[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def main(argv):
    report_only = False
    if argv and argv[0] == "--report-only":
        report_only = True
        argv = argv[1:]
    objs = [o for a in argv for o in a.split(";") if o.endswith(".o")]
    if not objs:
        sys.stderr.write("usage: call_loops.py [--report-only] OBJECT.o...\n")
        return 2
    owner, refs = {}, {}
    for obj in objs:
        src = source_name(obj)
        defined, undefined = symbols(obj)
        for sym in defined:
            owner[sym] = src
        refs[src] = undefined
    calls = {src: {} for src in refs}  # caller -> callee -> symbols
    for src, undefined in refs.items():
        for sym in undefined:
            callee = owner.get(sym)
            if callee and callee != src:
                calls[src].setdefault(callee, []).append(sym)
    groups = loops({k: set(v) for k, v in calls.items()})
    if not groups:
        print("no loop of calls between the %d files" % len(refs))
        return 0
    for group in groups:
        print("loop of calls between: %s" % ", ".join(group))
        members = set(group)
        for caller in group:
            for callee in sorted(calls[caller]):
                if callee in members:
                    print("  %s -> %s: %s" % (caller, callee,
                                              ", ".join(sorted(calls[caller][callee]))))
    return 0 if report_only else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
