/*
dev/cuda/ln_backward_cols.h: the rounds of the LayerNorm backward row kernels with one thread per W columns in step 2
(LnRoundsCols), which the trainer's rounds (siamese.cuh LnRounds: groups of threads over a round's rows, each group
with its own sums) replaced: layernorm.cu version 2 and siamese_input_backward.cu version 4 run the trainer's kernels
and host functions with these rounds (layernorm_backward<LnRoundsCols>, siamese_input_backward<LnRoundsCols>).
Included after trainer.h. Per round of ROW_WARPS = 8 rows: one warp per row takes the row's means, a barrier, then
each thread owning W columns (C / W threads of the block, 96 of 256 at C 768 and W 8) walks the 8 rows in order and
adds its terms to sums[q C + i + e] (consecutive threads 8 words apart: bank conflicts), a second barrier; at most
512 blocks. dx, dy, dz_prev, dinp and dinp_x are computed by the same code as the trainer's: bit-identical (checked).
*/
#ifndef DEV_CUDA_LN_BACKWARD_COLS_H
#define DEV_CUDA_LN_BACKWARD_COLS_H

#define LN_GRAD_BLOCKS_COLS 512
static_assert(ROW_WARPS <= LN_ROUND_ROWS, "the kernels' row_means hold LN_ROUND_ROWS rows of a round");

struct LnRoundsCols {
    static __host__ __device__ int groups(int, int) { return 1; }  // the n sums (n, C), once
    static int block_rows(int N) { return ROW_WARPS * ceil_div(N, ROW_WARPS * LN_GRAD_BLOCKS_COLS); }

    template <int W, int n, typename RowFn, typename ColumnFn>
    static __device__ __forceinline__ void run(float* partials, int N, int C, int block_rows, RowFn per_row,
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
                for (int j = 0; j < rows; j++) { per_column(base + j, j, i, g); }
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
};

// the partial rows of its up to 512 blocks, for rows of up to C columns (after trainer_partials)
static inline void cols_partials(int C) { partials_reserve((size_t)LN_GRAD_BLOCKS_COLS * SIAMESE_SUMS * C); }

#endif  // DEV_CUDA_LN_BACKWARD_COLS_H
