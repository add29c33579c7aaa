#!/usr/bin/env bash
# tests/cudacpu/test_planted.sh: the CPU execution layer's test of the CUDA trainer must be able to
# fail. Each planted bug below is applied to a copy of the sources, built through the layer (FP32)
# and run on data/test under the thread schedules `make test` uses (tests/cudacpu/test_cudacpu.sh);
# every plant is in code that runs there, and the test must fail under at least one of the
# schedules (they run in order until one fails). Prints, for each plant, the first failing line of
# the test's output.
#   CUDACPU_BUILD="g++ <flags>" CUDACPU_OBJS="<objects>" bash tests/cudacpu/test_planted.sh
# (make test-cudacpu passes both).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${CUDACPU_BUILD:?set by make test-cudacpu}" "${CUDACPU_OBJS:?set by make test-cudacpu}"
SCHEDULES="reverse shuffle:1"

work=$(mktemp -d /tmp/cudacpu_planted.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$PWD
objs=""
for o in $CUDACPU_OBJS; do objs="$objs $root/$o"; done
failed=0

# plant NAME FILE SED-SCRIPT: the bug, one sed script that must change FILE
plant() {
    local name=$1 file=$2 script=$3
    rm -rf "$work/src" "$work/rw"
    mkdir -p "$work/src" "$work/rw"
    cp ./*.cu ./*.cuh "$work/src/"
    sed -e "$script" "$file" > "$work/src/$file"
    if cmp -s "$file" "$work/src/$file"; then
        echo "test-planted: $name: the plant no longer applies to $file (update this script)"
        failed=1
        return
    fi
    local line
    line=$( (diff "$file" "$work/src/$file" || true) | sed -n '1s/^\([0-9]*\).*/\1/p')
    (cd "$work/src" && for f in *.cu *.cuh; do sh "$root/tests/cudacpu/rewrite.sh" "$f" "$work/rw/$f"; done)
    # shellcheck disable=SC2086
    if ! $CUDACPU_BUILD -I"$root" -DENABLE_FP32 -x c++ "$work/rw/test_gpt2.cu" -x none $objs -o "$work/test" -lm \
        > "$work/build.txt" 2>&1; then
        cat "$work/build.txt"
        echo "test-planted: $name: the planted source does not build"
        failed=1
        return
    fi
    local caught=0 s
    for s in $SCHEDULES; do
        if CUDACPU_SCHEDULE=$s "$work/test" > "$work/out.txt" 2>&1; then
            echo "test-planted: $name ($file:$line), schedule $s: the test passed (not caught by this schedule)"
        else
            caught=1
            local first
            first=$(grep -m1 'FIRST DIVERGENCE' "$work/out.txt" || grep -m1 -E 'FAIL|cudacpu: error|error:' "$work/out.txt" ||
                tail -n 1 "$work/out.txt")
            echo "test-planted: $name ($file:$line), schedule $s: test FAILED as it must; first failing line:"
            echo "    $first"
            break  # the later schedules cost time and show nothing more
        fi
    done
    if [ $caught = 0 ]; then
        echo "test-planted: $name: NOT caught by the test under any schedule"
        failed=1
    fi
}

# 1. a missing barrier: the column sums (column_tile_sums, in column_grads_kernel) add the partial sums
#    before all of them are written
plant "missing __syncthreads in the column sums (column_tile_sums)" train_gpt2.cu \
    '/part_b\[threadIdx.y\]\[threadIdx.x\] = sb;/{n;/__syncthreads/d;}'

# 2. a shared-memory race: thread 0 reuses wsum[0] while other threads of the block may still read it
#    (in block_lse, the block-wide log-sum-exp of the classifier: classifier_row_kernel on data/test)
plant "shared-memory race in the classifier's block_lse" train_gpt2.cu \
    's/^\(    for (int w = 0; w < (int)blockDim.x \/ 32; w++) { softmax_merge(&m, &s, wm\[w\], wsum\[w\]); }\)/\1 if (threadIdx.x == 0) { wsum[0] = s; }/'

# 3. an off-by-one in a row loop: D = rowsum(dO O) of flash attention's backward leaves out the
#    last channel of the head
plant "off-by-one in flash_backward_dot_kernel's row loop" attention.cuh \
    '/^__global__ void flash_backward_dot_kernel/,/^}/s/for (int c = lane; c < HS; c += 32)/for (int c = lane; c < HS - 1; c += 32)/'

# 4. a transposed cuBLASLt operand: a linear layer's weight read untransposed where it is square
#    (OC = C: the attention projection; a valid shape for cuBLASLt, so no error, only wrong numbers)
plant "transposed cuBLASLt operand in matmul_forward (W instead of W^T)" train_gpt2.cu \
    's/MatmulSpec s = matmul_spec(OC, BT, C, w, 1, C, inp, 0, C, out, OC);/MatmulSpec s = matmul_spec(OC, BT, C, w, OC != C, C, inp, 0, C, out, OC);/'

exit $failed
