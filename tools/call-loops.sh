#!/bin/sh
# call-loops.sh: lists loops of calls between the source files of one folder.
#
# Usage: tools/call-loops.sh [-a] [-e] [-f FOLDER]... OBJECT...
#
# Each OBJECT is a compiled object file, a directory (the *.o files directly in it) or a CMake
# list of object files (';' between them, as $<TARGET_OBJECTS:lib> gives). NM names the nm to
# use (default: nm).
# A file "calls" another when it references an external symbol (function or variable) that the
# other defines; `nm` tells which. Files are grouped by the folder of their source (the part of
# the object's path after ".../CMakeFiles/<target>.dir/", so runtime/runner.c.o is in
# "runtime"); a loop is a set of two or more files of one folder that reach each other by such
# references. With -a, loops across folders count too. With -f, only the named folders (as
# above, "." for the target's top folder) are examined; give it more than once for several.
# With -e, it first prints every reference between two files it examined, loop or not.
#
# It prints each loop with the references that close it (file -> file: one symbol) and exits 1
# when it found any, 0 when none, 2 on a usage error. References through headers (static inline
# functions, macros) and through function pointers are invisible to it, by design: a table of
# callbacks is the sanctioned way for a lower file to reach an upper one.
set -eu

across=0
edges=0
folders=""
while [ $# -gt 0 ]; do
    case "$1" in
    -a) across=1; shift ;;
    -e) edges=1; shift ;;
    -f) [ $# -ge 2 ] || { echo "call-loops: -f needs a folder" >&2; exit 2; }
        folders="$folders $2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    -*) echo "call-loops: unknown option '$1' (valid: -a, -e, -f FOLDER, -h)" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "call-loops: no object files given (usage: call-loops.sh [-a] [-e] [-f FOLDER]... OBJECT...)" >&2; exit 2; }
nm=${NM:-nm}
command -v "$nm" >/dev/null 2>&1 || { echo "call-loops: '$nm' not found (set NM to an nm)" >&2; exit 2; }

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT INT TERM

# One line per symbol: "<node> <D|U> <symbol>", node being the source's path in its target.
add_object() {
    [ -f "$1" ] || { echo "call-loops: no such object file '$1' (build the library first)" >&2; exit 2; }
    node=$(printf '%s\n' "$1" | sed -e 's|.*/CMakeFiles/[^/]*\.dir/||' -e 's|\.o$||')
    "$nm" -P -g "$1" | awk -v node="$node" '
        NF >= 2 { print node, ($2 == "U" || $2 == "w" ? "U" : "D"), $1 }' >>"$tmp"
}
for arg in "$@"; do
    if [ -d "$arg" ]; then
        for obj in "$arg"/*.o; do
            [ -e "$obj" ] && add_object "$obj"
        done
        continue
    fi
    # a CMake list ($<TARGET_OBJECTS:lib>) arrives as one argument with ';' between paths
    set -f
    old_ifs=$IFS
    IFS=';'
    for obj in $arg; do
        IFS=$old_ifs
        [ -n "$obj" ] && add_object "$obj"
    done
    IFS=$old_ifs
    set +f
done
[ -s "$tmp" ] || { echo "call-loops: the object files given define no symbols" >&2; exit 2; }

awk -v across="$across" -v edges="$edges" -v folders="$folders" '
function folder(n,   i) { i = match(n, /\/[^\/]*$/); return i ? substr(n, 1, i - 1) : "." }
BEGIN { nf = split(folders, fl, " "); for (i = 1; i <= nf; i++) want[fl[i]] = 1 }
$2 == "D" { def[$3] = $1; nodes[$1] = 1; next }
$2 == "U" { use[++nu] = $1 SUBSEP $3; nodes[$1] = 1 }
END {
    for (i = 1; i <= nu; i++) {
        split(use[i], p, SUBSEP); a = p[1]; s = p[2]
        if (!(s in def)) continue
        b = def[s]
        if (a == b) continue
        if (!across && folder(a) != folder(b)) continue
        if (nf && !(folder(a) in want && folder(b) in want)) continue
        if (!((a, b) in edge)) edge[a, b] = s
        reach[a, b] = 1
    }
    if (edges)
        for (e in edge) { split(e, p, SUBSEP); printf "%s -> %s: %s\n", p[1], p[2], edge[e] }
    n = 0
    for (x in nodes) name[++n] = x
    # transitive closure (Floyd-Warshall); a folder holds tens of files, not thousands
    for (k = 1; k <= n; k++) for (i = 1; i <= n; i++) {
        if (!((name[i], name[k]) in reach)) continue
        for (j = 1; j <= n; j++)
            if ((name[k], name[j]) in reach) reach[name[i], name[j]] = 1
    }
    loops = 0
    for (i = 1; i <= n; i++) {
        a = name[i]
        if (a in done) continue
        members = ""
        for (j = 1; j <= n; j++) {
            b = name[j]
            if (i != j && (a, b) in reach && (b, a) in reach) { members = members " " b; done[b] = 1 }
        }
        if (members == "") continue
        done[a] = 1
        loops++
        all = a members
        printf "loop %d:%s %s\n", loops, "", all
        m = split(all, mem, " ")
        for (x = 1; x <= m; x++) for (y = 1; y <= m; y++)
            if ((mem[x], mem[y]) in edge)
                printf "    %s -> %s: %s\n", mem[x], mem[y], edge[mem[x], mem[y]]
    }
    if (loops) { printf "%d loop(s) of calls between files\n", loops; exit 1 }
    print "no loops of calls between files"
}' "$tmp"
