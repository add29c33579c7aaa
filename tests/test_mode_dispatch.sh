#!/usr/bin/env bash
# tests/test_mode_dispatch.sh: a norm mode that some place does not handle must not build.
#
# Copies the sources into a scratch folder, adds a fourth norm mode there, and compiles the CPU
# trainer and its test (and, where nvcc is installed, the CUDA trainer and its test) with warnings
# as errors:
#   1. the mode in the enum and NUM_NORM_MODES only: the two per-mode tables of common/params.h
#      must fail their compile-time row counts;
#   2. the tables extended too: every `switch (mode)` must be named by -Wswitch: 4 in each
#      trainer (the sublayer and the final LN, forward and backward) and 3 in the list of dumped
#      tensors that both tests read (common/debug_state.h);
#   3. each switch extended: both build again, so the switches are the whole list.
# Usage: bash tests/test_mode_dispatch.sh
set -uo pipefail
cd "$(dirname "$0")/.."
CC=${CC:-gcc}
NVCC=${NVCC:-nvcc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0
fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }

copy_tree() {  # a fresh copy of what the trainers include
    rm -rf "$work/src"
    mkdir -p "$work/src"
    cp -r common train_gpt2.c train_gpt2.cu ./*.cuh test_gpt2.c test_gpt2.cu "$work/src/"
}
add_enum_value() {
    sed -i -e 's/NORM_SIAMESE = 2 } NormMode;/NORM_SIAMESE = 2, NORM_PLANTED = 3 } NormMode;/' \
        -e 's/^#define NUM_NORM_MODES 3$/#define NUM_NORM_MODES 4/' "$work/src/common/params.h"
    grep -q NORM_PLANTED "$work/src/common/params.h" && grep -q "NUM_NORM_MODES 4" "$work/src/common/params.h"
}
add_table_rows() {
    sed -i -e 's/= {"pre", "post", "siamese"};/= {"pre", "post", "siamese", "planted"};/' \
        -e 's|^    /\* siamese \*/ {1, 1, 1},$|&\n    /* planted */ {1, 1, 1},|' "$work/src/common/params.h"
    grep -q '"planted"' "$work/src/common/params.h" && grep -q 'planted \*/' "$work/src/common/params.h"
}
build_c() {
    (cd "$work/src" && for f in train_gpt2.c test_gpt2.c; do
        $CC -std=gnu11 -Wall -Wextra -Wno-unknown-pragmas -Wno-unused-function -Werror -fsyntax-only $f || failed=1
    done; exit ${failed:-0}) > "$work/log" 2>&1
}
build_cu() {
    (cd "$work/src" && for f in train_gpt2.cu test_gpt2.cu; do
        $NVCC -std=c++17 -I. -Xcompiler -Wall,-Wextra,-Wno-unused-function,-Werror -c $f -o "$work/o.o" || failed=1
    done; exit ${failed:-0}) > "$work/log" 2>&1
}
# the number of distinct source lines of file $1 that the compiler flags for the planted mode
switch_sites() {
    grep -E "enumeration value .NORM_PLANTED. not handled" "$work/log" | grep -E "(^|/)$1[:(]" |
        sed -E 's/^([^:(]*)[:(]([0-9]+).*/\1:\2/' | sort -u | wc -l
}

# the unchanged copy builds (so that the failures below are the planted mode's)
copy_tree
if build_c; then ok "the copied sources build with -Werror"; else bad "the copied sources do not build:"; cat "$work/log"; fi

# 1. enum only
copy_tree
if ! add_enum_value; then bad "could not plant the mode (params.h changed shape?)"; fi
if build_c; then bad "a mode missing from the tables built"; else
    if grep -q "one name per norm mode" "$work/log" && grep -q "one layout per norm mode" "$work/log"; then
        ok "a mode missing from the tables: both compile-time row counts fail"
    else bad "a mode missing from the tables failed for another reason:"; cat "$work/log"; fi
fi

# 2. enum and tables: every switch is named
expect_sites() {  # $1 file, $2 expected count
    local n
    n=$(switch_sites "$1")
    if [ "$n" -eq "$2" ]; then ok "$1: -Wswitch names all $2 switches over the mode"
    else bad "$1: $n switch sites named, expected $2:"; cat "$work/log"; fi
}
add_table_rows || bad "could not extend the tables (params.h changed shape?)"
if build_c; then bad "a mode no switch handles built (train_gpt2.c, test_gpt2.c)"; else
    expect_sites train_gpt2.c 4
    expect_sites debug_state.h 3
    if grep -E "error:" "$work/log" | grep -vq "NORM_PLANTED"; then bad "C: other errors too:"; cat "$work/log"; fi
fi
if command -v "$NVCC" > /dev/null 2>&1; then
    if build_cu; then bad "a mode no switch handles built (train_gpt2.cu, test_gpt2.cu)"; else
        expect_sites train_gpt2.cu 4
        expect_sites debug_state.h 3
    fi
else
    echo "skip train_gpt2.cu: $NVCC not found"
fi

# 3. and once each switch handles it (here: as siamese), the trainers build again: the list is complete
sed -i 's/^\( *\)case NORM_SIAMESE:/\1case NORM_PLANTED:\n&/' "$work/src/train_gpt2.c" "$work/src/train_gpt2.cu" \
    "$work/src/common/debug_state.h"
if build_c; then ok "C: with the switches extended, the planted mode builds"
else bad "train_gpt2.c: still does not build with every switch extended:"; cat "$work/log"; fi
if command -v "$NVCC" > /dev/null 2>&1; then
    if build_cu; then ok "CUDA: with the switches extended, the planted mode builds"
    else bad "train_gpt2.cu: still does not build with every switch extended:"; cat "$work/log"; fi
fi

echo "test_mode_dispatch: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
