#!/usr/bin/env bash
# tests/test_kernels.sh: the CUDA trainer's kernels, executed on the CPU through the execution
# layer (tests/cudacpu), beyond the stored shapes that test-cudacpu runs:
#   1. a shape the stored dumps lack, written by the CPU trainer (./test_gpt2 --write): L 2, C 128,
#      NH 2 (head size 64: flash attention), V 301, T 77 (not a multiple of the 64-row attention
#      tile), B 2 (154 rows: three chunks of the two-stage column sums, the last one short; 20
#      blocks of the LayerNorm backwards, the last of 2 rows).
#      test_gpt2cu checks every mode there (FP32 build; the BF16 build too where the layer has
#      WMMA);
#   2. planted bugs, a few per kernel: each is applied to a copy of the sources, which is rebuilt,
#      and test_gpt2cu must FAIL a check; the first failing line is printed.
# Usage: bash tests/test_kernels.sh   (needs ./test_gpt2 and the CUDA headers; make test-kernels
# builds what it needs)
set -uo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/test_kernels.XXXXXX)
trap 'rm -rf "$work"' EXIT
failed=0
SHAPE=2,128,2,301,77,2

./test_gpt2 --write "$work/ref" "$SHAPE" > "$work/write.log" 2>&1 || { cat "$work/write.log"; exit 1; }

# check NAME BINARY: test_gpt2cu on the shape must pass
check() {
    local start=$SECONDS
    if "$2" "$work/ref" > "$work/log" 2>&1 && grep -q '^all checks passed' "$work/log"; then
        echo "ok   $1: $(grep -c 'PASSED$' "$work/log") mode runs passed ($((SECONDS - start)) s)"
    else
        cat "$work/log"
        echo "FAIL $1"
        failed=1
    fi
}
builds="FP32:tests/bin/test_gpt2cu_fp32_cpu"
[ -f tests/cudacpu/wmma.h ] && builds="$builds BF16:tests/bin/test_gpt2cu_cpu"
for b in $builds; do
    make --no-print-directory "${b#*:}" WERROR=1 > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
    check "test_gpt2cu ${b%%:*} at $SHAPE" "${b#*:}"
done

# plant KERNEL FILE 'sed expression' DESCRIPTION: the planted copy must fail a check (FP32 build;
# one layer and one sequence of 77 tokens, to keep it short: still a tail tile, two column-sum
# chunks and a last LayerNorm-backward block of 5 rows). KERNEL names the kernel family in the
# report.
./test_gpt2 --write "$work/ref1" 1,128,2,301,77,1 > "$work/write.log" 2>&1 || { cat "$work/write.log"; exit 1; }
mkdir -p "$work/base"  # the sources, built once; each plant starts from a copy (only its file rebuilds)
git ls-files -z | xargs -0 cp --parents -t "$work/base"
make --no-print-directory -C "$work/base" tests/bin/test_gpt2cu_fp32_cpu WERROR=0 > "$work/build.log" 2>&1 ||
    { cat "$work/build.log"; echo "FAIL the unplanted copy does not build"; exit 1; }
plant() {
    local kernel=$1 file=$2 expr=$3 what=$4
    rm -rf "$work/src" && cp -a "$work/base" "$work/src"
    sleep 1  # a newer time stamp than the copied build's
    sed -i -e "$expr" "$work/src/$file"
    if cmp -s "$file" "$work/src/$file"; then echo "FAIL plant '$what': the expression changed nothing in $file"; failed=1; return; fi
    if ! make --no-print-directory -C "$work/src" tests/bin/test_gpt2cu_fp32_cpu WERROR=0 > "$work/build.log" 2>&1; then
        cat "$work/build.log"; echo "FAIL plant '$what': the planted copy does not build"; failed=1; return
    fi
    "$work/src/tests/bin/test_gpt2cu_fp32_cpu" "$work/ref1" > "$work/log" 2>&1
    if grep -q '^[0-9]* checks FAILED' "$work/log"; then
        echo "ok   plant '$what' ($kernel) fails: $(grep -m1 'FAIL' "$work/log" | sed 's/^ *//')"
    else
        cat "$work/log"; echo "FAIL plant '$what' ($kernel): test_gpt2cu did not fail a check"; failed=1
    fi
}
plant flash attention.cuh 's/{ O\[r \* sm.ld_a + c\] \*= corr; }/{ }/' "output accumulator not rescaled"
plant flash attention.cuh 's/float l_new = l_old \* corr + warp_sum(sum);/float l_new = l_old + warp_sum(sum);/' \
    "running softmax sum not rescaled"
plant flash attention.cuh 's/dim3 grid(ceil_div(T, tile), BNH);/dim3 grid(T \/ tile, BNH);/' "tail tile dropped (T / tile blocks)"
plant flash attention.cuh 's/k0 + j <= t \&\& t < T/k0 + j < t \&\& t < T/' "forward mask off by one (diagonal excluded)"
plant flash attention.cuh 's/if (tk <= tq \&\& tq < T) {/if (tk <= tq \&\& tq < T - 1) {/' "backward skips the last query"
plant colsum train_gpt2.cu 's/for (int k = 0; k < splits; k++) { t += partials/for (int k = 0; k + 1 < splits; k++) { t += partials/' \
    "column sums drop the last chunk"
plant colsum train_gpt2.cu 's/r_end = r_begin + chunk < N ? r_begin + chunk : N;/r_end = r_begin + chunk - 1 < N ? r_begin + chunk - 1 : N;/' \
    "column-sum chunk boundary off by one"
plant vec train_gpt2.cu '/^__global__ void gelu_kernel/,/^}/s/if (i >= npack) { return; }/if (i + 1 >= npack) { return; }/' \
    "GELU vector kernel skips the last vector"
plant vec train_gpt2.cu '/^__global__ void layernorm_forward_kernel/,/^}/s/store_pack<W>(o + i, ov);/if (i + W < C) { store_pack<W>(o + i, ov); }/' \
    "LayerNorm forward never writes the last vector of out"
plant vec siamese.cuh '/^__device__ void siamese_input_row/,/^}/s/store_pack<W>(u_out + o + i, uv);/if (i + W < C) { store_pack<W>(u_out + o + i, uv); }/' \
    "SiameseNorm input forward never writes the last vector of u"
plant vec siamese.cuh '/^__global__ void siamese_input_backward_kernel/,/^}/s/store_pack<W>(dx + o, dxv);/if (i + W < C) { store_pack<W>(dx + o, dxv); }/' \
    "SiameseNorm input backward never writes the last vector of dx"
plant vec train_gpt2.cu '/^__device__ __forceinline__ float2 ln_backward_means/,/^}/s/for (int e = 0; e < W; e++) {/for (int e = 0; e < W \&\& i + W < C; e++) {/' \
    "LayerNorm backward means leave the last vector out"
plant vec train_gpt2.cu '/^__global__ void layernorm_backward_kernel/,/^}/s/store_pack<W>(dinp + o, d);/if (i + W < C) { store_pack<W>(dinp + o, d); }/' \
    "LayerNorm backward never writes the last vector of dinp"
plant fold siamese.cuh '/^__global__ void siamese_update_input_forward_kernel/,/^}/s/(float)zv.v\[e\], c, /(float)zv.v[e], 1.0f, /' \
    "folded update forward drops the 1/c"
plant fold siamese.cuh '/^__global__ void siamese_update_input_forward_kernel/,/^}/s/store_pack<W>(y + o + i, yn);/store_pack<W>(y + o + i, yv);/' \
    "folded update forward leaves the block output out of Y"
plant fold siamese.cuh '/^__global__ void siamese_update_input_forward_kernel/,/^}/s/store_pack<W>(x + o + i, xn);/if (i + W < C) { store_pack<W>(x + o + i, xn); }/' \
    "folded update forward never writes the last vector of x"
plant fold siamese.cuh 's/siamese_update_dz(dxv.v\[e\], dyv.v\[e\], c_prev)/siamese_update_dz(dxv.v[e], dyv.v[e], 1.0f)/' \
    "folded update backward drops the 1/c"
plant fold train_gpt2.cu 's/siamese_input_backward(sf->dx, sf->dy, sx->dz, siamese_scale(L - 1)/siamese_input_backward(sf->dx, sf->dy, NULL, siamese_scale(L - 1)/' \
    "final merge backward does not write dz of the last sublayer"
plant lngrad train_gpt2.cu 's/r_end = r_begin + block_rows < N ? r_begin + block_rows : N;/r_end = r_begin + block_rows;/' \
    "LayerNorm backward: the last block of rows runs past N (a wrong row bound)"
plant classifier train_gpt2.cu 's/if (j \* VEC_X + e < V) { s += expf/if (j * VEC_X + e < V - 1) { s += expf/' \
    "one-pass classifier leaves the last real entry out of the sum"

[ $failed = 0 ] && echo "test-kernels: passed" || echo "test-kernels: FAILED"
exit $failed
