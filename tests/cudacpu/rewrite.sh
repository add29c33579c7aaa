#!/bin/sh
# tests/cudacpu/rewrite.sh SRC DST: writes DST, the CUDA source SRC in the form the CPU execution
# layer compiles with g++ (see README.md here). Three rewrites, each within its line, so every line
# keeps its number (a #line directive on top names SRC, for messages and __FILE__):
#   name<<<grid, block[, smem[, stream]]>>>(args)
#       -> cudacpu::Launch("name", __FILE__, __LINE__, grid, block[, ...]).run(name, args)
#   extern __shared__ [__align__(N)] T name[];
#       -> T* name = (T*)cudacpu::dynamic_smem();
#   __shared__ T a[N], b[M];      (cudacpu.h makes __shared__ `static thread_local`)
#       -> the same, then [[maybe_unused]] static thread_local bool cudacpu_static_smem_LINE =
#          cudacpu::static_smem(&a, sizeof(a)) && cudacpu::static_smem(&b, sizeof(b));
#          (the layer fills a and b with 0xff bytes at the start of every block)
# A launch must sit on one line, and a static __shared__ declaration start its line and end on it
# (all of ours do; a check below refuses what it does not understand).
set -eu
src=$1
dst=$2
[ -r "$src" ] || { echo "rewrite.sh: cannot read $src" >&2; exit 1; }
if grep -n '<<<' "$src" | grep -v '>>>' > /dev/null; then
    echo "rewrite.sh: $src: a kernel launch spans lines (the CPU layer needs <<<...>>>( on one line):" >&2
    grep -n '<<<' "$src" | grep -v '>>>' >&2
    exit 1
fi
tmp="$dst.tmp.$$"
{
    printf '#line 1 "%s"\n' "$src"
    sed -e 's/\([A-Za-z_][A-Za-z0-9_:]*\(<[^<>;]*>\)\{0,1\}\)<<<\(.*\)>>>()/cudacpu::Launch("\1", __FILE__, __LINE__, \3).run(\1)/g' \
        -e 's/\([A-Za-z_][A-Za-z0-9_:]*\(<[^<>;]*>\)\{0,1\}\)<<<\(.*\)>>>(/cudacpu::Launch("\1", __FILE__, __LINE__, \3).run(\1, /g' \
        -e '/extern[[:space:]]\{1,\}__shared__/s/__align__([0-9]*)//g' \
        -e 's/extern[[:space:]]\{1,\}__shared__[[:space:]]\{1,\}\([^;]*[^[:space:]]\)[[:space:]]\{1,\}\([A-Za-z_][A-Za-z0-9_]*\)[[:space:]]*\[[[:space:]]*\]/\1* \2 = (\1*)cudacpu::dynamic_smem()/' \
        "$src" |
        awk '
        function trim(x) { sub(/^[ \t]+/, "", x); sub(/[ \t]+$/, "", x); return x }
        /^[ \t]*__shared__[ \t]/ {
            semi = index($0, ";")
            if (semi == 0) { print; next }
            decl = substr($0, 1, semi - 1)
            sub(/^[ \t]*__shared__[ \t]+/, "", decl)
            # the declarators: split at the commas outside brackets and parentheses
            n = 0; depth = 0; part = ""
            for (i = 1; i <= length(decl); i++) {
                c = substr(decl, i, 1)
                if (c == "[" || c == "(") { depth++ } else if (c == "]" || c == ")") { depth-- }
                if (c == "," && depth == 0) { parts[++n] = part; part = "" } else { part = part c }
            }
            parts[++n] = part
            # the first is "TYPE NAME[...]": its name is the identifier in front of its first [
            head = parts[1]
            if (index(head, "[")) { head = substr(head, 1, index(head, "[") - 1) }
            head = trim(head)
            if (!match(head, /[A-Za-z_][A-Za-z0-9_]*$/)) { print; next }
            calls = "cudacpu::static_smem(&" substr(head, RSTART) ", sizeof(" substr(head, RSTART) "))"
            for (k = 2; k <= n; k++) {
                d = trim(parts[k])
                if (!match(d, /^[A-Za-z_][A-Za-z0-9_]*/)) { calls = ""; break }
                name = substr(d, 1, RLENGTH)
                calls = calls " && cudacpu::static_smem(&" name ", sizeof(" name "))"
            }
            if (calls == "") { print; next }
            print substr($0, 1, semi) " [[maybe_unused]] static thread_local bool cudacpu_static_smem_" NR " = " calls ";" substr($0, semi + 1)
            next
        }
        { print }'
} > "$tmp"
if grep -n '<<<\|extern[[:space:]]*__shared__' "$tmp" | grep -v '^[0-9]*:[[:space:]]*//' > /dev/null ||
    grep -n '__shared__' "$tmp" | grep -v 'extern\|cudacpu_static_smem_\|^[0-9]*:[[:space:]]*//' > /dev/null; then
    echo "rewrite.sh: $src: left a construct it does not understand:" >&2
    grep -n '<<<\|extern[[:space:]]*__shared__' "$tmp" >&2 || true
    grep -n '__shared__' "$tmp" | grep -v 'extern\|cudacpu_static_smem_\|^[0-9]*:[[:space:]]*//' >&2 || true
    rm -f "$tmp"
    exit 1
fi
mv "$tmp" "$dst"
