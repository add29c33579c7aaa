#!/bin/sh
# tests/cudacpu/rewrite.sh SRC DST: writes DST, the CUDA source SRC in the form the CPU execution
# layer compiles with g++ (see README.md here). Two rewrites, each within its line, so every line
# keeps its number (a #line directive on top names SRC, for messages and __FILE__):
#   name<<<grid, block[, smem[, stream]]>>>(args)
#       -> cudacpu::Launch("name", __FILE__, __LINE__, grid, block[, ...]).run(name, args)
#   extern __shared__ [__align__(N)] T name[];
#       -> T* name = (T*)cudacpu::dynamic_smem();
# A launch must sit on one line (all of ours do; a check below refuses one that does not).
set -eu
src=$1
dst=$2
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
        "$src"
} > "$tmp"
if grep -n '<<<\|extern[[:space:]]*__shared__' "$tmp" | grep -v '^[0-9]*:[[:space:]]*//' > /dev/null; then
    echo "rewrite.sh: $src: left a construct it does not understand:" >&2
    grep -n '<<<\|extern[[:space:]]*__shared__' "$tmp" >&2
    rm -f "$tmp"
    exit 1
fi
mv "$tmp" "$dst"
