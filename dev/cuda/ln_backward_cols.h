/*
dev/cuda/ln_backward_cols.h: the LayerNorm backward row kernels with one thread per W columns in step 2, plain
(layernorm.cu version 2) and SiameseNorm input side (siamese_input_backward.cu version 4), for the experiments that
check and time them beside the trainer's (siamese.cuh ln_backward_rounds: groups of threads over the rows of a round,
each group with its own sums). Included after trainer.h: it uses the trainer's helpers (Pack, HeldRow, ln_backward_means,
ln_backward_value, column_sums, partials, ...). Per round: one warp per row takes the row's means, a barrier, then
each thread owning W columns (C / W threads of the block, 96 of 256 at C 768 and W 8) walks the 8 rows in order
and adds its terms to sums[q C + i + e] (consecutive threads 8 words apart: bank conflicts), a second barrier.
At most LN_GRAD_BLOCKS_COLS blocks; the block's partial rows are then added by the trainer's column_sums. dx, dy,
dz_prev, dinp and dinp_x are computed exactly as in the trainer's kernels: bit-identical (the experiments check).
*/
#ifndef DEV_CUDA_LN_BACKWARD_COLS_H
#define DEV_CUDA_LN_BACKWARD_COLS_H

#define LN_GRAD_BLOCKS_COLS 512

// The rounds of one block, ROW_WARPS rows each, with its n running sums (n, C) in dynamic shared memory:
//   1. per_row(row, slot), one warp per row (slot: its place in the round): the row's LN-backward means;
//   2. after a barrier, per_column(base, rows, i, g) for each vector i of W columns the thread owns (i = (threadIdx.x
//      + 256 k) W): for the rows base .. base + rows - 1 in order, the input gradients, and the parameter-gradient
//      terms into g, which the sums take; a second barrier keeps the next per_row from overwriting what it reads.
// At the end each thread writes its columns of the sums as the block's partial rows, (n, blocks, C).
template <int W, int n, typename RowFn, typename ColumnFn>
__device__ __forceinline__ void ln_backward_rounds_cols(float* partials, int N, int C, int block_rows, RowFn per_row,
                                                   ColumnFn per_column) {
    extern __shared__ float sums[];  // zeroed here, added to only after the first round's barrier
    for (int j = threadIdx.x; j < n * C; j += blockDim.x) { sums[j] = 0.0f; }
    int r_begin = blockIdx.x * block_rows, r_end = r_begin + block_rows < N ? r_begin + block_rows : N;
    int warp = threadIdx.x / 32;
    for (int base = r_begin; base < r_end; base += ROW_WARPS) {
        if (base + warp < r_end) { per_row(base + warp, warp); }
        __syncthreads();
        int rows = r_end - base < ROW_WARPS ? r_end - base : ROW_WARPS;
        for (int i = threadIdx.x * W; i < C; i += blockDim.x * W) {
            float g[n][W] = {};  // this round's terms in these columns
            per_column(base, rows, i, g);
            for (int q = 0; q < n; q++) {
                for (int e = 0; e < W; e++) { sums[q * C + i + e] += g[q][e]; }
            }
        }
        __syncthreads();
    }
    for (int i = threadIdx.x * W; i < C; i += blockDim.x * W) {
        for (int q = 0; q < n; q++) {
            float* p = partials + ((size_t)q * gridDim.x + blockIdx.x) * C + i;
            for (int e = 0; e < W; e++) { p[e] = sums[q * C + i + e]; }
        }
    }
}

// a LayerNorm backward kernel with n sums over N rows of C columns: launch(blocks, block_rows, smem) runs it (smem,
// its sums' n * C floats, allowed above 48 KiB), then grads.out[q] += the column sums of the blocks' rows of sum q
template <typename Kernel, typename Launch>
static void ln_backward_run_cols(Kernel kernel, ColumnOuts grads, int n, int N, int C, const char* what, Launch launch) {
    // rows per block: ROW_WARPS (one round) up to N = ROW_WARPS * LN_GRAD_BLOCKS_COLS, then more rounds
    int block_rows = ROW_WARPS * ceil_div(N, ROW_WARPS * LN_GRAD_BLOCKS_COLS), blocks = ceil_div(N, block_rows);
    size_t smem = (size_t)n * C * sizeof(float);
    partials_reserve((size_t)n * blocks * C);
    if (smem > 48 * 1024 && cudaFuncSetAttribute((const void*)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)smem) != cudaSuccess) {
        fatal("%s: C = %d needs %zu bytes of shared memory per block, more than this GPU allows", what, C, smem);
    }
    launch(blocks, block_rows, smem);
    cudaCheckLaunch();
    column_sums(grads, n, partials, blocks, C);
}

template <int W>
__global__ void layernorm_backward_cols_kernel(float* dinp, floatX* dinp_x, float* partials, const float* dout,
                                          const floatX* inp, const floatX* w, const LnStats* st, int N, int C,
                                          int block_rows, int accumulate) {
    __shared__ LnBackMeans row_means[ROW_WARPS];  // step 1 -> step 2, per row of the round
    int lane = threadIdx.x % 32;
    ln_backward_rounds_cols<W, 2>(partials, N, C, block_rows,
        [&](int row, int slot) {
            size_t o = (size_t)row * C;
            HeldRow<float, W> dv = held_load<float, W>(dout + o, C, lane);
            HeldRow<floatX, W> xv = held_load<floatX, W>(inp + o, C, lane);
            LnBackMeans means = ln_backward_means<W>(dv, xv, w, st[row], C, lane);
            if (lane == 0) { row_means[slot] = means; }
        },
        [&](int base, int rows, int i, float (&g)[2][W]) {  // g: dw, db
            Pack<floatX, W> wv = load_pack<W>(w + i);
            for (int j = 0; j < rows; j++) {
                int row = base + j;
                size_t o = (size_t)row * C + i;
                LnStats s = st[row];
                Pack<float, W> dv = load_pack<W>(dout + o), d;
                Pack<floatX, W> xv = load_pack<W>(inp + o), dx;
                for (int e = 0; e < W; e++) {
                    d.v[e] = ln_backward_value(dv.v[e], (float)xv.v[e], (float)wv.v[e], s, row_means[j]);
                    g[0][e] += dv.v[e] * (((float)xv.v[e] - s.mean) * s.rstd);
                    g[1][e] += dv.v[e];
                }
                if (accumulate) {
                    Pack<float, W> prev = load_pack<W>(dinp + o);
                    for (int e = 0; e < W; e++) { d.v[e] += prev.v[e]; }
                }
                store_pack<W>(dinp + o, d);
                if (dinp_x) {
                    for (int e = 0; e < W; e++) { dx.v[e] = (floatX)d.v[e]; }
                    store_pack<W>(dinp_x + o, dx);
                }
            }
        });
}

static void layernorm_backward_cols(float* dinp, floatX* dinp_x, float* dw, float* db, const float* dout,
                                  const floatX* inp, const floatX* w, const LnStats* st, int N, int C, int accumulate) {
    auto kernel = ROW_KERNEL(row_width(C, {dinp, dinp_x, dout, inp, w}), layernorm_backward_cols_kernel);
    ln_backward_run_cols(kernel, ColumnOuts{{dw, db}}, 2, N, C, __func__, [&](int blocks, int rows, size_t smem) {
        kernel<<<blocks, ROW_WARPS * 32, smem>>>(dinp, dinp_x, partials, dout, inp, w, st, N, C, rows, accumulate);
    });
}

template <int W>
__global__ void siamese_input_backward_cols_kernel(float* dx, float* dy, floatX* dz_prev, float c_prev, int streams_in,
                                              float* partials, const float* du, SiameseNorms p, SiameseStats st,
                                              const floatX* x, const floatX* y, const floatX* r, int N, int C,
                                              int block_rows) {
    __shared__ SiameseRowMeans row_means[ROW_WARPS];  // step 1 -> step 2, per row of the round
    int lane = threadIdx.x % 32;
    ln_backward_rounds_cols<W, SIAMESE_SUMS>(partials, N, C, block_rows,
        [&](int row, int slot) {
            size_t o = (size_t)row * C;
            LnStats ls = st.ln[row], ys = st.y[row], xs = st.x[row];
            HeldRow<float, W> g = held_load<float, W>(du + o, C, lane);
            HeldRow<floatX, W> rh = held_load<floatX, W>(r + o, C, lane);
            LnBackMeans ln_means = ln_backward_means<W>(g, rh, p.w, ls, C, lane);
            float y1 = 0.0f, y2 = 0.0f, x1 = 0.0f, x2 = 0.0f;
            for_lane_vectors<W>(C, lane, [&](int k, int i) {
                Pack<float, W> duv = g.get(k, i), dxn = {};
                Pack<floatX, W> rv = rh.get(k, i), wv = load_pack<W>(p.w + i);
                Pack<floatX, W> xv = load_pack<W>(x + o + i), xw = load_pack<W>(p.xw + i);
                Pack<floatX, W> yv = load_pack<W>(y + o + i), yw = load_pack<W>(p.yw + i);
                if (streams_in) { dxn = load_pack<W>(dx + o + i); }
                for (int e = 0; e < W; e++) {
                    float dr = ln_backward_value(duv.v[e], (float)rv.v[e], (float)wv.v[e], ls, ln_means);
                    float da = dr + dxn.v[e];
                    float gy = (float)yw.v[e] * dr, gx = (float)xw.v[e] * da;
                    y1 += gy;
                    y2 += gy * ((float)yv.v[e] - ys.mean) * ys.rstd;
                    x1 += gx;
                    x2 += gx * ((float)xv.v[e] - xs.mean) * xs.rstd;
                }
            });
            SiameseRowMeans means = {ln_means, LnBackMeans{warp_sum(y1) / C, warp_sum(y2) / C},
                                     LnBackMeans{warp_sum(x1) / C, warp_sum(x2) / C}};
            if (lane == 0) { row_means[slot] = means; }
        },
        [&](int base, int rows, int i, float (&g)[SIAMESE_SUMS][W]) {
            Pack<floatX, W> wv = load_pack<W>(p.w + i), yw = load_pack<W>(p.yw + i), xw = load_pack<W>(p.xw + i);
            for (int j = 0; j < rows; j++) {
                int row = base + j;
                size_t o = (size_t)row * C + i;
                SiameseRowMeans means = row_means[j];
                LnStats ls = st.ln[row], ys = st.y[row], xs = st.x[row];
                Pack<float, W> duv = load_pack<W>(du + o), dxv = {}, dyv = {};
                Pack<floatX, W> rv = load_pack<W>(r + o), xv = load_pack<W>(x + o), yv = load_pack<W>(y + o), dz;
                if (streams_in) {
                    dxv = load_pack<W>(dx + o);
                    dyv = load_pack<W>(dy + o);
                }
                for (int e = 0; e < W; e++) {
                    float dr = ln_backward_value(duv.v[e], (float)rv.v[e], (float)wv.v[e], ls, means.ln);
                    float da = dr + dxv.v[e];
                    g[0][e] += da * (((float)xv.v[e] - xs.mean) * xs.rstd);  // lnx: da xhat, da
                    g[1][e] += da;
                    g[2][e] += dr * (((float)yv.v[e] - ys.mean) * ys.rstd);  // lny: dr yhat, dr
                    g[3][e] += dr;
                    g[4][e] += duv.v[e] * (((float)rv.v[e] - ls.mean) * ls.rstd);  // ln: du rhat, du
                    g[5][e] += duv.v[e];
                    dyv.v[e] += ln_backward_value(dr, (float)yv.v[e], (float)yw.v[e], ys, means.y);
                    dxv.v[e] = ln_backward_value(da, (float)xv.v[e], (float)xw.v[e], xs, means.x);
                }
                store_pack<W>(dy + o, dyv);
                store_pack<W>(dx + o, dxv);
                if (dz_prev) {
                    for (int e = 0; e < W; e++) { dz.v[e] = (floatX)siamese_update_dz(dxv.v[e], dyv.v[e], c_prev); }
                    store_pack<W>(dz_prev + o, dz);
                }
            }
        });
}

// the kernel above, its sums added into the six parameter gradients g (dz_prev: NULL for the first sublayer)
static void siamese_input_backward_cols(float* dx, float* dy, floatX* dz_prev, float c_prev, int streams_in,
                                      const float* du, SiameseNormGrads g, SiameseNorms p, SiameseStats st,
                                      const floatX* x, const floatX* y, const floatX* r, int N, int C) {
    int width = row_width(C, {dx, dy, dz_prev, du, x, y, r, p.xw, p.xb, p.yw, p.yb, p.w, p.b});
    auto kernel = ROW_KERNEL(width, siamese_input_backward_cols_kernel);
    ColumnOuts grads = {{g.xw, g.xb, g.yw, g.yb, g.w, g.b}};
    ln_backward_run_cols(kernel, grads, SIAMESE_SUMS, N, C, __func__, [&](int blocks, int rows, size_t smem) {
        kernel<<<blocks, ROW_WARPS * 32, smem>>>(dx, dy, dz_prev, c_prev, streams_in, partials, du, p, st, x, y, r,
                                                 N, C, rows);
    });
}

#endif  // DEV_CUDA_LN_BACKWARD_COLS_H
