/*
siamese.cuh: the LayerNorms of train_gpt2.cu, plain and two-stream (SiameseNorm), and the row
machinery they share; the trainer includes it once floatX (bf16, or float in FP32) is defined.

SiameseNorm (dev/MODEL.md) keeps two residual streams, X (post-norm-like) and Y (pre-norm-like),
that share every block F (attention or MLP). Around each block, per row:

    input side      a = LN(x; lnx)              normalise X
                    r = a + LN(y; lny)          both streams meet
                    u = LN(r; ln)               the block input
    the block       z = F(u)                    matmuls, attention: the expensive part, run ONCE
    update side     x_next = a + z / c_l        X takes the update scaled by 1/c_l
                    y_next = y + z              Y takes it whole (the identity path)

and at the end the same input side merges the streams: h = LN(LN(x; lnfx) + LN(y; lnfy); lnf).
Backward, per row, with dx and dy holding dL/dx_next and dL/dy_next on entry:

    dz = dx_next / c + dy_next            (by the input backward after the sublayer, or the final merge's)
    ... the block's backward turns dz into du = dL/du ...
    dr = LN_back(du; r, ln)               the block-input LN
    da = dr + dx_next                     a feeds both r and x_next
    dy = dy_next + LN_back(dr; y, lny)    Y: identity path plus its LN
    dx = LN_back(da; x, lnx)              X: only through its LN

The input side is three LayerNorms and an add, memory-bound: one warp per row, the row in
registers; pre and post modes use the plain LayerNorm. Statistics and gradients are fp32, every sum
in an order fixed by N and C (no atomics); dev/cuda checks each kernel against a CPU reference.
*/
#ifndef SIAMESE_CUH
#define SIAMESE_CUH

#include <stdint.h>
#include <algorithm>
#include <initializer_list>
#include <cuda_runtime.h>
#include "common/utils.h"
#include "cuda_common.cuh"

static inline int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }
__device__ __forceinline__ int ceil_div_dev(int a, int b) { return (a + b - 1) / b; }

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) { v += __shfl_xor_sync(0xffffffffu, v, offset); }
    return v;
}

// Row kernels give each row to one warp; shuffles combine the lanes' partial sums. Width W = 1 (any C): lane i
// walks the columns i, i + 32, ...; W = VEC_X (where row_width allows): the 16-byte vectors i, i + 32, ....
template <typename T, int W>
struct alignas(W * sizeof(T) < 16 ? W * sizeof(T) : 16) Pack { T v[W]; };

// 16 bytes of floatX (8 bf16 or 4 fp32): the unit of the vectorised kernels, one load or store
#define VEC_X ((int)(16 / sizeof(floatX)))

template <int W, typename T>
__device__ __forceinline__ Pack<T, W> load_pack(const T* p) { return *(const Pack<T, W>*)p; }
template <int W, typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, W>& v) { *(Pack<T, W>*)p = v; }

// the width of a kernel over rows of C elements of the tensors p (NULL ones left out): VEC_X where
// C % VEC_X == 0 and every tensor is 16-byte aligned, else 1 (element-wise kernels: one row)
static int row_width(size_t C, std::initializer_list<const void*> p) {
    if (C % VEC_X != 0) { return 1; }
    for (const void* t : p) { if (t != NULL && (uintptr_t)t % 16 != 0) { return 1; } }
    return VEC_X;
}

// row kernel template K at width `width` (VEC_X or 1; its other template arguments follow)
#define ROW_KERNEL(width, K, ...) ((width) == VEC_X ? K<VEC_X, ##__VA_ARGS__> : K<1, ##__VA_ARGS__>)

#define ROW_WARPS 8  // warps per block of a row kernel (256 threads)

static inline int row_blocks(int N) { return ceil_div(N, ROW_WARPS); }

__device__ __forceinline__ int warp_row() { return blockIdx.x * ROW_WARPS + threadIdx.x / 32; }

// A row kernel keeps what it reads of a row in registers (HeldRow) for its later passes: a lane holds its vectors
// i = (lane + 32 k) W, k < K, of the first ROW_HELD_COLS columns (a whole row of GPT-2 124M or 350M), re-reading
// those past them at each pass; for_lane_vectors' constant trip count lets nvcc unroll it, h.get(k, i) a register.
#define ROW_HELD_COLS 1024

template <typename T, int W>
struct HeldRow {
    static constexpr int K = ROW_HELD_COLS / (32 * W);  // vectors held per lane
    Pack<T, W> v[K];
    const T* row;  // the row in memory, for the columns past the held ones

    // the lane's k-th vector, at column i: a register where held, else read from memory
    __device__ __forceinline__ Pack<T, W> get(int k, int i) const {
        return k < K ? v[k < K ? k : 0] : load_pack<W>(row + i);
    }
    // keeps p as the lane's k-th vector where it is held (the row in memory holds the rest)
    __device__ __forceinline__ void put(int k, const Pack<T, W>& p) { if (k < K) { v[k < K ? k : 0] = p; } }
};

// f(k, i) for each vector of the lane in a row of C columns: i = (lane + 32 k) W, in order
template <int W, typename F>
__device__ __forceinline__ void for_lane_vectors(int C, int lane, F f) {
    constexpr int K = ROW_HELD_COLS / (32 * W);
    for (int k = 0; k < K; k++) {
        int i = (lane + 32 * k) * W;
        if (i < C) { f(k, i); }
    }
    for (int i = (lane + 32 * K) * W; i < C; i += 32 * W) { f(K, i); }
}

// reads the lane's share of a row of C columns at `row` (one pass over memory)
template <typename T, int W>
__device__ __forceinline__ HeldRow<T, W> held_load(const T* row, int C, int lane) {
    HeldRow<T, W> h = {{}, row};
    for_lane_vectors<W>(C, lane, [&](int k, int i) { h.put(k, load_pack<W>(row + i)); });
    return h;
}

// ----------------------------------------------------------------------------
// LayerNorm over the C channels of a row: out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + 1e-5), in two passes
// (mean, then the variance around it), saved as one LnStats per row; the backward recomputes xhat from x.
struct alignas(8) LnStats { float mean, rstd; };

// mean and rstd of the held row `row` (every lane gets them), two passes over the registers; lane 0
// saves them at saved[row]. SAVED: read from there (-r 2's recompute rebuilds bit for bit).
template <int W, bool SAVED>
__device__ __forceinline__ LnStats ln_row_stats(const HeldRow<floatX, W>& h, LnStats* saved, int row, int C, int lane) {
    if (SAVED) { return saved[row]; }
    float sum = 0.0f;
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<floatX, W> v = h.get(k, i);
        for (int e = 0; e < W; e++) { sum += (float)v.v[e]; }
    });
    float mean = warp_sum(sum) / C;
    float sq = 0.0f;
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<floatX, W> v = h.get(k, i);
        for (int e = 0; e < W; e++) { float d = (float)v.v[e] - mean; sq += d * d; }
    });
    float rstd = rsqrtf(warp_sum(sq) / C + 1e-5f);
    if (lane == 0) { saved[row] = LnStats{mean, rstd}; }
    return LnStats{mean, rstd};
}

// out = LN of the held row x with statistics st, the lane's vectors
template <int W>
__device__ __forceinline__ void ln_row_out(floatX* out, const HeldRow<floatX, W>& x, LnStats st, const floatX* w,
                                           const floatX* b, int C, int lane) {
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<floatX, W> xv = x.get(k, i), wv = load_pack<W>(w + i), bv = load_pack<W>(b + i), ov;
        for (int e = 0; e < W; e++) {
            ov.v[e] = (floatX)(((float)xv.v[e] - st.mean) * st.rstd * (float)wv.v[e] + (float)bv.v[e]);
        }
        store_pack<W>(out + i, ov);
    });
}

// the row read once (held), out written once; SAVED: see ln_row_stats
template <int W, bool SAVED = false>
__global__ void layernorm_forward_kernel(floatX* out, LnStats* st, const floatX* inp, const floatX* w, const floatX* b,
                                         int N, int C) {
    int r = warp_row(), lane = threadIdx.x % 32;
    if (r >= N) { return; }
    HeldRow<floatX, W> x = held_load<floatX, W>(inp + (size_t)r * C, C, lane);
    ln_row_out<W>(out + (size_t)r * C, x, ln_row_stats<W, SAVED>(x, st, r, C, lane), w, b, C, lane);
}

static void layernorm_forward(floatX* out, LnStats* st, const floatX* inp, const floatX* w, const floatX* b, int N,
                              int C, bool saved = false) {
    int width = row_width(C, {out, inp, w, b});
    auto kernel = saved ? ROW_KERNEL(width, layernorm_forward_kernel, true)
                        : ROW_KERNEL(width, layernorm_forward_kernel);
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(out, st, inp, w, b, N, C);
    cudaCheckLaunch();
}

// Backward of one row. With g = w * dout and xhat as above:
//     dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
// ln_backward_means returns the two means from the held dout and x; every lane gets them.
struct LnBackMeans { float g, g_xhat; };  // mean(g), mean(g * xhat)

template <int W>
__device__ __forceinline__ LnBackMeans ln_backward_means(const HeldRow<float, W>& dout, const HeldRow<floatX, W>& x,
                                                    const floatX* w, LnStats st, int C, int lane) {
    float m1 = 0.0f, m2 = 0.0f;
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<float, W> dv = dout.get(k, i);
        Pack<floatX, W> xv = x.get(k, i), wv = load_pack<W>(w + i);
        for (int e = 0; e < W; e++) {
            float g = (float)wv.v[e] * dv.v[e];
            m1 += g;
            m2 += g * ((float)xv.v[e] - st.mean) * st.rstd;
        }
    });
    return LnBackMeans{warp_sum(m1) / C, warp_sum(m2) / C};
}

__device__ __forceinline__ float ln_backward_value(float dout, float x, float w, LnStats st, LnBackMeans means) {
    return (w * dout - means.g - (x - st.mean) * st.rstd * means.g_xhat) * st.rstd;
}

// ----------------------------------------------------------------------------
// Column sums: out[c] += sum over the N rows of in[r][c]. A block of 32 x 32 threads owns 32 columns of a range of
// rows, walked 32 apart (coalesced); each column's 32 partial sums are added in order through shared memory. One
// stage suits the few hundred rows of LayerNorm partial sums; a bias gradient's B * T rows would give too few
// blocks: column_grads sums column_splits(N) chunks into partials (splits, C), then those in a second stage.
#define COLUMN_TILE 32
#define COLUMN_MAX_SPLITS 32  // at most COLUMN_TILE: the second stage is one row per thread
#define COLUMN_CHUNK_ROWS 64
#define COLUMN_MAX_JOBS 6

// the outputs of one launch's jobs (at most COLUMN_MAX_JOBS), whose (N, C) inputs lie one after another
typedef struct { float* out[COLUMN_MAX_JOBS]; } ColumnOuts;

static int column_splits(int N) { return std::min(ceil_div(N, COLUMN_CHUNK_ROWS), COLUMN_MAX_SPLITS); }

// Device scratch for partial sums: column_grads' chunk sums (splits, C) and the LayerNorm backwards' block sums
// (n, blocks, C), each summed before the next kernel writes it; it grows, never shrinks; gpt2_free frees it.
static float* partials;
static size_t partials_floats;

static void partials_reserve(size_t floats) {
    if (floats <= partials_floats) { return; }
    cudaCheck(cudaFree(partials));
    partials = (float*)cuda_malloc_check(floats * sizeof(float), "partial sums");
    partials_floats = floats;
}

static void partials_check(size_t floats, const char* what) {
    if (floats > partials_floats) { fatal("%s: %zu partial sums, room for %zu", what, floats, partials_floats); }
}

static void partials_free(void) {
    cudaCheck(cudaFree(partials));
    partials = NULL;
    partials_floats = 0;
}

// job blockIdx.y (its input at in + blockIdx.y N C), rows chunk blockIdx.z of gridDim.z: one stage
// adds to out[job], a split writes partials[chunk][c]
template <typename Td>
__global__ void column_sums_kernel(ColumnOuts outs, const Td* in, int N, int C, float* partials) {
    int c = blockIdx.x * COLUMN_TILE + threadIdx.x, chunk = ceil_div_dev(N, gridDim.z);
    int r_begin = blockIdx.z * chunk, r_end = r_begin + chunk < N ? r_begin + chunk : N;
    in += (size_t)blockIdx.y * N * C;
    float sum = 0.0f;
    if (c < C) {
        for (int r = r_begin + threadIdx.y; r < r_end; r += COLUMN_TILE) { sum += (float)in[(size_t)r * C + c]; }
    }
    __shared__ float part[COLUMN_TILE][COLUMN_TILE + 1];
    part[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) { return; }
    float t = 0.0f;
    for (int k = 0; k < COLUMN_TILE; k++) { t += part[k][threadIdx.x]; }
    if (gridDim.z == 1) { outs.out[blockIdx.y][c] += t; } else { partials[(size_t)blockIdx.z * C + c] = t; }
}

template <typename Td>
static void column_sums(ColumnOuts outs, int njobs, const Td* in, int N, int C, int splits = 1) {
    dim3 grid(ceil_div(C, COLUMN_TILE), njobs, splits);
    column_sums_kernel<Td><<<grid, dim3(COLUMN_TILE, COLUMN_TILE)>>>(outs, in, N, C, partials);
    cudaCheckLaunch();
}

// out += the column sums of in (N, C), in an order fixed by N
template <typename Td>
static void column_grads(float* out, const Td* in, int N, int C) {
    int splits = column_splits(N);
    partials_check((size_t)splits * C, "column_grads");
    column_sums(ColumnOuts{{out}}, 1, in, N, C, splits);
    if (splits > 1) { column_sums(ColumnOuts{{out}}, 1, partials, splits, C); }
}

// ----------------------------------------------------------------------------
// The LayerNorm parameter gradients, dw[c] += sum_r dout[r][c] xhat[r][c] and db[c] += sum_r dout[r][c], summed per
// block of rows by the backward row kernels (LnRounds), then over the blocks (ln_backward_run), in an order fixed by N
// and C. One thread per W columns in step 2 and 512 blocks (ncu, H200, N 65536, C 768, bf16: 711 us, bound 418 us)
// left 160 of 256 threads idle, 5-way bank conflicts, 1.94 waves at 2 blocks per SM (127 registers). Here: groups over
// a round's rows, conflict-free sums, at most LN_GRAD_BLOCKS (256 of 256 rows at N 65536: one wave at 2 per SM of 132
// SMs; 4.7 MB of partials); 8-row rounds, as step 2 re-reads step 1's rows from L2 (siamese: 23 MB in 264 blocks).
#define LN_GRAD_BLOCKS 256
#define LN_ROUND_ROWS 8

// The rounds of one block, LN_ROUND_ROWS rows each (the last ones short), the n sums in dynamic shared memory:
//   1. per_row(row, slot), one warp per row (slot: its place in the round): the row's LN-backward means;
//   2. after a barrier, G = 256 / V groups (1 to LN_ROUND_ROWS) over the V = C / W vectors (item m = group V + v):
//      per_column(row, slot, v W, g) for the group's rows, slots group, group + G, ... in order: the input gradients,
//      and the parameter-gradient terms into g, then the group's sums (element e of sum q at sums[group n C + q C +
//      e V + v]: conflict-free); a second barrier. At the end, the block's partial rows: its groups' sums in order.
struct LnRounds {  // kernels and ln_backward_run take the rounds as a type (dev/cuda/ln_backward_cols.h: the former)
    static __host__ __device__ int groups(int C, int W) {  // no more groups than a round has rows
        return C / W >= 256 ? 1 : 256 / (C / W) < LN_ROUND_ROWS ? 256 / (C / W) : LN_ROUND_ROWS;
    }
    static int block_rows(int N) { return LN_ROUND_ROWS * ceil_div(N, LN_ROUND_ROWS * LN_GRAD_BLOCKS); }
    template <int W, int n, typename RowFn, typename ColumnFn>
    static __device__ __forceinline__ void run(float* partials, int N, int C, int block_rows, RowFn per_row,
                                               ColumnFn per_column) {
        extern __shared__ float sums[];  // zeroed here, added to only after the first round's barrier
        int V = C / W, G = groups(C, W);
        for (int j = threadIdx.x; j < G * n * C; j += blockDim.x) { sums[j] = 0.0f; }
        int r_begin = blockIdx.x * block_rows, r_end = r_begin + block_rows < N ? r_begin + block_rows : N;
        for (int base = r_begin; base < r_end; base += LN_ROUND_ROWS) {
            int rows = r_end - base < LN_ROUND_ROWS ? r_end - base : LN_ROUND_ROWS;
            for (int j = threadIdx.x / 32; j < rows; j += ROW_WARPS) { per_row(base + j, j); }
            __syncthreads();
            for (int m = threadIdx.x; m < G * V; m += blockDim.x) {
                float g[n][W] = {};  // this round's terms of the group's rows in these columns
                for (int j = m / V; j < rows; j += G) { per_column(base + j, j, m % V * W, g); }
                float* s = sums + (size_t)(m / V) * n * C + m % V;
                for (int k = 0; k < n * W; k++) { s[k * V] += g[k / W][k % W]; }  // sum q = k / W, element e = k % W
            }
            __syncthreads();
        }
        for (int j = threadIdx.x; j < n * C; j += blockDim.x) {
            float t = 0.0f;
            for (int group = 0; group < G; group++) { t += sums[(group * n + j / C) * C + j % C % W * V + j % C / W]; }
            partials[((size_t)(j / C) * gridDim.x + blockIdx.x) * C + j % C] = t;
        }
    }
};

// a LayerNorm backward kernel of width W with n sums over N rows of C columns in Rounds: launch(blocks, block_rows,
// smem) runs it (smem: the groups' sums, allowed above 48 KiB), then grads.out[q] += the column sums of the partials
template <typename Rounds, typename Kernel, typename Launch>
static void ln_backward_run(Kernel kernel, int W, ColumnOuts grads, int n, int N, int C, const char* what,
                            Launch launch) {
    int block_rows = Rounds::block_rows(N), blocks = ceil_div(N, block_rows);
    size_t smem = (size_t)Rounds::groups(C, W) * n * C * sizeof(float);
    partials_check((size_t)n * blocks * C, what);
    // the kernels' static row means (at most 6 floats per row of a round) count against the 48 KiB default too
    if (smem + 6 * sizeof(float) * LN_ROUND_ROWS > 48 * 1024 &&
        cudaFuncSetAttribute((const void*)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem) != cudaSuccess) {
        fatal("%s: C = %d needs %zu bytes of shared memory per block, more than this GPU allows", what, C, smem);
    }
    launch(blocks, block_rows, smem);
    cudaCheckLaunch();
    column_sums(grads, n, partials, blocks, C);
}

// The plain LayerNorm backward: dw, db += the parameter gradients; dinp = (accumulate 0) or += (1) dL/dinp, dinp may
// be dout (a thread reads its elements before it writes them); dinp_x, given, gets a floatX copy (a matmul's input).
template <int W, typename Rounds = LnRounds>
__global__ void layernorm_backward_kernel(float* dinp, floatX* dinp_x, float* partials, const float* dout,
                                          const floatX* inp, const floatX* w, const LnStats* st, int N, int C,
                                          int accumulate, int block_rows) {
    __shared__ LnBackMeans row_means[LN_ROUND_ROWS];  // step 1 -> step 2, per row of the round
    int lane = threadIdx.x % 32;
    Rounds::template run<W, 2>(partials, N, C, block_rows,
        [&](int row, int slot) {
            size_t o = (size_t)row * C;
            HeldRow<float, W> dv = held_load<float, W>(dout + o, C, lane);
            HeldRow<floatX, W> xv = held_load<floatX, W>(inp + o, C, lane);
            LnBackMeans means = ln_backward_means<W>(dv, xv, w, st[row], C, lane);
            if (lane == 0) { row_means[slot] = means; }
        },
        [&](int row, int slot, int i, float (&g)[2][W]) {  // g: dw, db
            size_t o = (size_t)row * C + i;
            LnStats s = st[row];
            Pack<float, W> dv = load_pack<W>(dout + o), d;
            Pack<floatX, W> xv = load_pack<W>(inp + o), wv = load_pack<W>(w + i), dx;
            for (int e = 0; e < W; e++) {
                d.v[e] = ln_backward_value(dv.v[e], (float)xv.v[e], (float)wv.v[e], s, row_means[slot]);
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
        });
}

template <typename Rounds = LnRounds>
static void layernorm_backward(float* dinp, floatX* dinp_x, float* dw, float* db, const float* dout, const floatX* inp,
                               const floatX* w, const LnStats* st, int N, int C, int accumulate) {
    int width = row_width(C, {dinp, dinp_x, dout, inp, w});
    auto kernel = ROW_KERNEL(width, layernorm_backward_kernel, Rounds);
    ln_backward_run<Rounds>(kernel, width, ColumnOuts{{dw, db}}, 2, N, C, __func__, [&](int nb, int rows, size_t sm) {
        kernel<<<nb, ROW_WARPS * 32, sm>>>(dinp, dinp_x, partials, dout, inp, w, st, N, C, accumulate, rows);
    });
}

// ----------------------------------------------------------------------------
// The two-stream kernels (the header above); the streams and a, r, u are floatX. Memory traffic: dev/cuda/README.md.

// the three LayerNorms of one siamese input side, as parameters (floatX) or gradients (float)
template <typename T>
struct SiameseNormsT {
    T *xw, *xb;  // LN of stream X (lnx1, lnx2 or lnfx)
    T *yw, *yb;  // LN of stream Y (lny1, lny2 or lnfy)
    T *w, *b;    // the LN that makes the block input (ln1, ln2 or lnf)
};
typedef SiameseNormsT<floatX> SiameseNorms;
typedef SiameseNormsT<float> SiameseNormGrads;

// the saved statistics, (N) pairs each: of LN(x), LN(y) and the LN that makes the block input
typedef struct { LnStats *x, *y, *ln; } SiameseStats;

// The input side, forward, for one row whose x and y the warp holds: a, r (held: its statistics are those of the stored
// values), u and the three LNs' statistics; a_out NULL: no a. SAVED: r, u rebuilt bit for bit (ln_row_stats).
template <int W, bool SAVED>
__device__ void siamese_input_row(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st,
                                  const HeldRow<floatX, W>& x, const HeldRow<floatX, W>& y, SiameseNorms p, int row,
                                  int C, int lane) {
    size_t o = (size_t)row * C;
    LnStats x_st = ln_row_stats<W, SAVED>(x, st.x, row, C, lane);
    LnStats y_st = ln_row_stats<W, SAVED>(y, st.y, row, C, lane);
    HeldRow<floatX, W> r = {{}, r_out + o};
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<floatX, W> xv = x.get(k, i), xw = load_pack<W>(p.xw + i), xb = load_pack<W>(p.xb + i);
        Pack<floatX, W> yv = y.get(k, i), yw = load_pack<W>(p.yw + i), yb = load_pack<W>(p.yb + i), av, rv;
        for (int e = 0; e < W; e++) {
            float a = ((float)xv.v[e] - x_st.mean) * x_st.rstd * (float)xw.v[e] + (float)xb.v[e];
            float ly = ((float)yv.v[e] - y_st.mean) * y_st.rstd * (float)yw.v[e] + (float)yb.v[e];
            av.v[e] = (floatX)a;
            rv.v[e] = (floatX)(a + ly);
        }
        if (a_out) { store_pack<W>(a_out + o + i, av); }
        store_pack<W>(r_out + o + i, rv);
        r.put(k, rv);
    });
    ln_row_out<W>(u_out + o, r, ln_row_stats<W, SAVED>(r, st.ln, row, C, lane), p.w, p.b, C, lane);
}

// The update side, x_next = a + z / c and y_next = y + z rounded to floatX as stored (y_next as residual_forward,
// -r 3's rebuild of Y, rounds it), and its backward for z (a's share of dx_next: siamese_input_backward)
__device__ __forceinline__ void siamese_update_value(float a, float y, float z, float c, floatX* x_next, floatX* y_next) {
    *x_next = (floatX)(a + z / c);
    *y_next = (floatX)(y + z);
}
__device__ __forceinline__ float siamese_update_dz(float dx_next, float dy_next, float c) { return dx_next / c + dy_next; }

// One warp per row. a_prev NULL: x and y read as stored (the first sublayer; always with SAVED, -r 2's recompute).
// Else the sublayer before's update folded in: x = a_prev + z / c, y = y_prev + z written once and held.
template <int W, bool SAVED = false>
__global__ void siamese_input_forward_kernel(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st, floatX* x,
                                             floatX* y, SiameseNorms p, int N, int C, const floatX* a_prev,
                                             const floatX* y_prev, const floatX* z, float c) {
    int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= N) { return; }
    size_t o = (size_t)row * C;
    HeldRow<floatX, W> xh = {{}, x + o}, yh = {{}, y + o};
    if (SAVED || a_prev == NULL) {
        xh = held_load<floatX, W>(x + o, C, lane);
        yh = held_load<floatX, W>(y + o, C, lane);
    } else {
        for_lane_vectors<W>(C, lane, [&](int k, int i) {
            Pack<floatX, W> av = load_pack<W>(a_prev + o + i), yv = load_pack<W>(y_prev + o + i);
            Pack<floatX, W> zv = load_pack<W>(z + o + i), xn, yn;
            for (int e = 0; e < W; e++) {
                siamese_update_value((float)av.v[e], (float)yv.v[e], (float)zv.v[e], c, &xn.v[e], &yn.v[e]);
            }
            store_pack<W>(x + o + i, xn);
            store_pack<W>(y + o + i, yn);
            xh.put(k, xn);
            yh.put(k, yn);
        });
    }
    siamese_input_row<W, SAVED>(a_out, r_out, u_out, st, xh, yh, p, row, C, lane);
}

// the kernel above: a_prev, y_prev, z and c are the sublayer before's a, y, output and scale; saved: -r 2's recompute
static void siamese_input_forward(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st, floatX* x, floatX* y,
                                  SiameseNorms p, int N, int C, bool saved = false, const floatX* a_prev = NULL,
                                  const floatX* y_prev = NULL, const floatX* z = NULL, float c = 1.0f) {
    int width = row_width(C, {a_out, r_out, u_out, x, y, p.xw, p.xb, p.yw, p.yb, p.w, p.b, a_prev, y_prev, z});
    auto kernel = saved ? ROW_KERNEL(width, siamese_input_forward_kernel, true)
                        : ROW_KERNEL(width, siamese_input_forward_kernel);
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(a_out, r_out, u_out, st, x, y, p, N, C, a_prev, y_prev, z, c);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// The input side, backward. On entry dx = dL/dx_next and dy = dL/dy_next where streams_in is 1 (at the final merge,
// 0: outputs only); du = dL/du. On exit dx = dL/dx, dy = dL/dy. In the rounds (LnRounds):
//   step 1, one warp per row: the means of the three LN backwards: of the block-input LN from du and r (held), then,
//     from dr and da, those of LN_back(dr; y) and LN_back(da; x);
//   step 2, groups of threads over columns: per row, dr and da again (a few flops; storing them would cost two fp32
//     tensors written and read back), dy, dx, the six parameter-gradient terms and, given dz_prev, the update backward
//     of the sublayer before, siamese_update_dz(dx, dy, c_prev).

// the six sums of an input side, in the order of SiameseNormsT: (xw, xb, yw, yb, w, b)
#define SIAMESE_SUMS 6

// what step 2 needs of a row besides its elements: the two means of each LN backward
typedef struct { LnBackMeans ln, y, x; } SiameseRowMeans;

template <int W, typename Rounds = LnRounds>
__global__ void siamese_input_backward_kernel(float* dx, float* dy, floatX* dz_prev, float c_prev, int streams_in,
                                              float* partials, const float* du, SiameseNorms p, SiameseStats st,
                                              const floatX* x, const floatX* y, const floatX* r, int N, int C,
                                              int block_rows) {
    __shared__ SiameseRowMeans row_means[LN_ROUND_ROWS];  // step 1 -> step 2, per row of the round
    int lane = threadIdx.x % 32;
    Rounds::template run<W, SIAMESE_SUMS>(partials, N, C, block_rows,
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
        [&](int row, int slot, int i, float (&g)[SIAMESE_SUMS][W]) {
            size_t o = (size_t)row * C + i;
            SiameseRowMeans means = row_means[slot];
            Pack<floatX, W> wv = load_pack<W>(p.w + i), yw = load_pack<W>(p.yw + i), xw = load_pack<W>(p.xw + i);
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
        });
}

// the kernel above, its sums added into the six parameter gradients g (dz_prev: NULL for the first sublayer)
template <typename Rounds = LnRounds>
static void siamese_input_backward(float* dx, float* dy, floatX* dz_prev, float c_prev, int streams_in, const float* du,
                                   SiameseNormGrads g, SiameseNorms p, SiameseStats st, const floatX* x,
                                   const floatX* y, const floatX* r, int N, int C) {
    int width = row_width(C, {dx, dy, dz_prev, du, x, y, r, p.xw, p.xb, p.yw, p.yb, p.w, p.b});
    auto kernel = ROW_KERNEL(width, siamese_input_backward_kernel, Rounds);
    ColumnOuts grads = {{g.xw, g.xb, g.yw, g.yb, g.w, g.b}};
    ln_backward_run<Rounds>(kernel, width, grads, SIAMESE_SUMS, N, C, __func__, [&](int nb, int rows, size_t sm) {
        kernel<<<nb, ROW_WARPS * 32, sm>>>(dx, dy, dz_prev, c_prev, streams_in, partials, du, p, st, x, y, r, N, C,
                                           rows);
    });
}

#endif  // SIAMESE_CUH
