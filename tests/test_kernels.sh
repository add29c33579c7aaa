#!/usr/bin/env bash
# tests/test_kernels.sh: the CUDA trainer's kernels, executed on the CPU through the execution
# layer (tests/cudacpu), beyond the stored shapes that test-cudacpu runs:
#   1. two shapes the stored dumps lack, written by the CPU trainer (./test_gpt2 --write), where
#      test_gpt2cu checks every mode (FP32 build; the BF16 build too where the layer has WMMA):
#      L 2, C 128, NH 2 (head size 64), V 301, T 77 (not a multiple of the 64-row attention tile),
#      B 2 (154 rows: three chunks of the two-stage column sums, the last one short; 20 blocks of the
#      LayerNorm backwards, the last of 2 rows); and
#      attention's shape: L 1, C 96, NH 2 (head size 48, padded to 64), V 97, T 144 (three query
#      and key tiles of 64, 64 and 16 rows: full, partial and skipped 16-row sub-tiles), B 1;
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
ATT_SHAPE=1,96,2,97,144,1

for s in ref:$SHAPE att:$ATT_SHAPE; do
    ./test_gpt2 --write "$work/${s%%:*}" "${s#*:}" > "$work/write.log" 2>&1 || { cat "$work/write.log"; exit 1; }
done

# check NAME BINARY DUMPS: test_gpt2cu on the dumps must pass
check() {
    local start=$SECONDS
    if "$2" "$3" > "$work/log" 2>&1 && grep -q '^all checks passed' "$work/log"; then
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
    check "test_gpt2cu ${b%%:*} at $SHAPE" "${b#*:}" "$work/ref"
    check "test_gpt2cu ${b%%:*} at $ATT_SHAPE" "${b#*:}" "$work/att"
done

# plant KERNEL FILE 'sed expression' DESCRIPTION [DUMPS [SCHEDULE]]: the planted copy must fail a
# check (FP32 build; by default one layer and one sequence of 77 tokens, to keep it short: still a
# tail tile, two column-sum chunks and a last LayerNorm-backward block of 5 rows; attention's plants run on its shape above). KERNEL names the
# kernel family in the report; SCHEDULE is the layer's thread schedule (tests/cudacpu/README.md).
./test_gpt2 --write "$work/ref1" 1,128,2,301,77,1 > "$work/write.log" 2>&1 || { cat "$work/write.log"; exit 1; }
mkdir -p "$work/base"  # the sources, built once; each plant starts from a copy (only its file rebuilds)
git ls-files -z | xargs -0 cp --parents -t "$work/base"
make --no-print-directory -C "$work/base" tests/bin/test_gpt2cu_fp32_cpu WERROR=0 > "$work/build.log" 2>&1 ||
    { cat "$work/build.log"; echo "FAIL the unplanted copy does not build"; exit 1; }
plant() {
    local kernel=$1 file=$2 expr=$3 what=$4 ref=${5:-$work/ref1} schedule=${6:-forward}
    rm -rf "$work/src" && cp -a "$work/base" "$work/src"
    sleep 1  # a newer time stamp than the copied build's
    sed -i -e "$expr" "$work/src/$file"
    if cmp -s "$file" "$work/src/$file"; then echo "FAIL plant '$what': the expression changed nothing in $file"; failed=1; return; fi
    if ! make --no-print-directory -C "$work/src" tests/bin/test_gpt2cu_fp32_cpu WERROR=0 > "$work/build.log" 2>&1; then
        cat "$work/build.log"; echo "FAIL plant '$what': the planted copy does not build"; failed=1; return
    fi
    CUDACPU_SCHEDULE=$schedule "$work/src/tests/bin/test_gpt2cu_fp32_cpu" "$ref" > "$work/log" 2>&1
    if grep -q '^[0-9]* checks FAILED' "$work/log"; then
        echo "ok   plant '$what' ($kernel, schedule $schedule) fails: $(grep -m1 'FAIL' "$work/log" | sed 's/^ *//')"
    else
        cat "$work/log"; echo "FAIL plant '$what' ($kernel): test_gpt2cu did not fail a check"; failed=1
    fi
}
# attention (attention.cuh), on its shape: in the forward and both backward kernels a barrier, a
# mask and bookkeeping (the online softmax; the query-step buffers; the key bound, a row's lse);
# the barriers under `warp`: the shuffles of the tile products keep lock-step schedules in step
plant flash attention.cuh 's/        __syncthreads();  \/\/ the next tile is in place; this one.s buffer is free/        \/\/ (barrier planted away)/' \
    "forward: no barrier between a key tile's math and the next tile's buffer" "$work/att" warp
plant flash attention.cuh 's/if (k0 + 8 \* n + 2 \* j + e % 2 > t + 8 \* (e \/ 2))/if (k0 + 8 * n + 2 * j + e % 2 >= t + 8 * (e \/ 2))/' \
    "forward mask off by one (diagonal excluded)" "$work/att"
plant flash attention.cuh 's/l_run\[r\] \*= corr;/l_run[r] *= 1.0f;/' "forward running sum not rescaled" "$work/att"
plant flash attention.cuh 's/return diag \&\& key + 8 \* r > q0 + jq + col;/return diag \&\& key + 8 * r >= q0 + jq + col;/' \
    "dK/dV kernel mask off by one (diagonal excluded)" "$work/att"
plant flash attention.cuh 's/const bool diag = k0 + r0 + 15 > q0 + jq;/const bool diag = k0 + r0 > q0 + jq;/' \
    "dK/dV kernel leaves the mask off the 16 queries that start on the warp's first key" "$work/att"
plant flash attention.cuh 's/if (more) { next.put(QD, ST, u ^ 1, /if (more) { next.put(QD, ST, u, /' \
    "dK/dV kernel prefetches into the query step's buffer in use" "$work/att"
plant flash attention.cuh 's/        __syncthreads();  \/\/ the next step is in place; this one.s buffer is free/        \/\/ (barrier planted away)/' \
    "dK/dV kernel: no barrier between a query step's math and the next step's buffer" "$work/att" warp
plant flash attention.cuh 's/return diag \&\& k0 + kk + col > t + 8 \* r;/return diag \&\& k0 + kk + col >= t + 8 * r;/' \
    "dQ kernel mask off by one (diagonal excluded)" "$work/att"
plant flash attention.cuh 's/lse2_t = lse2\[r\];/lse2_t = lse2[0];/' "dQ kernel: row g's lse for row g + 8 too" "$work/att"
plant flash attention.cuh 's/k0 + kk <= q0 + r0 + 15; kk += 16)/k0 + kk < q0 + r0; kk += 16)/' \
    "dQ kernel stops before the keys of the warp's diagonal" "$work/att"
plant flash attention.cuh 's/        __syncthreads();  \/\/ the next (k, v) tiles are in place; this tile.s buffer is free/        \/\/ (barrier planted away)/' \
    "dQ kernel: no barrier between a key tile's math and the next tile's buffer" "$work/att" warp
plant flash attention.cuh 's/da\[i\].x\[k\] = (floatX)(p \* (dp\[n\]\[e\] - D) \* scale);/da[i].x[k] = (floatX)(p * dp[n][e] * scale);/' \
    "backward dS without the row term D (both kernels)" "$work/att"
plant colsum siamese.cuh 's/1, partials, splits, C); }/1, partials, splits - 1, C); }/' \
    "column sums drop the last chunk"
plant colsum siamese.cuh 's/r_end = r_begin + chunk < N ? r_begin + chunk : N;/r_end = r_begin + chunk - 1 < N ? r_begin + chunk - 1 : N;/' \
    "column-sum chunk boundary off by one"
plant vec train_gpt2.cu '/^__global__ void gelu_kernel/,/^}/s/if (i >= npack) { return; }/if (i + 1 >= npack) { return; }/' \
    "GELU vector kernel skips the last vector"
plant vec siamese.cuh '/^__device__ __forceinline__ void ln_row_out/,/^}/s/store_pack<W>(out + i, ov);/if (i + W < C) { store_pack<W>(out + i, ov); }/' \
    "LayerNorm forward (plain, and u of the SiameseNorm input side) never writes the last vector"
plant vec siamese.cuh '/^__device__ void siamese_input_row/,/^}/s/store_pack<W>(r_out + o + i, rv);/if (i + W < C) { store_pack<W>(r_out + o + i, rv); }/' \
    "SiameseNorm input forward never writes the last vector of r"
plant vec siamese.cuh '/^__global__ void siamese_input_backward_kernel/,/^}/s/store_pack<W>(dx + o, dxv);/if (i + W < C) { store_pack<W>(dx + o, dxv); }/' \
    "SiameseNorm input backward never writes the last vector of dx"
plant vec siamese.cuh '/^__device__ __forceinline__ LnBackMeans ln_backward_means/,/^}/s/for (int e = 0; e < W; e++) {/for (int e = 0; e < W \&\& i + W < C; e++) {/' \
    "LayerNorm backward means leave the last vector out"
plant vec siamese.cuh '/^__global__ void layernorm_backward_kernel/,/^}/s/store_pack<W>(dinp + o, d);/if (i + W < C) { store_pack<W>(dinp + o, d); }/' \
    "LayerNorm backward never writes the last vector of dinp"
plant fold siamese.cuh '/^__global__ void siamese_input_forward_kernel/,/^}/s/(float)zv.v\[e\], c, /(float)zv.v[e], 1.0f, /' \
    "folded update forward drops the 1/c"
plant fold siamese.cuh '/^__global__ void siamese_input_forward_kernel/,/^}/s/store_pack<W>(y + o + i, yn);/store_pack<W>(y + o + i, yv);/' \
    "folded update forward leaves the block output out of Y"
plant fold siamese.cuh '/^__global__ void siamese_input_forward_kernel/,/^}/s/store_pack<W>(x + o + i, xn);/if (i + W < C) { store_pack<W>(x + o + i, xn); }/' \
    "folded update forward never writes the last vector of x"
plant fold siamese.cuh 's/siamese_update_dz(dxv.v\[e\], dyv.v\[e\], c_prev)/siamese_update_dz(dxv.v[e], dyv.v[e], 1.0f)/' \
    "folded update backward drops the 1/c"
plant fold train_gpt2.cu 's/siamese_input_backward(sc->dx, sc->dy, sc->dz, siamese_scale(L - 1)/siamese_input_backward(sc->dx, sc->dy, NULL, siamese_scale(L - 1)/' \
    "final merge backward does not write dz of the last sublayer"
plant lngrad siamese.cuh 's/r_end = r_begin + block_rows < N ? r_begin + block_rows : N;/r_end = r_begin + block_rows;/' \
    "LayerNorm backward: the last block of rows runs past N (a wrong row bound)"
plant lngrad siamese.cuh '/per_row(base + j, j); }/{n;s/__syncthreads();/\/\/ (barrier planted away)/}' \
    "LayerNorm backward: no barrier between the rows' means and the columns that read them" "$work/ref1" warp
plant lngrad siamese.cuh 's/for (int j = m \/ V; j < rows; j += G)/for (int j = m \/ V; j < rows - 1; j += G)/' \
    "LayerNorm backward: step 2 leaves the last row of each round out (a wrong row bound)"
plant lngrad siamese.cuh 's/for (int j = m \/ V; j < rows; j += G)/for (int j = 0; j < rows; j += G)/' \
    "LayerNorm backward: every group takes the rows of group 0 (rows added twice, others skipped)"
plant lngrad siamese.cuh 's/for (int group = 0; group < G; group++)/for (int group = 1; group < G; group++)/' \
    "LayerNorm backward: the block's partial sums leave group 0's sums out"
plant lngrad siamese.cuh 's/j % C % W \* V + j % C \/ W\]/j % C]/' \
    "LayerNorm backward: the partial sums read the groups' sums in the wrong layout"
plant classifier train_gpt2.cu 's/g.v\[e\] = (floatX)(j \* CLASSIFIER_W + e == target ? d - dloss : d);/g.v[e] = (floatX)d;/' \
    "fused classifier leaves the one-hot out of dlogits"

[ $failed = 0 ] && echo "test-kernels: passed" || echo "test-kernels: FAILED"
exit $failed
