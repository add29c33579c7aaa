#!/usr/bin/env bash
# tests/test_planted_cpu.sh: test_gpt2 must catch bugs planted in train_gpt2.c. Each plant below is
# applied to a copy of the sources (train_gpt2.c, test_gpt2.c, common/), test_gpt2 is rebuilt there
# and run on data/test; it must exit non-zero with a FAIL line. Prints the first failing line of
# each. Plants 1-3 are in the gradient norm, whose clip scale barely moves the losses (AdamW is
# nearly blind to the scale of the gradient): only the norm check of each step sees them. Plants 4-5
# are in the recompute of the backward (-r 1, 2), which only test_gpt2's [recompute] check runs.
#   bash tests/test_planted_cpu.sh     (CC and CFLAGS from the environment; make test-corrupt runs it)
set -uo pipefail
cd "$(dirname "$0")/.."
CC=${CC:-gcc}
CFLAGS=${CFLAGS:--O3 -march=native -std=gnu11 -fopenmp}
work=$(mktemp -d /tmp/test_planted_cpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$PWD
failed=0

# plant NAME SED-SCRIPT: the bug, one sed script that must change train_gpt2.c
plant() {
    local name=$1 script=$2
    rm -rf "$work/src"
    mkdir -p "$work/src"
    cp -r common train_gpt2.c test_gpt2.c "$work/src/"
    sed -i -e "$script" "$work/src/train_gpt2.c"
    if cmp -s train_gpt2.c "$work/src/train_gpt2.c"; then
        echo "test-planted-cpu: $name: the plant no longer applies to train_gpt2.c (update this script)"
        failed=1
        return
    fi
    local line
    line=$( (diff train_gpt2.c "$work/src/train_gpt2.c" || true) | sed -n '1s/^\([0-9]*\).*/\1/p')
    # shellcheck disable=SC2086
    if ! (cd "$work/src" && $CC $CFLAGS -Wno-unused-function test_gpt2.c -o test_gpt2 -lm) > "$work/build.txt" 2>&1; then
        cat "$work/build.txt"
        echo "test-planted-cpu: $name: the planted source does not build"
        failed=1
        return
    fi
    if "$work/src/test_gpt2" "$root/data/test" > "$work/out.txt" 2>&1; then
        echo "test-planted-cpu: $name (train_gpt2.c:$line): NOT caught: test_gpt2 passed"
        failed=1
    else
        echo "test-planted-cpu: $name (train_gpt2.c:$line): test_gpt2 FAILED as it must; first failing line:"
        echo "    $( (grep -m1 -E "FAIL|error:" "$work/out.txt" || tail -n 1 "$work/out.txt") | sed "s/^ *//")"
    fi
}

# 1. the norm 1.25x too large: the sum of squares scaled by 1.25^2
plant "gradient norm 1.25x too large" \
    '/^static double gpt2_grad_sumsq/,/^}/s/    return total;/    return 1.5625 * total;/'

# 2. a bound: the last (n mod 8) gradients of each chunk left out of the sum of squares
plant "chunk tails left out of the sum of squares" \
    '/^static double gpt2_grad_sumsq/,/^}/s/for (; i < i1; i++) { acc\[0\]/for (; i < i0; i++) { acc[0]/'

# 3. a NaN norm (as from a partial sum never written): the clip of a NaN norm is no clip at all
plant "NaN gradient norm" \
    '/^static double gpt2_grad_sumsq/,/^}/s/    double total = 0.0;/    double total = NAN;/'

# 4. -r 1: the GELU outputs not rebuilt (the backward reads the last layer's for every layer)
plant "GELU outputs not rebuilt" \
    's/if (m->recompute >= 1) { gelu_forward(/if (m->recompute >= 3) { gelu_forward(/'

# 5. -r 2: a, r, u not rebuilt (the backward reads the first sublayer's, as the forward left them)
plant "LayerNorm outputs not rebuilt" \
    's/int rebuild = m->recompute >= 2;/int rebuild = m->recompute >= 3;/'

exit $failed
