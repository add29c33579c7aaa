#!/usr/bin/env bash
# tests/cudacpu/test_planted.sh: the CPU execution layer's tests of the CUDA trainer must be able to
# fail. Each planted bug below is applied to a copy of the sources, built through the layer and run
# under the thread schedules `make test` uses (tests/cudacpu/test_cudacpu.sh): test_gpt2cu (FP32)
# on data/test, or, for a bug data/test cannot show, the dev/cuda program that checks the kernel
# alone (BF16, at the sizes dev/cuda/test_layer.sh gives it). Every plant is in code that runs
# there, and the check must fail under at least one of the schedules (they run in order until one
# fails). Prints, for each plant, the first failing line of the check's output. A plant marked BF16
# builds test_gpt2cu in BF16 instead: a bug that only that build's tolerances let through.
#   CUDACPU_BUILD="g++ <flags>" CUDACPU_OBJS="<objects>" bash tests/cudacpu/test_planted.sh
# (make test-cudacpu passes both).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${CUDACPU_BUILD:?set by make test-cudacpu}" "${CUDACPU_OBJS:?set by make test-cudacpu}"
# the FP32 runs' schedules in tests/cudacpu/test_cudacpu.sh, then the BF16 run's, then thread 0 first
# (a shuffled order draws its permutation from the seed and the launch's source line, so whether
# it exposes a given race can change when the code above a launch moves; forward does not)
SCHEDULES="reverse shuffle:1 shuffle:2 forward"

work=$(mktemp -d /tmp/cudacpu_planted.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$PWD
objs=""
for o in $CUDACPU_OBJS; do objs="$objs $root/$o"; done
failed=0

# plant NAME FILE SED-SCRIPT [BF16 | PROGRAM ARGS...]: the bug, one sed script that must change
# FILE; the check: test_gpt2cu (FP32, or BF16) on data/test, or the dev/cuda program PROGRAM with ARGS
plant() {
    local name=$1 file=$2 script=$3
    shift 3
    rm -rf "$work/src" "$work/rw"
    mkdir -p "$work/src/dev/cuda" "$work/rw/dev/cuda"
    cp ./*.cu ./*.cuh "$work/src/"
    cp dev/cuda/*.cu dev/cuda/*.h "$work/src/dev/cuda/"
    sed -e "$script" "$file" > "$work/src/$file"
    if cmp -s "$file" "$work/src/$file"; then
        echo "test-planted: $name: the plant no longer applies to $file (update this script)"
        failed=1
        return
    fi
    local line
    line=$( (diff "$file" "$work/src/$file" || true) | sed -n '1s/^\([0-9]*\).*/\1/p')
    (cd "$work/src" && for f in *.cu *.cuh dev/cuda/*; do sh "$root/tests/cudacpu/rewrite.sh" "$f" "$work/rw/$f"; done)
    local source="$work/rw/test_gpt2.cu" flags="-DENABLE_FP32" check="test_gpt2cu"
    if [ "${1:-}" = BF16 ]; then
        flags="" check="test_gpt2cu BF16"
        shift
    elif [ $# -gt 0 ]; then
        source="$work/rw/dev/cuda/$1.cu" flags="-Wno-unknown-pragmas -iquote $work/rw" check="dev/cuda/$*"
        shift
    fi
    # shellcheck disable=SC2086
    if ! $CUDACPU_BUILD -I"$root" $flags -x c++ "$source" -x none $objs -o "$work/test" -lm > "$work/build.txt" 2>&1; then
        cat "$work/build.txt"
        echo "test-planted: $name: the planted source does not build"
        failed=1
        return
    fi
    local caught=0 s
    for s in $SCHEDULES; do
        if CUDACPU_SCHEDULE=$s "$work/test" "$@" > "$work/out.txt" 2>&1; then
            echo "test-planted: $name ($file:$line), $check, schedule $s: passed (not caught by this schedule)"
        else
            caught=1
            local first
            first=$(grep -m1 'FIRST DIVERGENCE' "$work/out.txt" || grep -m1 -E 'FAIL|cudacpu: error|error:' "$work/out.txt" ||
                tail -n 1 "$work/out.txt")
            echo "test-planted: $name ($file:$line), $check, schedule $s: FAILED as it must; first failing line:"
            echo "    $first"
            break  # the later schedules cost time and show nothing more
        fi
    done
    if [ $caught = 0 ]; then
        echo "test-planted: $name: NOT caught by the test under any schedule"
        failed=1
    fi
}

# 1. a missing barrier: the column sums (column_sums_kernel) add the partial sums before all of them
#    are written
plant "missing __syncthreads in the column sums (column_sums_kernel)" siamese.cuh \
    '/part\[threadIdx.y\]\[threadIdx.x\] = sum;/{n;/__syncthreads/d;}'

# 2. a missing barrier: block_reduce reads the warps' posts before all of them are written (the
#    classifier's row max and row sum of every row of logits, sumsq_kernel's partial sums)
plant "missing __syncthreads in block_reduce (the classifier's, sumsq_kernel's)" train_gpt2.cu \
    '/^__device__ float block_reduce/,/^}/{/__syncthreads();/d;}'

# 3. an off-by-one in a row loop: D = rowsum(dO O) of attention's backward leaves out the last
#    16-byte vector of the head
plant "off-by-one in flash_backward_dot_kernel's row loop" attention.cuh \
    '/^__global__ void flash_backward_dot_kernel/,/^}/s/for (int c = 0; c < HS; c += FA_VEC)/for (int c = 0; c < HS - FA_VEC; c += FA_VEC)/'

# 4. a transposed cuBLASLt operand: a linear layer's weight read untransposed where it is square
#    (OC = C: the attention projection; a valid shape for cuBLASLt, so no error, only wrong numbers)
plant "transposed cuBLASLt operand in matmul_forward (W instead of W^T)" train_gpt2.cu \
    's/MatmulSpec spec = {OC, BT, C, w, 1, inp,/MatmulSpec spec = {OC, BT, C, w, OC != C, inp,/'

# 5. the gradient norm 1.25x too large (its square scaled by 1.5625 in every block's partial sum)
plant "gradient norm 1.25x too large (sumsq_kernel)" train_gpt2.cu \
    's/partials\[blockIdx.x\] = sum; }/partials[blockIdx.x] = 1.5625f * sum; }/'

# 6-9. the LayerNorm backward kernels, which sum the parameter gradients per block of rows
#    (siamese.cuh LnRounds, ln_backward_run, siamese_input_backward_kernel):
# 6. a missing barrier: the column pass reads the per-row means before every warp has written its row's
plant "missing __syncthreads between the per-row means and the column pass (LnRounds)" siamese.cuh \
    '/^struct LnRounds/,/^};/{/per_row(base + j, j); }/{n;/__syncthreads/d;}}'
# 7. the finish leaves the last block's partial sums out
plant "ln_backward_run's finish skips the last block's partial sums" siamese.cuh \
    's/    column_sums(grads, n, partials, blocks, C);/    column_sums(grads, n, partials, blocks - 1, C);/'
# 8. the blocks write their partial sums in another layout than the finish reads (block-major, not
#    sum-major): every gradient gets other blocks' and other sums' partials
plant "block partials written block-major, read sum-major" siamese.cuh \
    's/partials\[((size_t)(j \/ C) \* gridDim.x + blockIdx.x) \* C + j % C\] = t;/partials[((size_t)blockIdx.x * n + j \/ C) * C + j % C] = t;/'
# 9. one LayerNorm's parameter gradient from the wrong tensor: lny's weight gradient dr * xhat
#    instead of dr * yhat
plant "lny weight gradient from x instead of y (siamese_input_backward_kernel)" siamese.cuh \
    's/g\[2\]\[e\] += dr \* (((float)yv.v\[e\] - ys.mean) \* ys.rstd);/g[2][e] += dr * (((float)xv.v[e] - xs.mean) * xs.rstd);/'

# 10. a vocabulary bound: the classifier takes the first padding entry of each row (a logit of 0)
#    into the softmax
plant "vocabulary bound in classifier_load (i <= V)" train_gpt2.cu \
    's/x\[k\]\[e\] = j \* CLASSIFIER_W + e < V ?/x[k][e] = j * CLASSIFIER_W + e <= V ?/'

# 11. the padding not zeroed: the classifier stores only the units that hold real entries, so the
#    padding after them keeps its logits (0 in the trainer, whose padded rows of wte are zero: the
#    kernel's own check, with random padding logits, shows it)
plant "padding of dlogits not written (units past V skipped)" train_gpt2.cu \
    's/if (j >= Vp \/ CLASSIFIER_W) { continue; }/if (j * CLASSIFIER_W >= V) { continue; }/' \
    classifier 4 N=5 V=301 Vp=304

# 12, 13. the embedding gradient's finish (the chunks of a token at half the positions; data/test
#    has no token with more than one chunk): a chunk left out, then the chunks added in reverse
#    order (the sum changes in its last bits: the kernel's check is bit for bit)
plant "a chunk skipped in wte_finish_kernel" train_gpt2.cu \
    '/^__global__ void wte_finish_kernel/,/^}/s/slot < split_first\[k + 1\]; slot++/slot < split_first[k + 1] - 1; slot++/' \
    encoder_backward 2 N=300 C=50 V=301
plant "chunks added out of order in wte_finish_kernel" train_gpt2.cu \
    '/^__global__ void wte_finish_kernel/,/^}/s/for (int slot = split_first\[k\]; slot < split_first\[k + 1\]; slot++)/for (int slot = split_first[k + 1] - 1; slot >= split_first[k]; slot--)/' \
    encoder_backward 2 N=300 C=50 V=301

exit $failed
