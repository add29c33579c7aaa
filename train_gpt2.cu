/*
train_gpt2.cu: SiameseNorm GPT-2 on one NVIDIA GPU, in mixed precision.

What this trains. The same model as train_gpt2.c (read its header and dev/MODEL.md first): a
GPT-2 whose residual stream is wired as pre-norm, post-norm or SiameseNorm (two streams X and Y
that share every attention and MLP block). This file is the GPU version of that CPU reference,
with the same structure, the same command line, the same checkpoints and the same step line
(plus MFU). Flash attention is a chapter of its own, attention.cuh, included where the forward
pass first needs it.

Precision (the default BF16 build):
  - parameters: fp32 MASTER weights (what AdamW updates and what checkpoints hold) plus a bf16
    working copy that the forward and backward passes read; AdamW refreshes the working copy;
  - activations (the streams, LN outputs, qkv, attention output, MLP hidden, logits): bf16;
  - parameter gradients, AdamW m and v: fp32. The gradients of the residual streams (dx, dy) and
    of every LayerNorm input are fp32 too (they are sums over many layers);
  - every reduction accumulates in fp32: LayerNorm statistics, softmax, the loss, the gradient
    norm, the column sums that give bias and LayerNorm parameter gradients, attention's tile
    products (and its log-sum-exp per row, the one attention tensor kept for the backward pass).
`make train_gpt2cu PRECISION=FP32` (-DENABLE_FP32) makes floatX = float everywhere and runs
cuBLASLt with CUBLAS_COMPUTE_32F on fp32 data (no TF32): slower, but tight parity with PyTorch.

Matmuls. All of them go through cuBLASLt (matmul_lt, matmul_lt.cuh): the bias added in the
epilogue, the GELU backward fused into the MLP down-projection's input gradient (DGELU) where the
library runs it for the shape. The GELU forward is a kernel on the stored pre-activation, so the
backward's recompute (-r 1, 2) rebuilds its output with the same kernel, bit for bit. Bias
gradients come from a deterministic column-sum kernel (the BGRADB epilogue overwrites, and
gradient accumulation needs +=).

Determinism. Every kernel here computes each output element in a fixed order that depends only
on the problem sizes: no atomics anywhere (the embedding gradient, where a token repeats, is
grouped by token on the host first; attention's dQ goes through per-block fp32 slices added in a
fixed order). So a run is bit-for-bit repeatable on the same GPU with the same cuBLASLt algorithm
choices (cuBLASLt is deterministic for a given algorithm and workspace).

How to read this file: Part 0 holds the precision and the row helpers; Part 1
the kernels in forward order, each with its backward next to it; Part 2 the model (parameters,
activations, forward, backward, AdamW); Part 3 hands it to the training loop shared with
train_gpt2.c (common/train_loop.h; train_gpt2.c, Part 3, walks through one step). Backward
functions ACCUMULATE (+=) into parameter gradients, zeroed once per step.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "common/utils.h"
#include "cuda_common.cuh"  // the checks around CUDA and cuBLASLt calls, allocation, the device
#include "common/params.h"
#include "common/args.h"

// ============================================================================
// Part 0: precision, small device helpers (the error checks: cuda_common.cuh)
// ============================================================================

#ifdef ENABLE_FP32
typedef float floatX;
#define CUDA_R_X CUDA_R_32F
#define PRECISION_NAME "fp32"
// H100 SXM dense fp32 (no tensor cores) peak, for the MFU of the FP32 build
#define PEAK_FLOPS 67e12
#else
typedef __nv_bfloat16 floatX;
#define CUDA_R_X CUDA_R_16BF
#define PRECISION_NAME "bf16"
// H100 SXM dense bf16 tensor-core peak (989 TFLOP/s), the denominator of MFU
#define PEAK_FLOPS 989e12
#endif

static inline int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }
__device__ __forceinline__ int ceil_div_dev(int a, int b) { return (a + b - 1) / b; }

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) { v += __shfl_xor_sync(0xffffffffu, v, offset); }
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) { v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset)); }
    return v;
}

// Row kernels give each row of a (N, C) tensor to one warp, and warp shuffles combine the lanes'
// partial sums (in fp32). They take a width W: with W = 1 (any C) lane i walks the columns i,
// i + 32, ...; with W = VEC_X (where the row allows it, row_width) lane i owns the 16-byte vectors
// i, i + 32, ... of the row. Pack is W consecutive elements of type T, read or written as one access.
template <typename T, int W>
struct alignas(W * sizeof(T) < 16 ? W * sizeof(T) : 16) Pack {
    T v[W];
};

// 16 bytes of floatX (8 bf16 or 4 fp32): the unit of the vectorised kernels, one load or store
#define VEC_X ((int)(16 / sizeof(floatX)))

// whether n elements at p can be read as 16-byte vectors (aligned, a whole number of them)
static inline int vec_fits(const void* p, size_t n) { return (uintptr_t)p % 16 == 0 && n % VEC_X == 0; }
template <int W, typename T>
__device__ __forceinline__ Pack<T, W> load_pack(const T* p) { return *(const Pack<T, W>*)p; }
template <int W, typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, W>& v) { *(Pack<T, W>*)p = v; }

// the width of a row kernel over rows of C elements of the n tensors p (NULL ones left out): VEC_X
// where C % VEC_X == 0 and every tensor is 16-byte aligned, else 1. An element-wise kernel over C
// elements asks the same, as one row of C.
static int row_width(size_t C, const void* const* p, int n) {
    if (C % VEC_X != 0) { return 1; }
    for (int i = 0; i < n; i++) {
        if (p[i] != NULL && !vec_fits(p[i], C)) { return 1; }
    }
    return VEC_X;
}

#define ROW_WARPS 8  // warps per block of a row kernel (256 threads)

static inline int row_blocks(int N) { return ceil_div(N, ROW_WARPS); }

__device__ __forceinline__ int warp_row() { return blockIdx.x * ROW_WARPS + threadIdx.x / 32; }

// dst = src converted to floatX: the copy-down of fp32 master weights, and fp32 -> floatX gradients
__global__ void cast_to_x_kernel(floatX* dst, const float* src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { dst[i] = (floatX)src[i]; }
}

static void cast_to_x(floatX* dst, const float* src, size_t n) {
    if (n == 0) { return; }
    cast_to_x_kernel<<<ceil_div((long)n, 256), 256>>>(dst, src, n);
    cudaCheckLaunch();
}

// ============================================================================
// Part 1: the layers, in forward order
// ============================================================================

// ----------------------------------------------------------------------------
// embedding: e[b,t] = wte[token] + wpe[t]. One thread per output element. In siamese mode the
// same values also start stream Y (out2).

__global__ void encoder_forward_kernel(floatX* out, floatX* out2, const int* tokens, const floatX* wte,
                                       const floatX* wpe, int BT, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)BT * C) { return; }
    int bt = (int)(i / C), c = (int)(i % C);
    float e = (float)wte[(size_t)tokens[bt] * C + c] + (float)wpe[(size_t)(bt % T) * C + c];
    out[i] = (floatX)e;
    if (out2) { out2[i] = (floatX)e; }
}

// The backward pass scatter-adds each row of dL/de (dx, plus dy in siamese mode) into wte[token]
// and wpe[t]. A token can appear many times in a batch, so, with no atomics, the host makes a work
// list from the tokens alone (token_chunks_build, while the GPU runs the forward pass): the
// positions grouped by token, each group cut into chunks of EMBED_CHUNK positions. Then
//   wte_chunk_kernel: one block per chunk sums dL/de over its positions, in order; a token with
//     one chunk adds that sum into its row of dwte, the chunks of a token with several write
//     partial rows;
//   wte_finish_kernel: one block per such token and 256 columns adds its partial rows in order.
// No block sums more than EMBED_CHUNK rows, and every sum has an order fixed by the tokens.

#define EMBED_THREADS 256  // threads of both kernels' blocks: one column each, the block strides over C

#include "token_chunks.cuh"  // TokenChunks: the work list, made and uploaded by the host

__global__ void wte_chunk_kernel(float* dwte, float* partials, const float* dx, const float* dy, const int* pos,
                                 const int* chunk_start, const int* chunk_token, const int* chunk_slot, int C) {
    int k = blockIdx.x, slot = chunk_slot[k];
    float* dst = slot < 0 ? dwte + (size_t)chunk_token[k] * C : partials + (size_t)slot * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = 0.0f;
        for (int p = chunk_start[k]; p < chunk_start[k + 1]; p++) {
            size_t o = (size_t)pos[p] * C + c;
            sum += dx[o] + (dy ? dy[o] : 0.0f);
        }
        dst[c] = slot < 0 ? dst[c] + sum : sum;
    }
}

__global__ void wte_finish_kernel(float* dwte, const float* partials, const int* split_token, const int* split_first,
                                  int C) {
    int k = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    float sum = 0.0f;
    for (int slot = split_first[k]; slot < split_first[k + 1]; slot++) { sum += partials[(size_t)slot * C + c]; }
    dwte[(size_t)split_token[k] * C + c] += sum;
}

// dwte += dL/de = dx (+ dy) summed by token, from the work list on the device; partials: free
// device memory for tc->n_partials rows of C floats (at most 2 BT / EMBED_CHUNK rows)
static void wte_backward(float* dwte, float* partials, size_t partials_floats, const float* dx, const float* dy,
                         const TokenChunks* tc, int C) {
    if ((size_t)tc->n_partials * C > partials_floats) {
        fatal("wte_backward: %d partial rows of %d do not fit in %zu floats", tc->n_partials, C, partials_floats);
    }
    const int* d = tc->d_list;
    wte_chunk_kernel<<<tc->n_chunks, EMBED_THREADS>>>(dwte, partials, dx, dy, d, d + tc->at_start, d + tc->at_token,
                                                      d + tc->at_slot, C);
    cudaCheckLaunch();
    if (tc->n_split > 0) {
        wte_finish_kernel<<<dim3(tc->n_split, ceil_div(C, EMBED_THREADS)), EMBED_THREADS>>>(
            dwte, partials, d + tc->at_split_token, d + tc->at_split_first, C);
        cudaCheckLaunch();
    }
}

// dwpe[t][c] += sum over b of dL/de[b][t][c]: one thread per (t, c), b in order
__global__ void wpe_backward_kernel(float* dwpe, const float* dx, const float* dy, int B, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) { return; }
    float sum = 0.0f;
    for (int b = 0; b < B; b++) {
        size_t o = (size_t)b * T * C + i;
        sum += dx[o] + (dy ? dy[o] : 0.0f);
    }
    dwpe[i] += sum;
}

// ----------------------------------------------------------------------------
// LayerNorm over the C channels of a row: out = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + 1e-5).
// One warp per row; the statistics in fp32, two passes (mean, then the variance around it). The
// forward saves mean and rstd; the backward recomputes xhat = (x - mean) * rstd from x.

// A row kernel keeps what it reads of a row in registers (HeldRow), so that its later passes over
// the row cost no memory traffic: lane `lane` holds its vectors i = (lane + 32 k) W, k < K, the
// first ROW_HELD_COLS columns (a whole row of GPT-2 124M or 350M); a longer row reads the columns
// past those again at each pass (from L1 or L2). for_lane_vectors walks the held vectors in a loop
// of constant trip count that nvcc unrolls, so that held(h, k, i) is a register there.
#define ROW_HELD_COLS 1024

template <typename T, int W>
struct HeldRow {
    static constexpr int K = ROW_HELD_COLS / (32 * W);  // vectors held per lane
    Pack<T, W> v[K];
    const T* row;  // the row in memory, for the columns past the held ones
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

// the lane's k-th vector of h, at column i: a register where held, else read from memory
template <typename T, int W>
__device__ __forceinline__ Pack<T, W> held(const HeldRow<T, W>& h, int k, int i) {
    return k < h.K ? h.v[k < h.K ? k : 0] : load_pack<W>(h.row + i);
}

// keeps v as the lane's k-th vector of h (where h holds it; the row in memory holds the rest)
template <typename T, int W>
__device__ __forceinline__ void hold(HeldRow<T, W>& h, int k, const Pack<T, W>& v) {
    if (k < h.K) { h.v[k < h.K ? k : 0] = v; }
}

// reads the lane's share of a row of C columns at `row` (one pass over memory)
template <typename T, int W>
__device__ __forceinline__ HeldRow<T, W> held_load(const T* row, int C, int lane) {
    HeldRow<T, W> h = {};
    h.row = row;
    for_lane_vectors<W>(C, lane, [&](int k, int i) { hold(h, k, load_pack<W>(row + i)); });
    return h;
}

// the statistics of one row that a LayerNorm saves
struct LnStats {
    float mean, rstd;
};

// mean and rstd of a held row (every lane gets them): two passes over the registers
template <int W>
__device__ __forceinline__ LnStats held_row_stats(const HeldRow<floatX, W>& h, int C, int lane) {
    float sum = 0.0f;
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<floatX, W> v = held(h, k, i);
        for (int e = 0; e < W; e++) { sum += (float)v.v[e]; }
    });
    float mean = warp_sum(sum) / C;
    float sq = 0.0f;
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<floatX, W> v = held(h, k, i);
        for (int e = 0; e < W; e++) { float d = (float)v.v[e] - mean; sq += d * d; }
    });
    float rstd = rsqrtf(warp_sum(sq) / C + 1e-5f);
    return LnStats{mean, rstd};
}

// the row is read once (held), the statistics come from registers, out is written once.
// SAVED: the backward's recompute (-r 2): mean and rstd are read, not computed, and the same code
// rebuilds out bit for bit.
template <int W, bool SAVED = false>
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                                         const floatX* b, int N, int C) {
    int r = warp_row(), lane = threadIdx.x % 32;
    if (r >= N) { return; }
    HeldRow<floatX, W> x = held_load<floatX, W>(inp + (size_t)r * C, C, lane);
    LnStats st = SAVED ? LnStats{mean[r], rstd[r]} : held_row_stats<W>(x, C, lane);
    floatX* o = out + (size_t)r * C;
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<floatX, W> xv = held(x, k, i), wv = load_pack<W>(w + i), bv = load_pack<W>(b + i), ov;
        for (int e = 0; e < W; e++) { ov.v[e] = (floatX)(((float)xv.v[e] - st.mean) * st.rstd * (float)wv.v[e] + (float)bv.v[e]); }
        store_pack<W>(o + i, ov);
    });
    if (lane == 0 && !SAVED) { mean[r] = st.mean; rstd[r] = st.rstd; }
}

// saved: out = LN(inp) again from the saved mean and rstd (-r 2: pre mode's block input in the backward)
static void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w, const floatX* b,
                              int N, int C, bool saved = false) {
    const void* rows[] = {out, inp, w, b};
    bool vec = row_width(C, rows, 4) == VEC_X;
    auto kernel = saved ? (vec ? layernorm_forward_kernel<VEC_X, true> : layernorm_forward_kernel<1, true>)
                        : (vec ? layernorm_forward_kernel<VEC_X> : layernorm_forward_kernel<1>);
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(out, mean, rstd, inp, w, b, N, C);
    cudaCheckLaunch();
}

// Backward of one row. With g = w * dout and xhat as above:
//     dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
// ln_backward_means returns the two means from the held dout and x; every lane gets them.
struct LnBackMeans {
    float g, g_xhat;  // mean(g), mean(g * xhat)
};

template <int W>
__device__ __forceinline__ LnBackMeans ln_backward_means(const HeldRow<float, W>& dout, const HeldRow<floatX, W>& x,
                                                    const floatX* w, float mean, float rstd, int C, int lane) {
    float m1 = 0.0f, m2 = 0.0f;
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<float, W> dv = held(dout, k, i);
        Pack<floatX, W> xv = held(x, k, i), wv = load_pack<W>(w + i);
        for (int e = 0; e < W; e++) {
            float g = (float)wv.v[e] * dv.v[e];
            m1 += g;
            m2 += g * ((float)xv.v[e] - mean) * rstd;
        }
    });
    return LnBackMeans{warp_sum(m1) / C, warp_sum(m2) / C};
}

__device__ __forceinline__ float ln_backward_value(float dout, float x, float w, float mean, float rstd, LnBackMeans means) {
    return (w * dout - means.g - (x - mean) * rstd * means.g_xhat) * rstd;
}

// ----------------------------------------------------------------------------
// Column sums: out[c] += sum over the N rows of in[r][c], in a fixed order (no atomics). They give
// the bias gradients (column_grads, in = dout) and add up the blocks' partial sums of the
// LayerNorm parameter gradients (ln_grads_finish). A block of 32 x 32 threads owns 32 columns: its
// threads walk the rows 32 apart (coalesced), and the 32 partial sums of each column are added in
// order through shared memory (column_tile_sums). column_sums does that over all rows in one
// launch, right for a few hundred rows; the B * T rows of a bias gradient would give too few
// blocks, so column_grads splits them into column_splits(N) chunks (a count fixed by N): stage 1
// writes each chunk's sums to column_partials, stage 2 adds the chunks of each column in order.
template <typename Td>
struct ColumnJob {
    float* out;    // (C) += the column sums
    const Td* in;  // (N, C)
};
#define COLUMN_MAX_JOBS 6
template <typename Td>
struct ColumnJobs {
    ColumnJob<Td> job[COLUMN_MAX_JOBS];
};

#define COLUMN_TILE 32
#define COLUMN_MAX_SPLITS 32
#define COLUMN_CHUNK_ROWS 64

static int column_splits(int N) {
    int splits = ceil_div(N, COLUMN_CHUNK_ROWS);
    return splits < COLUMN_MAX_SPLITS ? splits : COLUMN_MAX_SPLITS;
}

// Device scratch for partial sums: `rows` floats per column, for up to `cols` columns. It grows,
// never shrinks (one process may allocate several models); gpt2_free frees it.
typedef struct {
    float* p;
    size_t rows, cols;
    const char* what;
} Partials;

static void partials_reserve(Partials* b, size_t cols) {
    if (cols <= b->cols) { return; }
    cudaCheck(cudaFree(b->p));
    b->p = (float*)cuda_malloc_check(b->rows * cols * sizeof(float), b->what);
    b->cols = cols;
}

static void partials_free(Partials* b) {
    cudaCheck(cudaFree(b->p));
    b->p = NULL;
    b->cols = 0;
}

// stage 1's output: (COLUMN_MAX_SPLITS, C) floats
static Partials column_partials = {NULL, COLUMN_MAX_SPLITS, 0, "column-sum partials"};

// the sum of in over the rows [r_begin, r_end) for the column c = blockIdx.x * 32 + threadIdx.x;
// returns 1 where *total holds it (threadIdx.y == 0, c < C), 0 elsewhere
template <typename Td>
__device__ int column_tile_sums(const Td* in, int C, int r_begin, int r_end, float* total) {
    int c = blockIdx.x * COLUMN_TILE + threadIdx.x;
    float sum = 0.0f;
    if (c < C) {
        for (int r = r_begin + threadIdx.y; r < r_end; r += COLUMN_TILE) { sum += (float)in[(size_t)r * C + c]; }
    }
    __shared__ float part[COLUMN_TILE][COLUMN_TILE + 1];
    part[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) { return 0; }
    float t = 0.0f;
    for (int k = 0; k < COLUMN_TILE; k++) { t += part[k][threadIdx.x]; }
    *total = t;
    return 1;
}

// one stage: job blockIdx.y over all N rows
template <typename Td>
__global__ void column_sums_kernel(ColumnJobs<Td> jobs, int N, int C) {
    const ColumnJob<Td> j = jobs.job[blockIdx.y];
    float t;
    if (column_tile_sums(j.in, C, 0, N, &t)) { j.out[blockIdx.x * COLUMN_TILE + threadIdx.x] += t; }
}

template <typename Td>
static void column_sums(const ColumnJobs<Td>& jobs, int njobs, int N, int C) {
    column_sums_kernel<Td><<<dim3(ceil_div(C, COLUMN_TILE), njobs), dim3(COLUMN_TILE, COLUMN_TILE)>>>(jobs, N, C);
    cudaCheckLaunch();
}

// stage 1: chunk blockIdx.y of `splits` writes its sums to partials[chunk][c]
template <typename Td>
__global__ void column_grads_kernel(const Td* in, int N, int C, float* partials, int splits) {
    int chunk = ceil_div_dev(N, splits), r_begin = blockIdx.y * chunk, r_end = r_begin + chunk < N ? r_begin + chunk : N;
    float t;
    if (column_tile_sums(in, C, r_begin, r_end, &t)) { partials[(size_t)blockIdx.y * C + blockIdx.x * COLUMN_TILE + threadIdx.x] = t; }
}

// stage 2: one thread per column, the chunks in order
__global__ void column_finish_kernel(float* out, int C, const float* partials, int splits) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    float t = 0.0f;
    for (int k = 0; k < splits; k++) { t += partials[(size_t)k * C + c]; }
    out[c] += t;
}

// out += the column sums of in (N, C), in two stages
template <typename Td>
static void column_grads(float* out, const Td* in, int N, int C) {
    if ((size_t)C > column_partials.cols) { fatal("column_grads: %d columns, partials allocated for %zu", C, column_partials.cols); }
    int splits = column_splits(N);
    column_grads_kernel<Td><<<dim3(ceil_div(C, COLUMN_TILE), splits), dim3(COLUMN_TILE, COLUMN_TILE)>>>(in, N, C, column_partials.p, splits);
    cudaCheckLaunch();
    column_finish_kernel<<<ceil_div(C, 256), 256>>>(out, C, column_partials.p, splits);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// The LayerNorm parameter gradients, dw[c] += sum_r dout[r][c] * xhat[r][c] and db[c] += sum_r
// dout[r][c], are sums over all N rows. The backward row kernels (layernorm_backward_kernel here,
// siamese_input_backward_kernel below) sum them as they go. A block takes ln_block_rows(N)
// consecutive rows and works through them ROW_WARPS rows at a time (ln_backward_rounds):
//   1. one warp per row: the row's reductions (the means of its LayerNorm backwards);
//   2. the whole block over the columns: thread t owns the vectors of W columns t, t + 256, ...;
//      for each row of the round in order it writes the input gradients and adds the row's
//      parameter-gradient terms to its running sums (in shared memory, touched by it alone).
// Each block then writes its sums as partial rows, (n, blocks, C) in ln_partials, and
// ln_grads_finish adds them into the gradients (column_sums). The grid and the rows of each block
// depend only on N: every GPU adds the same numbers in the same order.

// At most LN_GRAD_BLOCKS blocks: enough to give every SM of a large GPU a few, few enough that
// the partial rows stay small against the rows (a first choice, to tune on a GPU).
#define LN_GRAD_BLOCKS 512

// rows per block: ROW_WARPS (one round) up to N = ROW_WARPS * LN_GRAD_BLOCKS, then more rounds
static int ln_block_rows(int N) { return ROW_WARPS * ceil_div(N, ROW_WARPS * LN_GRAD_BLOCKS); }
static int ln_grad_blocks(int N) { return ceil_div(N, ln_block_rows(N)); }

// the blocks' partial sums: (n, blocks, C) floats, n * C "columns" of up to LN_GRAD_BLOCKS rows
static Partials ln_partials = {NULL, LN_GRAD_BLOCKS, 0, "LayerNorm gradient partials"};

// The rounds of one block: per_row(row, slot) by one warp per row (slot: its warp, the row's place
// in the round), then, once every warp is done, per_column(base, rows) by the whole block for the
// rows base .. base + rows - 1; a second barrier keeps the next round's per_row from overwriting
// what per_column still reads.
template <typename RowFn, typename ColumnFn>
__device__ __forceinline__ void ln_backward_rounds(int N, int block_rows, RowFn per_row, ColumnFn per_column) {
    int r_begin = blockIdx.x * block_rows, r_end = r_begin + block_rows < N ? r_begin + block_rows : N;
    int warp = threadIdx.x / 32;
    for (int base = r_begin; base < r_end; base += ROW_WARPS) {
        if (base + warp < r_end) { per_row(base + warp, warp); }
        __syncthreads();
        per_column(base, r_end - base < ROW_WARPS ? r_end - base : ROW_WARPS);
        __syncthreads();
    }
}

// f(i) for each vector of W columns the calling thread owns: i = (threadIdx.x + blockDim.x k) W
template <int W, typename F>
__device__ __forceinline__ void for_owned_vectors(int C, F f) {
    for (int i = threadIdx.x * W; i < C; i += blockDim.x * W) { f(i); }
}

// the block's n running sums (n, C) in shared memory: zeroed, grown by one round, and written out
// as the block's partial rows; each thread touches only the vectors it owns
template <int W>
__device__ __forceinline__ void ln_sums_zero(float* sums, int n, int C) {
    for_owned_vectors<W>(C, [&](int i) {
        for (int q = 0; q < n; q++) {
            for (int e = 0; e < W; e++) { sums[q * C + i + e] = 0.0f; }
        }
    });
}

template <int W, int n>
__device__ __forceinline__ void ln_sums_add(float* sums, const float (&g)[n][W], int C, int i) {
    for (int q = 0; q < n; q++) {
        for (int e = 0; e < W; e++) { sums[q * C + i + e] += g[q][e]; }
    }
}

template <int W>
__device__ __forceinline__ void ln_sums_store(float* partials, const float* sums, int n, int C) {
    for_owned_vectors<W>(C, [&](int i) {
        for (int q = 0; q < n; q++) {
            float* p = partials + ((size_t)q * gridDim.x + blockIdx.x) * C + i;
            for (int e = 0; e < W; e++) { p[e] = sums[q * C + i + e]; }
        }
    });
}

// The launch shape of a LayerNorm backward kernel with n sums over N rows of C columns: the grid,
// the rows per block, and its dynamic shared memory (n * C floats), allowed above the default
// 48 KiB where needed.
typedef struct {
    int blocks, block_rows;
    size_t smem;
} LnBackwardLaunch;

static LnBackwardLaunch ln_backward_launch(const void* kernel, int n, int N, int C, const char* what) {
    LnBackwardLaunch l = {ln_grad_blocks(N), ln_block_rows(N), (size_t)n * C * sizeof(float)};
    if ((size_t)n * C > ln_partials.cols) { fatal("%s: %d x %d partial columns, allocated for %zu", what, n, C, ln_partials.cols); }
    if (l.smem > 48 * 1024 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)l.smem) != cudaSuccess) {
        fatal("%s: C = %d needs %zu bytes of shared memory per block, more than this GPU allows", what, C, l.smem);
    }
    return l;
}

// grads[q] += the sum over the blocks of their partial rows of sum q, q < n (in a fixed order:
// column_sums)
static void ln_grads_finish(float* const* grads, int n, int N, int C) {
    int blocks = ln_grad_blocks(N);
    ColumnJobs<float> jobs = {};
    for (int q = 0; q < n; q++) { jobs.job[q] = ColumnJob<float>{grads[q], ln_partials.p + (size_t)q * blocks * C}; }
    column_sums(jobs, n, blocks, C);
}

// The plain LayerNorm backward: dinp = dL/dinp (accumulate = 0) or dinp += dL/dinp (accumulate =
// 1); dinp may be dout itself (each thread reads its elements of dout before it writes the same
// elements of dinp). dinp_x, when given, receives a floatX copy of the result (the next matmul's
// input). The parameter gradients go to partials (sums dw, db; ln_grads_finish adds them up).
template <int W>
__global__ void layernorm_backward_kernel(float* dinp, floatX* dinp_x, float* partials, const float* dout,
                                          const floatX* inp, const floatX* w, const float* mean, const float* rstd,
                                          int N, int C, int block_rows, int accumulate) {
    extern __shared__ float sums[];           // (2, C): dw, db
    __shared__ LnBackMeans row_means[ROW_WARPS];  // step 1 -> step 2, per row of the round
    int lane = threadIdx.x % 32;
    ln_sums_zero<W>(sums, 2, C);
    ln_backward_rounds(N, block_rows,
        [&](int row, int slot) {
            size_t o = (size_t)row * C;
            HeldRow<float, W> dv = held_load<float, W>(dout + o, C, lane);
            HeldRow<floatX, W> xv = held_load<floatX, W>(inp + o, C, lane);
            LnBackMeans means = ln_backward_means<W>(dv, xv, w, mean[row], rstd[row], C, lane);
            if (lane == 0) { row_means[slot] = means; }
        },
        [&](int base, int rows) {
            for_owned_vectors<W>(C, [&](int i) {
                Pack<floatX, W> wv = load_pack<W>(w + i);
                float g[2][W] = {};  // this round's dw, db terms in these columns
                for (int j = 0; j < rows; j++) {
                    int row = base + j;
                    size_t o = (size_t)row * C + i;
                    float mu = mean[row], rs = rstd[row];
                    Pack<float, W> dv = load_pack<W>(dout + o), d;
                    Pack<floatX, W> xv = load_pack<W>(inp + o), dx;
                    for (int e = 0; e < W; e++) {
                        d.v[e] = ln_backward_value(dv.v[e], (float)xv.v[e], (float)wv.v[e], mu, rs, row_means[j]);
                        g[0][e] += dv.v[e] * (((float)xv.v[e] - mu) * rs);
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
                ln_sums_add<W>(sums, g, C, i);
            });
        });
    ln_sums_store<W>(partials, sums, 2, C);
}

// plain LayerNorm backward: dw, db += the parameter gradients; dinp = or += dL/dinp (see the kernel)
static void layernorm_backward(float* dinp, floatX* dinp_x, float* dw, float* db, const float* dout, const floatX* inp,
                               const floatX* w, const float* mean, const float* rstd, int N, int C, int accumulate) {
    const void* rows[] = {dinp, dinp_x, dout, inp, w};
    auto kernel = row_width(C, rows, 5) == VEC_X ? layernorm_backward_kernel<VEC_X> : layernorm_backward_kernel<1>;
    LnBackwardLaunch l = ln_backward_launch((const void*)kernel, 2, N, C, "layernorm_backward");
    kernel<<<l.blocks, ROW_WARPS * 32, l.smem>>>(dinp, dinp_x, ln_partials.p, dout, inp, w, mean, rstd, N, C, l.block_rows,
                                                 accumulate);
    cudaCheckLaunch();
    float* grads[] = {dw, db};
    ln_grads_finish(grads, 2, N, C);
}

// ----------------------------------------------------------------------------
// The two-stream (siamese) kernels (dev/MODEL.md). Two residual streams, X (post-norm-like) and
// Y (pre-norm-like), share every block F (attention or MLP). Around each block, per row:
//
//     input side      a = LN(x; lnx)              normalise X
//                     r = a + LN(y; lny)          both streams meet
//                     u = LN(r; ln)               the block input
//     the block       z = F(u)                    matmuls, attention: the expensive part, run ONCE
//     update side     x_next = a + z / c_l        X takes the update scaled by 1/c_l
//                     y_next = y + z              Y takes it whole (the identity path)
//
// and at the end the same input side merges the streams: h = LN(LN(x; lnfx) + LN(y; lnfy); lnf).
//
// The input side is three LayerNorms and an add, all memory-bound, so one warp per row does it all
// with the row held in registers (HeldRow): it reads x and y once, writes a, r and u once, and
// takes the statistics of r from the values it wrote, as rounded (the backward pass recomputes
// r-hat from the stored r, so it sees exactly what the forward pass normalised). The update side
// is element-wise; it runs inside the next sublayer's input kernel (or the final merge's), which
// forms x_next and y_next in registers, writes them once and normalises them.
//
// Backward, per row, with dx and dy holding dL/dx_next and dL/dy_next on entry:
//
//     dz = dx_next / c + dy_next            (written by the input backward of the sublayer after,
//                                            or of the final merge)
//     ... the block's backward turns dz into du = dL/du ...
//     dr = LN_back(du; r, ln)               the block-input LN
//     da = dr + dx_next                     a feeds both r and x_next
//     dy = dy_next + LN_back(dr; y, lny)    Y: identity path plus its LN
//     dx = LN_back(da; x, lnx)              X: only through its LN
//
// again one row kernel (siamese_input_backward_kernel), which sums the six LayerNorm parameter
// gradients per block of rows as it goes (ln_backward_rounds above). The streams and a, r, u are
// floatX; the statistics and every gradient are fp32. Memory traffic per launch: dev/cuda/README.md.

// the three LayerNorms of one siamese input side, as parameters (floatX) or gradients (float)
template <typename T>
struct SiameseNormsT {
    T *xw, *xb;  // LN of stream X (lnx1, lnx2 or lnfx)
    T *yw, *yb;  // LN of stream Y (lny1, lny2 or lnfy)
    T *w, *b;    // the LN that makes the block input (ln1, ln2 or lnf)
};
typedef SiameseNormsT<floatX> SiameseNorms;
typedef SiameseNormsT<float> SiameseNormGrads;

// the saved statistics, (N) floats each
typedef struct {
    float *x_mean, *x_rstd, *y_mean, *y_rstd, *mean, *rstd;
} SiameseStats;

// The input side, forward: a = LN(x), r = a + LN(y), u = LN(r), for one row whose x and y the warp
// holds: the statistics of x and y from registers, then a, r (held in turn, for its statistics
// and u), u and the six statistics. a_out may be NULL (the final merge does not need a).
// SAVED: the backward's recompute (-r 2). The six statistics are read from st instead (the forward
// pass saved them from these very rows), and the same code then rebuilds a, r and u bit for bit.
template <int W, bool SAVED>
__device__ void siamese_input_row(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st,
                                  const HeldRow<floatX, W>& x, const HeldRow<floatX, W>& y, SiameseNorms p, int row,
                                  int C, int lane) {
    size_t o = (size_t)row * C;
    LnStats x_st = SAVED ? LnStats{st.x_mean[row], st.x_rstd[row]} : held_row_stats<W>(x, C, lane);
    LnStats y_st = SAVED ? LnStats{st.y_mean[row], st.y_rstd[row]} : held_row_stats<W>(y, C, lane);
    // r = LN(x) + LN(y), held as stored (rounded): its statistics are taken over those values
    HeldRow<floatX, W> r = {};
    r.row = r_out + o;
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<floatX, W> xv = held(x, k, i), xw = load_pack<W>(p.xw + i), xb = load_pack<W>(p.xb + i);
        Pack<floatX, W> yv = held(y, k, i), yw = load_pack<W>(p.yw + i), yb = load_pack<W>(p.yb + i), av, rv;
        for (int e = 0; e < W; e++) {
            float a = ((float)xv.v[e] - x_st.mean) * x_st.rstd * (float)xw.v[e] + (float)xb.v[e];
            float ly = ((float)yv.v[e] - y_st.mean) * y_st.rstd * (float)yw.v[e] + (float)yb.v[e];
            av.v[e] = (floatX)a;
            rv.v[e] = (floatX)(a + ly);
        }
        if (a_out) { store_pack<W>(a_out + o + i, av); }
        store_pack<W>(r_out + o + i, rv);
        hold(r, k, rv);
    });
    LnStats r_st = SAVED ? LnStats{st.mean[row], st.rstd[row]} : held_row_stats<W>(r, C, lane);
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<floatX, W> rv = held(r, k, i), w = load_pack<W>(p.w + i), b = load_pack<W>(p.b + i), uv;
        for (int e = 0; e < W; e++) { uv.v[e] = (floatX)(((float)rv.v[e] - r_st.mean) * r_st.rstd * (float)w.v[e] + (float)b.v[e]); }
        store_pack<W>(u_out + o + i, uv);
    });
    if (lane == 0 && !SAVED) {
        st.x_mean[row] = x_st.mean;
        st.x_rstd[row] = x_st.rstd;
        st.y_mean[row] = y_st.mean;
        st.y_rstd[row] = y_st.rstd;
        st.mean[row] = r_st.mean;
        st.rstd[row] = r_st.rstd;
    }
}

template <int W, bool SAVED = false>
__global__ void siamese_input_forward_kernel(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st,
                                             const floatX* x, const floatX* y, SiameseNorms p, int N, int C) {
    int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= N) { return; }
    size_t o = (size_t)row * C;
    HeldRow<floatX, W> xh = held_load<floatX, W>(x + o, C, lane), yh = held_load<floatX, W>(y + o, C, lane);
    siamese_input_row<W, SAVED>(a_out, r_out, u_out, st, xh, yh, p, row, C, lane);
}

// the width of an input side's row kernel (row_width) over its n row tensors and the six norm
// vectors of p: VEC_X only where both allow it
static int siamese_row_width(int C, const void* const* rows, int n, SiameseNorms p) {
    const void* norms[] = {p.xw, p.xb, p.yw, p.yb, p.w, p.b};
    return row_width(C, rows, n) == VEC_X ? row_width(C, norms, 6) : 1;
}

// saved: the backward's recompute (-r 2): r and u of an input side again, from its x and y and the
// statistics the forward pass saved in st (a_out NULL: the backward never reads a). The same row
// code as the forward pass (siamese_input_row), so the same floats, whichever forward kernel (this
// one's or the update's) made them; at either width (the width orders only the sums of the
// statistics, which are not taken here).
static void siamese_input_forward(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st, const floatX* x,
                                  const floatX* y, SiameseNorms p, int N, int C, bool saved = false) {
    const void* rows[] = {a_out, r_out, u_out, x, y};
    bool vec = siamese_row_width(C, rows, 5, p) == VEC_X;
    auto kernel = saved ? (vec ? siamese_input_forward_kernel<VEC_X, true> : siamese_input_forward_kernel<1, true>)
                        : (vec ? siamese_input_forward_kernel<VEC_X> : siamese_input_forward_kernel<1>);
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(a_out, r_out, u_out, st, x, y, p, N, C);
    cudaCheckLaunch();
}

// The update side, x_next = a + z / c and y_next = y + z, one element rounded to floatX as stored;
// the kernels that run it are the next input side's, forward and backward
__device__ __forceinline__ void siamese_update_value(float a, float y, float z, float c, floatX* x_next, floatX* y_next) {
    *x_next = (floatX)(a + z / c);
    *y_next = (floatX)(y + z);
}

// its backward for the block output (a's share of dx_next is taken in siamese_input_backward)
__device__ __forceinline__ float siamese_update_dz(float dx_next, float dy_next, float c) { return dx_next / c + dy_next; }

// The update folded into the next input side: one warp per row forms x = a_prev + z / c and
// y = y_prev + z in registers, writes each once (the backward pass reads them) and keeps them for
// the input side of the row: bit-identical to an update kernel followed by
// siamese_input_forward_kernel (dev/cuda/siamese_input_forward.cu checks that).
template <int W>
__global__ void siamese_update_input_forward_kernel(floatX* x, floatX* y, const floatX* a_prev, const floatX* y_prev,
                                                    const floatX* z, float c, floatX* a_out, floatX* r_out,
                                                    floatX* u_out, SiameseStats st, SiameseNorms p, int N, int C) {
    int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= N) { return; }
    size_t o = (size_t)row * C;
    HeldRow<floatX, W> xh = {}, yh = {};
    xh.row = x + o;
    yh.row = y + o;
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<floatX, W> av = load_pack<W>(a_prev + o + i), yv = load_pack<W>(y_prev + o + i), zv = load_pack<W>(z + o + i);
        Pack<floatX, W> xn, yn;
        for (int e = 0; e < W; e++) { siamese_update_value((float)av.v[e], (float)yv.v[e], (float)zv.v[e], c, &xn.v[e], &yn.v[e]); }
        store_pack<W>(x + o + i, xn);
        store_pack<W>(y + o + i, yn);
        hold(xh, k, xn);
        hold(yh, k, yn);
    });
    siamese_input_row<W, false>(a_out, r_out, u_out, st, xh, yh, p, row, C, lane);
}

// x, y = the update of the sublayer before (a_prev, y_prev, its output z, its scale c), then the
// input side of the next sublayer (or of the final merge) on them, in one kernel
static void siamese_update_input_forward(floatX* x, floatX* y, const floatX* a_prev, const floatX* y_prev,
                                         const floatX* z, float c, floatX* a_out, floatX* r_out, floatX* u_out,
                                         SiameseStats st, SiameseNorms p, int N, int C) {
    const void* rows[] = {x, y, a_prev, y_prev, z, a_out, r_out, u_out};
    auto kernel = siamese_row_width(C, rows, 8, p) == VEC_X ? siamese_update_input_forward_kernel<VEC_X> : siamese_update_input_forward_kernel<1>;
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(x, y, a_prev, y_prev, z, c, a_out, r_out, u_out, st, p, N, C);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// The input side, backward. On entry dx = dL/dx_next and dy = dL/dy_next where streams_in is 1 (at
// the final merge, streams_in 0, they are outputs only); du = dL/du. On exit dx = dL/dx, dy =
// dL/dy, and the six parameter gradients have grown by this input side's share. In the rounds of
// ln_backward_rounds:
//   step 1, one warp per row: the means of the three LN backwards: of the block-input LN from du
//     and r (held), then, from dr = LN_back(du) and da = dr + dx_next, those of LN_back(dr; y) and
//     LN_back(da; x);
//   step 2, the block over columns: per row, dr and da again (a few flops; storing them would cost
//     two fp32 tensors written and read back), dy, dx, and the six parameter-gradient terms.
// Given dz_prev, step 2 also writes the update backward of the sublayer before from the dx and dy
// in registers: dz_prev = siamese_update_dz(dx, dy, c_prev) (dev/cuda/siamese_input_backward.cu
// checks it against an element-wise kernel).

// the six sums of an input side, in the order of SiameseNormsT: (xw, xb, yw, yb, w, b)
#define SIAMESE_SUMS 6

// what step 2 needs of a row besides its elements: the two means of each LN backward
typedef struct {
    LnBackMeans ln, y, x;
} SiameseRowMeans;

template <int W>
__global__ void siamese_input_backward_kernel(float* dx, float* dy, floatX* dz_prev, float c_prev, int streams_in,
                                              float* partials, const float* du, SiameseNorms p, SiameseStats st,
                                              const floatX* x, const floatX* y, const floatX* r, int N, int C,
                                              int block_rows) {
    extern __shared__ float sums[];                    // (6, C) in SIAMESE_SUMS order
    __shared__ SiameseRowMeans row_means[ROW_WARPS];  // step 1 -> step 2, per row of the round
    int lane = threadIdx.x % 32;
    ln_sums_zero<W>(sums, SIAMESE_SUMS, C);
    ln_backward_rounds(N, block_rows,
        [&](int row, int slot) {
            size_t o = (size_t)row * C;
            float mu = st.mean[row], rs = st.rstd[row];
            HeldRow<float, W> g = held_load<float, W>(du + o, C, lane);
            HeldRow<floatX, W> rh = held_load<floatX, W>(r + o, C, lane);
            LnBackMeans ln_means = ln_backward_means<W>(g, rh, p.w, mu, rs, C, lane);
            // dr = LN_back(du; r), da = dr + dx_next, and the two reductions of LN_back(dr; y) and
            // LN_back(da; x) in one pass
            float ymu = st.y_mean[row], yrs = st.y_rstd[row], xmu = st.x_mean[row], xrs = st.x_rstd[row];
            float y1 = 0.0f, y2 = 0.0f, x1 = 0.0f, x2 = 0.0f;
            for_lane_vectors<W>(C, lane, [&](int k, int i) {
                Pack<float, W> duv = held(g, k, i), dxn = {};
                Pack<floatX, W> rv = held(rh, k, i), wv = load_pack<W>(p.w + i);
                Pack<floatX, W> xv = load_pack<W>(x + o + i), xw = load_pack<W>(p.xw + i);
                Pack<floatX, W> yv = load_pack<W>(y + o + i), yw = load_pack<W>(p.yw + i);
                if (streams_in) { dxn = load_pack<W>(dx + o + i); }
                for (int e = 0; e < W; e++) {
                    float dr = ln_backward_value(duv.v[e], (float)rv.v[e], (float)wv.v[e], mu, rs, ln_means);
                    float da = dr + dxn.v[e];
                    float gy = (float)yw.v[e] * dr, gx = (float)xw.v[e] * da;
                    y1 += gy;
                    y2 += gy * ((float)yv.v[e] - ymu) * yrs;
                    x1 += gx;
                    x2 += gx * ((float)xv.v[e] - xmu) * xrs;
                }
            });
            SiameseRowMeans means = {ln_means, LnBackMeans{warp_sum(y1) / C, warp_sum(y2) / C},
                                     LnBackMeans{warp_sum(x1) / C, warp_sum(x2) / C}};
            if (lane == 0) { row_means[slot] = means; }
        },
        [&](int base, int rows) {
            for_owned_vectors<W>(C, [&](int i) {
                Pack<floatX, W> wv = load_pack<W>(p.w + i), yw = load_pack<W>(p.yw + i), xw = load_pack<W>(p.xw + i);
                float g[SIAMESE_SUMS][W] = {};  // this round's terms in these columns
                for (int j = 0; j < rows; j++) {
                    int row = base + j;
                    size_t o = (size_t)row * C + i;
                    SiameseRowMeans means = row_means[j];
                    float mu = st.mean[row], rs = st.rstd[row];
                    float ymu = st.y_mean[row], yrs = st.y_rstd[row], xmu = st.x_mean[row], xrs = st.x_rstd[row];
                    Pack<float, W> duv = load_pack<W>(du + o), dxv = {}, dyv = {};
                    Pack<floatX, W> rv = load_pack<W>(r + o), xv = load_pack<W>(x + o), yv = load_pack<W>(y + o), dz;
                    if (streams_in) {
                        dxv = load_pack<W>(dx + o);
                        dyv = load_pack<W>(dy + o);
                    }
                    for (int e = 0; e < W; e++) {
                        float dr = ln_backward_value(duv.v[e], (float)rv.v[e], (float)wv.v[e], mu, rs, means.ln);
                        float da = dr + dxv.v[e];
                        g[0][e] += da * (((float)xv.v[e] - xmu) * xrs);  // lnx: da xhat, da
                        g[1][e] += da;
                        g[2][e] += dr * (((float)yv.v[e] - ymu) * yrs);  // lny: dr yhat, dr
                        g[3][e] += dr;
                        g[4][e] += duv.v[e] * (((float)rv.v[e] - mu) * rs);  // ln: du rhat, du
                        g[5][e] += duv.v[e];
                        dyv.v[e] += ln_backward_value(dr, (float)yv.v[e], (float)yw.v[e], ymu, yrs, means.y);
                        dxv.v[e] = ln_backward_value(da, (float)xv.v[e], (float)xw.v[e], xmu, xrs, means.x);
                    }
                    store_pack<W>(dy + o, dyv);
                    store_pack<W>(dx + o, dxv);
                    if (dz_prev) {
                        for (int e = 0; e < W; e++) { dz.v[e] = (floatX)siamese_update_dz(dxv.v[e], dyv.v[e], c_prev); }
                        store_pack<W>(dz_prev + o, dz);
                    }
                }
                ln_sums_add<W>(sums, g, C, i);
            });
        });
    ln_sums_store<W>(partials, sums, SIAMESE_SUMS, C);
}

// the kernel above, then the blocks' partial sums into the six parameter gradients g (+=).
// dz_prev: where the folded update backward writes dz of the sublayer before (scale c_prev); NULL
// for the first sublayer. streams_in: 0 at the final merge (see above).
static void siamese_input_backward(float* dx, float* dy, floatX* dz_prev, float c_prev, int streams_in, const float* du,
                                   SiameseNormGrads g, SiameseNorms p, SiameseStats st, const floatX* x,
                                   const floatX* y, const floatX* r, int N, int C) {
    const void* rows[] = {dx, dy, dz_prev, du, x, y, r};
    auto kernel = siamese_row_width(C, rows, 7, p) == VEC_X ? siamese_input_backward_kernel<VEC_X> : siamese_input_backward_kernel<1>;
    LnBackwardLaunch l = ln_backward_launch((const void*)kernel, SIAMESE_SUMS, N, C, "siamese_input_backward");
    kernel<<<l.blocks, ROW_WARPS * 32, l.smem>>>(dx, dy, dz_prev, c_prev, streams_in, ln_partials.p, du, p, st, x, y, r, N, C,
                                                 l.block_rows);
    cudaCheckLaunch();
    float* grads[SIAMESE_SUMS] = {g.xw, g.xb, g.yw, g.yb, g.w, g.b};
    ln_grads_finish(grads, SIAMESE_SUMS, N, C);
}

// pre and post mode: the plain residual add out = x + z
__global__ void residual_forward_kernel(floatX* out, const floatX* x, const floatX* z, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = (floatX)((float)x[i] + (float)z[i]); }
}

static void residual_forward(floatX* out, const floatX* x, const floatX* z, size_t n) {
    residual_forward_kernel<<<ceil_div((long)n, 256), 256>>>(out, x, z, n);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). The forward, and the
// backward where no fused DGELU epilogue runs (matmul_backward_input).

#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)

__device__ __forceinline__ float gelu_value(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
}

// dGELU/dx
__device__ __forceinline__ float gelu_slope(float x) {
    float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    float dth = (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * dth;
}

// out = GELU(inp) (backward 0) or out = out * GELU'(inp) in place (backward 1), W elements per
// thread (see Pack): W = VEC_X where the tensors allow (row_width)
template <int W>
__global__ void gelu_kernel(floatX* out, const floatX* inp, size_t npack, int backward) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npack) { return; }
    Pack<floatX, W> x = load_pack<W>(inp + i * W), o;
    if (backward) { o = load_pack<W>(out + i * W); }
    for (int e = 0; e < W; e++) {
        float v = (float)x.v[e];
        o.v[e] = (floatX)(backward ? (float)o.v[e] * gelu_slope(v) : gelu_value(v));
    }
    store_pack<W>(out + i * W, o);
}

// n elements
static void gelu_apply(floatX* out, const floatX* inp, size_t n, int backward) {
    const void* tensors[] = {out, inp};
    int w = row_width(n, tensors, 2);
    auto kernel = w == VEC_X ? gelu_kernel<VEC_X> : gelu_kernel<1>;
    kernel<<<ceil_div((long)(n / w), 256), 256>>>(out, inp, n / w, backward);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// the linear layers: matmuls through cuBLASLt
//
// cuBLASLt, like all of BLAS, is column-major: a col-major (m x n) matrix with leading dimension ld
// stores element (i, j) at i + j * ld. Our tensors are row-major, and the bytes of a row-major
// (R x K) array M are exactly the col-major (K x R) matrix M^T with ld = K. So we compute the
// TRANSPOSE of each product, whose operands are the transposes cuBLASLt sees for free. With W
// (OC, C) row-major like nn.Linear, inp (BT, C), out (BT, OC):
//
//   forward   out = inp . W^T         transposed: out^T (OC x BT) = W (OC x C) . inp^T (C x BT)
//             W's bytes are W^T (C x OC), so A = W with op T (lda = C); inp's bytes are inp^T,
//             so B = inp with op N (ldb = C); D = out^T (ldd = OC); m = OC, n = BT, k = C.
//             The bias epilogue adds bias[i] to row i of D, i.e. to output channel i.
//   dinp      dinp = dout . W         transposed: dinp^T (C x BT) = W^T (C x OC) . dout^T (OC x BT)
//             A = W op N (lda = C), B = dout op N (ldb = OC), ldd = C; m = C, n = BT, k = OC.
//   dW        dW = dout^T . inp       transposed: dW^T (C x OC) = inp^T (C x BT) . dout (BT x OC)
//             A = inp op N (lda = C), B = dout op T (its bytes are dout^T, ldb = OC), ldd = C;
//             m = C, n = OC, k = BT; beta = 1 accumulates into the fp32 gradient.
//
// Each becomes a MatmulSpec for matmul_lt (matmul_lt.cuh).
#include "matmul_lt.cuh"

// The fused GELU backward epilogue (test_gpt2cu sets 0 to check the GELU kernel path too), tried
// only where the GELU pre-activation's leading dimension (4C) is a multiple of 8, as cuBLASLt
// documents for CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: even C (-e d2c63h7 has 4C = 252).
static int gelu_fusion = 1;

// out[BT][OC] = inp[BT][C] . W[OC][C]^T + bias
static void matmul_forward(floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int BT, int C, int OC) {
    MatmulSpec spec = matmul_spec(OC, BT, C, w, 1, C, inp, 0, C, out, CUDA_R_X, OC, 1.0f, 0.0f);
    spec.bias = bias;
    spec.shape.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    matmul_lt(&spec, 0);
}

// dinp = alpha dout . W (dinp_type CUDA_R_X or CUDA_R_32F; beta = 1 accumulates). With gelu_pre,
// the layer's input was GELU(gelu_pre) and dinp becomes dL/d(gelu_pre) (the fused DGELU epilogue,
// else the GELU kernel after the plain matmul).
static void matmul_backward_input(void* dinp, cudaDataType_t dinp_type, float beta, const floatX* dout, const floatX* w,
                                  int BT, int C, int OC, const floatX* gelu_pre, float alpha = 1.0f) {
    MatmulSpec spec = matmul_spec(C, BT, OC, w, 0, C, dout, 0, OC, dinp, dinp_type, C, alpha, beta);
    if (gelu_pre) {
        if (dinp_type != CUDA_R_X || beta != 0.0f) { fatal("matmul_backward_input: GELU backward needs a fresh floatX output"); }
        MatmulSpec fused = spec;
        fused.shape.epilogue = CUBLASLT_EPILOGUE_DGELU;
        fused.shape.ld_aux = C;
        fused.aux = (void*)gelu_pre;
        if (gelu_fusion && C % 8 == 0 && matmul_lt(&fused, 1)) { return; }
    }
    matmul_lt(&spec, 0);
    if (gelu_pre) { gelu_apply((floatX*)dinp, gelu_pre, (size_t)BT * C, 1); }
}

// dW += alpha dout^T . inp (fp32); dbias += the column sums of dout (deterministic kernel), when
// given (with alpha 1: the bias of a layer whose gradient is scaled has no column sum here)
static void matmul_backward_weight(float* dw, float* dbias, const floatX* dout, const floatX* inp, int BT, int C, int OC,
                                   float alpha = 1.0f) {
    if (dbias && alpha != 1.0f) { fatal("matmul_backward_weight: a bias gradient takes alpha 1"); }
    MatmulSpec spec = matmul_spec(C, OC, BT, inp, 0, C, dout, 1, OC, dw, CUDA_R_32F, C, alpha, 1.0f);
    matmul_lt(&spec, 0);
    if (dbias) { column_grads(dbias, dout, BT, OC); }
}

// ----------------------------------------------------------------------------
// causal self-attention: qkv rows are [q | k | v], each C = NH heads of HS = C/NH channels; per
// (b, head) out = causal softmax(q k^T / sqrt(HS)) v. Flash attention, in attention.cuh (a chapter
// of its own): q, k, v read straight from the qkv rows, the output written into the (B, T, C)
// rows the projection reads, and per row a log-sum-exp saved for the backward pass (no (B, NH, T,
// T) tensor). Head sizes 1 to 128 (gpt2_allocate checks, at start-up).

#include "attention.cuh"

// ----------------------------------------------------------------------------
// the fused classifier: softmax cross-entropy over the V real entries of each logits row (the
// entries V..Vp-1 are padding) and its gradient, in ONE pass over the row, the gradient written
// IN PLACE over the logits (the probabilities never exist as a tensor):
//     loss[row]  = lse - logit[target],        lse = log sum_{i < V} exp(logit_i)
//     dlogits[i] = (softmax_i - [i == target]) * dloss      (0 on the padding)
// with dloss = 1 / (B*T), the gradient of the mean loss.
//
// One block of CLASSIFIER_THREADS threads per row; each thread holds CLASSIFIER_PER_THREAD
// entries of the row in registers as fp32 (-inf for the padding), read in 4-byte units t,
// t + CLASSIFIER_THREADS, ... (coalesced). Then 1. the row max M (block_reduce); 2. e_i =
// exp(x_i - M) in place of x_i, and their sum S; 3. loss = M + log S - logit[target], and
// dlogits_i = e_i * (dloss / S), less dloss at the target. The row is read once and written once
// for rows of up to CLASSIFIER_TILE = 51200 entries (GPT-2's 50304 among them; 50 fp32 per thread
// fill 1024 threads' 64 registers without a spill): classifier_kernel<true>. A longer row takes
// classifier_kernel<false>, the same steps over tiles of the row, each loaded again per step.

#define CLASSIFIER_THREADS 1024
#define CLASSIFIER_PER_THREAD 50
#define CLASSIFIER_TILE (CLASSIFIER_THREADS * CLASSIFIER_PER_THREAD)
#define CLASSIFIER_W ((int)(4 / sizeof(floatX)))  // entries per 4-byte unit: 2 bf16, 1 fp32
#define CLASSIFIER_UNITS (CLASSIFIER_PER_THREAD / CLASSIFIER_W)  // units per thread
typedef Pack<floatX, CLASSIFIER_W> ClassifierUnit;

// the max (is_max) or the sum of v over the block, returned to every thread: each warp reduces by
// shuffles, its lane 0 posts the result in posts[warp] (shared memory), and after the barrier every
// thread combines the posts in warp order, so every thread gets the same bits. The posts must not
// be written again before every thread has read them: two reductions in a row use two arrays.
__device__ float block_reduce(float v, int is_max, float* posts) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) { posts[warp] = v; }
    __syncthreads();
    v = is_max ? -INFINITY : 0.0f;
    for (int w = 0; w < (int)blockDim.x / 32; w++) { v = is_max ? fmaxf(v, posts[w]) : v + posts[w]; }
    return v;
}

// the unit index of this thread's k-th unit of tile t
__device__ __forceinline__ int classifier_unit(int t, int k) {
    return t * (CLASSIFIER_TILE / CLASSIFIER_W) + threadIdx.x + k * CLASSIFIER_THREADS;
}

// x = this thread's units of tile t of the row, as fp32; -inf for the padding and past the row
__device__ __forceinline__ void classifier_load(float (*x)[CLASSIFIER_W], const floatX* row, int t, int V, int Vp) {
    for (int k = 0; k < CLASSIFIER_UNITS; k++) {
        int j = classifier_unit(t, k);
        if (j < Vp / CLASSIFIER_W) {
            ClassifierUnit u = load_pack<CLASSIFIER_W>(row + (size_t)j * CLASSIFIER_W);
            for (int e = 0; e < CLASSIFIER_W; e++) { x[k][e] = j * CLASSIFIER_W + e < V ? (float)u.v[e] : -INFINITY; }
        } else {
            for (int e = 0; e < CLASSIFIER_W; e++) { x[k][e] = -INFINITY; }
        }
    }
}

// x = exp(x - M) in place; returns their sum
__device__ __forceinline__ float classifier_exp(float (*x)[CLASSIFIER_W], float M) {
    float sum = 0.0f;
    for (int k = 0; k < CLASSIFIER_UNITS; k++) {
        for (int e = 0; e < CLASSIFIER_W; e++) {
            x[k][e] = expf(x[k][e] - M);
            sum += x[k][e];
        }
    }
    return sum;
}

template <bool WHOLE_ROW>
__global__ void __launch_bounds__(CLASSIFIER_THREADS)
    classifier_kernel(floatX* logits, float* losses, const int* targets, float dloss, int V, int Vp) {
    __shared__ float max_posts[CLASSIFIER_THREADS / 32], sum_posts[CLASSIFIER_THREADS / 32];
    int row = blockIdx.x;
    floatX* l = logits + (size_t)row * Vp;
    int target = targets[row];
    float target_logit = (float)l[target];  // read before any thread may overwrite the row
    int tiles = WHOLE_ROW ? 1 : ceil_div_dev(Vp, CLASSIFIER_TILE);
    float x[CLASSIFIER_UNITS][CLASSIFIER_W];
    // 1. the row max
    float thread_max = -INFINITY;
    for (int t = 0; t < tiles; t++) {
        classifier_load(x, l, t, V, Vp);
        for (int k = 0; k < CLASSIFIER_UNITS; k++) {
            for (int e = 0; e < CLASSIFIER_W; e++) { thread_max = fmaxf(thread_max, x[k][e]); }
        }
    }
    float M = block_reduce(thread_max, 1, max_posts);
    // 2. the sum of exp(x - M)
    float thread_sum = 0.0f;
    for (int t = 0; t < tiles; t++) {
        if (!WHOLE_ROW) { classifier_load(x, l, t, V, Vp); }
        thread_sum += classifier_exp(x, M);
    }
    float S = block_reduce(thread_sum, 0, sum_posts);
    if (threadIdx.x == 0) { losses[row] = M + logf(S) - target_logit; }
    // 3. dlogits, in place
    float scale = dloss / S;
    for (int t = 0; t < tiles; t++) {
        if (!WHOLE_ROW) {
            classifier_load(x, l, t, V, Vp);
            classifier_exp(x, M);
        }
        for (int k = 0; k < CLASSIFIER_UNITS; k++) {
            int j = classifier_unit(t, k);
            if (j >= Vp / CLASSIFIER_W) { continue; }
            ClassifierUnit g;
            for (int e = 0; e < CLASSIFIER_W; e++) {
                float d = x[k][e] * scale;  // 0 on the padding: exp(-inf) = 0
                g.v[e] = (floatX)(j * CLASSIFIER_W + e == target ? d - dloss : d);
            }
            store_pack<CLASSIFIER_W>(l + (size_t)j * CLASSIFIER_W, g);
        }
    }
}

// losses of every row of logits, and the rows overwritten by dL/dlogits for dloss = 1 / BT (above).
// The rows must be whole 4-byte units (the trainer's Vp is a multiple of 128).
static void classifier(floatX* logits, float* losses, const int* targets, int BT, int V, int Vp) {
    if ((uintptr_t)logits % 4 != 0 || Vp % CLASSIFIER_W != 0) {
        fatal("classifier: logits rows of %d entries are not whole 4-byte units", Vp);
    }
    auto kernel = Vp <= CLASSIFIER_TILE ? classifier_kernel<true> : classifier_kernel<false>;
    kernel<<<BT, CLASSIFIER_THREADS>>>(logits, losses, targets, 1.0f / BT, V, Vp);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// optimizer kernels

// partial sums of squares of the fp32 gradients, one per block; the host adds the partials in
// order (in double). The grid is a function of n alone (norm_blocks): every addition happens in an
// order fixed by n. Small tensors get few blocks (each thread sums at least NORM_PER_THREAD
// elements); GPT-2 sizes get NORM_MAX_BLOCKS, about two waves on a 132-SM H100.
#define NORM_THREADS 512
#define NORM_MAX_BLOCKS 1024
#define NORM_PER_THREAD 16

static int norm_blocks(size_t n) {
    size_t blocks = (n + NORM_THREADS * NORM_PER_THREAD - 1) / (NORM_THREADS * NORM_PER_THREAD);
    return blocks < 1 ? 1 : (blocks > NORM_MAX_BLOCKS ? NORM_MAX_BLOCKS : (int)blocks);
}

__global__ void sumsq_kernel(float* partials, const float* g, size_t n) {
    float sum = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        sum += g[i] * g[i];
    }
    sum = warp_sum(sum);
    __shared__ float ws[NORM_THREADS / 32];
    if (threadIdx.x % 32 == 0) { ws[threadIdx.x / 32] = sum; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < NORM_THREADS / 32; w++) { total += ws[w]; }
        partials[blockIdx.x] = total;
    }
}

// AdamW on one tensor, exactly as gpt2_update in train_gpt2.c, then the floatX copy-down
__global__ void adamw_kernel(float* param, floatX* param_x, const float* grad, float* m, float* v, size_t n, float lr,
                             float beta1, float beta2, float bc1, float bc2, float eps, float wd, float grad_scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float g = grad[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    float p = param[i];
    p -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
    param[i] = p;
    param_x[i] = (floatX)p;
}

// ============================================================================
// Part 2: the model
// ============================================================================

// the parameters, in checkpoint order: a pointer per tensor, named and shaped in common/params.h's
// PARAMETER_TENSORS, as in train_gpt2.c; their sizes come from fill_param_sizes. ParameterTensors
// (float) points into the fp32 gradients, ParameterTensorsX (floatX) into the working copy.
#define PARAM_FIELD(index, name) T* name;
template <typename T>
struct ParamPtrs { PARAMETER_TENSORS(PARAM_FIELD) };
typedef ParamPtrs<float> ParameterTensors;
typedef ParamPtrs<floatX> ParameterTensorsX;
static_assert(sizeof(ParameterTensors) == NUM_PARAMETER_TENSORS * sizeof(float*), "one pointer per tensor");

template <typename T>
static void point_parameters(ParamPtrs<T>* p, T* memory, const size_t sizes[NUM_PARAMETER_TENSORS]) {
    T** ptrs = (T**)p;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { ptrs[i] = memory; memory += sizes[i]; }
}

// The activations and the backward scratch live in one device allocation. next_tensor hands out
// the next n elements of type T of it, each tensor starting 256-byte aligned (what cuBLASLt
// and the 16-byte row kernels want); with memory NULL it only counts, so one function both sizes
// and points.
template <typename T>
static T* next_tensor(char* memory, size_t* used, size_t n) {
    T* t = memory ? (T*)(memory + *used) : NULL;
    *used += (n * sizeof(T) + 255) / 256 * 256;
    return t;
}

// the activations the backward pass needs, saved by the forward pass, as in train_gpt2.c: floatX,
// their statistics and the losses fp32. k indexes sublayers (2L), l layers; the math's names
// (dev/MODEL.md) are a = LN(x), r = a + LN(y) (post: x + z), u, z, h.
// Recompute (-r, train_gpt2.c's ActivationTensors says more): with -r 1, fch_gelu holds one layer,
// rebuilt in the backward from fch; with -r 2, also lnsum and blockin hold one sublayer, rebuilt
// from the streams and the saved statistics, and lnx two (the forward's update of sublayer k reads
// a of sublayer k - 1; the backward never reads a).
// X(type, name, elements, what it holds), the elements in the sizes point_buffers defines. A
// factor S (two streams), R (r stored) or U (u stored) of 0 leaves empty a tensor the mode has no
// use for (common/params.h, NORM_MODE_LAYOUTS).
#define ACTIVATION_TENSORS(X) \
    X(floatX, resx, (2 * L + 1) * BT * C)       /* stream X at each sublayer boundary; resx[0] is e */ \
    X(floatX, resy, S * (2 * L + 1) * BT * C)   /* siamese: stream Y */ \
    X(floatX, lnx, S * a_sublayers * BT * C)    /* siamese: a = LN(x), the base of the X update */ \
    X(floatX, lnsum, R * ln_sublayers * BT * C) /* r, what the main LN normalises: siamese a + LN(y), post x + z */ \
    X(floatX, blockin, U * ln_sublayers * BT * C) /* the block input u: pre LN(x), siamese LN(r); post reads x */ \
    X(float, ln_mean, 2 * L * BT)               /* statistics of the sublayer's main LN (ln1 / ln2) */ \
    X(float, ln_rstd, 2 * L * BT) \
    X(float, lnx_mean, S * 2 * L * BT)          /* siamese: statistics of LN(x) */ \
    X(float, lnx_rstd, S * 2 * L * BT) \
    X(float, lny_mean, S * 2 * L * BT)          /* siamese: statistics of LN(y) */ \
    X(float, lny_rstd, S * 2 * L * BT) \
    X(floatX, qkv, L * BT * 3 * C) \
    X(float, att_lse, L * B * NH * T)           /* each attention row's log-sum-exp, all its backward needs */ \
    X(floatX, atty, L * BT * C)                 /* attention output before its projection */ \
    X(floatX, fch, L * BT * 4 * C)              /* MLP hidden pre-activation */ \
    X(floatX, fch_gelu, gelu_layers * BT * 4 * C) /* GELU(fch) */ \
    X(floatX, blockout, 2 * L * BT * C)         /* z, the block output */ \
    X(floatX, lnfsum, S * BT * C)               /* siamese: r of the final merge, LN(x; lnfx) + LN(y; lnfy) */ \
    X(float, lnfx_mean, S * BT)                 /* siamese: statistics of the final LN(x) */ \
    X(float, lnfx_rstd, S * BT) \
    X(float, lnfy_mean, S * BT)                 /* siamese: statistics of the final LN(y) */ \
    X(float, lnfy_rstd, S * BT) \
    X(floatX, lnf, BT * C)                      /* h, the final LN output */ \
    X(float, lnf_mean, BT) \
    X(float, lnf_rstd, BT) \
    X(floatX, logits, BT * Vp)                  /* overwritten by dL/dlogits in a forward pass with targets */ \
    X(float, losses, BT)

#define DECLARE_TENSOR(T, name, n) T* name;

typedef struct {
    ACTIVATION_TENSORS(DECLARE_TENSOR)
} ActivationTensors;

// scratch for the backward pass, reused by every layer (only the streams' gradients travel): the
// gradients of the streams and of LayerNorm inputs in fp32, the matmuls' operands in floatX
#define SCRATCH_TENSORS(X) \
    X(float, dx, BT * C)        /* dL/d(stream X) at the current sublayer boundary */ \
    X(float, dy, S * BT * C)    /* siamese: dL/d(stream Y) */ \
    X(floatX, dz, BT * C)       /* dL/dz, the block output gradient */ \
    X(float, du, BT * C)        /* dL/du, the block input gradient (dL/dh at the top) */ \
    X(floatX, datty, BT * C) \
    X(floatX, dqkv, BT * 3 * C) \
    X(floatX, dfch, BT * 4 * C) /* dL/d(MLP pre-activation) */ \
    X(float, att_dot, B * NH * T) /* attention: sum_c dO O per row */ \
    X(float, att_dq, flash_dq_acc_floats_upto(B, (int)NH, T, (int)(C / NH))) /* attention: the fp32 dQ splits */

typedef struct {
    SCRATCH_TENSORS(DECLARE_TENSOR)
} GradScratch;

#define CARVE_ACTIVATION(T, name, n) acts->name = next_tensor<T>(memory, &used, n);
#define CARVE_SCRATCH(T, name, n) scratch->name = next_tensor<T>(memory, &used, n);

// points every activation tensor, then every scratch tensor, into `memory` (NULL: only counts);
// returns the bytes they take, those of the activations in *acts_bytes (recompute: -r, 0 to 2)
static size_t point_buffers(ActivationTensors* acts, GradScratch* scratch, size_t* acts_bytes, char* memory,
                            const GPT2Config* cfg, int B, int T, int recompute) {
    size_t L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads, Vp = cfg->padded_vocab_size;
    size_t BT = (size_t)B * T;
    const NormModeLayout* mode = norm_mode_layout(cfg->norm_mode);
    size_t S = mode->two_streams, U = mode->block_input, R = mode->ln_sum;
    size_t gelu_layers = recompute >= 1 ? 1 : L;       // layers of fch_gelu kept
    size_t ln_sublayers = recompute >= 2 ? 1 : 2 * L;  // sublayers of lnsum and blockin kept
    size_t a_sublayers = recompute >= 2 ? 2 : 2 * L;   // and of lnx
    size_t used = 0;
    ACTIVATION_TENSORS(CARVE_ACTIVATION)
    *acts_bytes = used;
    SCRATCH_TENSORS(CARVE_SCRATCH)
    return used;
}

typedef struct GPT2 {
    GPT2Config config;
    size_t param_sizes[NUM_PARAMETER_TENSORS];  // floats in each parameter tensor (common/params.h)
    size_t num_parameters;
    size_t padded_parameters;   // num_parameters and zeros up to a multiple of the ranks (common/dist.h)
    float* host_params;         // host fp32: checkpoint load and save
    float *host_m, *host_v;     // host copies for the training loop (allocated on first use): AdamW's
    floatX* host_row_x;         // moments, and one logits row as the GPU holds it and in fp32
    float* host_row;
    float* params_memory;       // device fp32 master weights, of parameters [opt_lo, opt_hi)
    ParameterTensorsX params_x; // the floatX working copy, pointing into params_x_memory
    floatX* params_x_memory;    // device, all parameters and the zero padding
    ParameterTensors grads;     // the same layout, pointing into grads_memory
    float* grads_memory;        // device fp32, all parameters and the zero padding
    float *m_memory, *v_memory; // device fp32 AdamW moments, of parameters [opt_lo, opt_hi)
    size_t opt_lo, opt_hi;      // all parameters (set by gpt2_allocate), or a rank's shard (ZeRO-1: set before it)
    ActivationTensors acts;
    GradScratch scratch;
    char* buffers_memory;       // device: every activation tensor, then every scratch tensor
    size_t acts_bytes, scratch_bytes;
    int batch_size, seq_len;    // the (B, T) the buffers were allocated for
    int recompute;              // -r: 0, 1 or 2 (ActivationTensors); set before gpt2_allocate, 0 unless set
    int cur_B, cur_T;           // the (B, T) of the last forward pass
    int *inputs, *targets;      // pinned host (B, T): the tokens of the last forward pass, its targets
    int *d_inputs, *d_targets;  // device copies
    int has_targets;            // the last forward pass had targets: the logits hold dL/dlogits
    float* host_losses;         // pinned (B, T)
    TokenChunks chunks;         // the embedding gradient's work list of the last forward pass with targets
    float *d_norm_partials, *host_norm_partials;  // (NORM_MAX_BLOCKS) device and pinned
    // NULL in training; test_gpt2.cu's view of the stream gradients: gpt2_backward calls it at every
    // sublayer boundary b (2L down to 0) with the DEVICE fp32 dL/dx and dL/dy (NULL outside siamese)
    void (*stream_grad_hook)(void* ctx, int boundary, const float* dx, const float* dy);
    void* stream_grad_ctx;
} GPT2;

// The model is built in two halves: on the host as in train_gpt2.c (the config and the fp32
// weights, read from a checkpoint or freshly initialised; no GPU needed, so a bad checkpoint is
// refused the same way on any machine), then uploaded (gpt2_allocate). This sets the config and
// allocates the host weights (not yet initialised).
static void gpt2_init_params(GPT2* m, const GPT2Config* cfg) {
    memset(m, 0, sizeof(*m));
    m->config = *cfg;
    fill_param_sizes(m->param_sizes, cfg);
    m->num_parameters = count_parameters(cfg);
    m->host_params = (float*)malloc_check(m->num_parameters * sizeof(float), "parameters");
}

// our checkpoint, or llm.c's GPT-2 (float32 or bf16) as a pre-mode model (common/params.h)
static void gpt2_build_from_checkpoint(GPT2* m, const char* path) {
    CheckpointFile ck;
    checkpoint_open(&ck, path);
    gpt2_init_params(m, &ck.config);
    checkpoint_read_params(&ck, m->host_params);
}

// on the host with common/params.h, so train_gpt2 and train_gpt2cu start from bit-identical
// models for the same seed
static void gpt2_build_fresh(GPT2* m, const GPT2Config* cfg, uint64_t seed) {
    gpt2_init_params(m, cfg);
    params_init_fresh(m->host_params, cfg, seed);
}

// uploads the weights (host_params -> device fp32 master weights -> floatX working copy) and
// allocates, once, everything training with micro-batches of (B, T) needs
static void gpt2_allocate(GPT2* m, int B, int T) {
    const GPT2Config* cfg = &m->config;
    size_t n = m->num_parameters, BT = (size_t)B * T, C = cfg->channels;
    char why[200];  // attention's head size on this GPU (its shared memory): refused before anything is allocated
    if (!flash_attention_supported(cfg->channels / cfg->num_heads, why, sizeof(why))) { fatal("%s", why); }
    if (m->opt_hi == 0) { m->opt_hi = n; }
    if (m->padded_parameters < n) { m->padded_parameters = n; }
    size_t held = m->opt_hi - m->opt_lo;  // ZeRO-1: the master weights and moments of this rank's shard only
    m->params_x_memory = (floatX*)cuda_malloc_check(m->padded_parameters * sizeof(floatX), "working weights");
    point_parameters(&m->params_x, m->params_x_memory, m->param_sizes);
    float* all = (float*)cuda_malloc_check(n * sizeof(float), "master weights");
    cudaCheck(cudaMemcpy(all, m->host_params, n * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(m->params_x_memory, 0, m->padded_parameters * sizeof(floatX)));  // the padding stays 0
    cast_to_x(m->params_x_memory, all, n);
    if (held == n) {
        m->params_memory = all;
    } else {
        m->params_memory = (float*)cuda_malloc_check(held * sizeof(float), "master weights (shard)");
        cudaCheck(cudaMemcpy(m->params_memory, all + m->opt_lo, held * sizeof(float), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaDeviceSynchronize());
        cudaCheck(cudaFree(all));
    }
    m->batch_size = B;
    m->seq_len = T;
    m->grads_memory = (float*)cuda_malloc_check(m->padded_parameters * sizeof(float), "gradients");
    point_parameters(&m->grads, m->grads_memory, m->param_sizes);
    m->m_memory = (float*)cuda_malloc_check(held * sizeof(float), "AdamW m");
    m->v_memory = (float*)cuda_malloc_check(held * sizeof(float), "AdamW v");
    cudaCheck(cudaMemset(m->m_memory, 0, held * sizeof(float)));
    cudaCheck(cudaMemset(m->v_memory, 0, held * sizeof(float)));  // the gradients: gpt2_zero_grad, every step
    size_t bytes = point_buffers(&m->acts, &m->scratch, &m->acts_bytes, NULL, cfg, B, T, m->recompute);
    m->scratch_bytes = bytes - m->acts_bytes;
    m->buffers_memory = (char*)cuda_malloc_check(bytes, "activations and backward scratch");
    point_buffers(&m->acts, &m->scratch, &m->acts_bytes, m->buffers_memory, cfg, B, T, m->recompute);
    // what moves between host and GPU in a training step sits in pinned host memory (gpt2_forward)
    m->inputs = (int*)pinned_malloc_check(BT * sizeof(int), "inputs");
    m->targets = (int*)pinned_malloc_check(BT * sizeof(int), "targets");
    m->d_inputs = (int*)cuda_malloc_check(BT * sizeof(int), "inputs");
    m->d_targets = (int*)cuda_malloc_check(BT * sizeof(int), "targets");
    m->host_losses = (float*)pinned_malloc_check(BT * sizeof(float), "losses");
    token_chunks_alloc(&m->chunks, cfg->vocab_size, (int)BT);
    m->d_norm_partials = (float*)cuda_malloc_check(NORM_MAX_BLOCKS * sizeof(float), "norm partials");
    m->host_norm_partials = (float*)pinned_malloc_check(NORM_MAX_BLOCKS * sizeof(float), "norm partials");
    // the widest column sum: the MLP's up-projection bias, 4C columns; the LayerNorm backwards'
    // block sums: 6 per input side in siamese mode, 2 per LayerNorm otherwise
    partials_reserve(&column_partials, 4 * C);
    partials_reserve(&ln_partials, (norm_mode_layout(cfg->norm_mode)->two_streams ? SIAMESE_SUMS : 2) * C);
}

static void gpt2_free(GPT2* m) {
    void* device[] = {m->params_memory,  m->params_x_memory, m->grads_memory, m->m_memory,       m->v_memory,
                      m->buffers_memory, m->d_inputs,        m->d_targets,    m->d_norm_partials};
    void* pinned[] = {m->inputs, m->targets, m->host_losses, m->host_norm_partials};
    for (size_t i = 0; i < sizeof(device) / sizeof(device[0]); i++) { cudaCheck(cudaFree(device[i])); }
    for (size_t i = 0; i < sizeof(pinned) / sizeof(pinned[0]); i++) { cudaCheck(cudaFreeHost(pinned[i])); }
    void* host[] = {m->host_params, m->host_m, m->host_v, m->host_row_x, m->host_row};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) { free(host[i]); }
    if (m->inputs) { token_chunks_free(&m->chunks); }
    partials_free(&column_partials);  // reserved by gpt2_allocate
    partials_free(&ln_partials);
}

// the three LayerNorms of sublayer s (0 attention, 1 MLP) of layer l, for parameters or gradients
// (outside siamese mode only w and b, ln1 or ln2, are used)
template <typename T>
static SiameseNormsT<T> sublayer_norms(const ParamPtrs<T>* p, int l, int s, int C) {
    size_t o = (size_t)l * C;
    SiameseNormsT<T> n;
    n.xw = (s == 0 ? p->lnx1w : p->lnx2w) + o;
    n.xb = (s == 0 ? p->lnx1b : p->lnx2b) + o;
    n.yw = (s == 0 ? p->lny1w : p->lny2w) + o;
    n.yb = (s == 0 ? p->lny1b : p->lny2b) + o;
    n.w = (s == 0 ? p->ln1w : p->ln2w) + o;
    n.b = (s == 0 ? p->ln1b : p->ln2b) + o;
    return n;
}

template <typename T>
static SiameseNormsT<T> final_norms(const ParamPtrs<T>* p) {
    SiameseNormsT<T> n = {p->lnfxw, p->lnfxb, p->lnfyw, p->lnfyb, p->lnfw, p->lnfb};
    return n;
}

static SiameseStats final_stats(const ActivationTensors* acts) {
    SiameseStats st = {acts->lnfx_mean, acts->lnfx_rstd, acts->lnfy_mean, acts->lnfy_rstd, acts->lnf_mean, acts->lnf_rstd};
    return st;
}

// sublayer k's activations, where the forward pass writes them and the backward pass reads them
typedef struct {
    int l, s;               // its layer k / 2, and 0 attention or 1 MLP
    floatX *x, *y;          // the streams entering it (y: siamese)
    floatX *a, *r, *u, *z;  // a = LN(x), r, the block input u (post: x itself), the block output z
    floatX* gelu;           // the MLP's GELU output
    SiameseStats st;        // its LayerNorms' statistics (mean, rstd: the main LN's, in every mode)
} Sublayer;

static Sublayer sublayer_at(const GPT2* m, int k, int BT) {
    const ActivationTensors* t = &m->acts;
    size_t N = (size_t)BT * m->config.channels, K = (size_t)k * BT;
    size_t a_slot = m->recompute >= 2 ? k % 2 : k, ln_slot = m->recompute >= 2 ? 0 : k;
    Sublayer sub;
    sub.l = k / 2;
    sub.s = k % 2;
    sub.x = t->resx + k * N;
    sub.y = t->resy + k * N;
    sub.a = t->lnx + a_slot * N;
    sub.r = t->lnsum + ln_slot * N;
    sub.u = m->config.norm_mode == NORM_POST ? sub.x : t->blockin + ln_slot * N;
    sub.z = t->blockout + k * N;
    sub.gelu = t->fch_gelu + (m->recompute >= 1 ? 0 : sub.l) * 4 * N;
    sub.st = {t->lnx_mean + K, t->lnx_rstd + K, t->lny_mean + K, t->lny_rstd + K, t->ln_mean + K, t->ln_rstd + K};
    return sub;
}

// ----------------------------------------------------------------------------
// forward

// the block of a sublayer: z = Attn_l(u) or z = MLP_l(u)
static void block_forward(GPT2* m, const Sublayer* sub, int B, int T) {
    const GPT2Config* cfg = &m->config;
    int C = cfg->channels, NH = cfg->num_heads, BT = B * T, l = sub->l;
    ParameterTensorsX* p = &m->params_x;
    ActivationTensors* acts = &m->acts;
    size_t lBT = (size_t)l * BT;
    if (sub->s == 0) {
        floatX* qkv = acts->qkv + lBT * 3 * C;
        floatX* atty = acts->atty + lBT * C;
        matmul_forward(qkv, sub->u, p->qkvw + (size_t)l * 3 * C * C, p->qkvb + (size_t)l * 3 * C, BT, C, 3 * C);
        flash_attention_forward(atty, acts->att_lse + lBT * NH, qkv, B, T, C, NH);
        matmul_forward(sub->z, atty, p->attprojw + (size_t)l * C * C, p->attprojb + (size_t)l * C, BT, C, C);
    } else {
        floatX* fch = acts->fch + lBT * 4 * C;
        matmul_forward(fch, sub->u, p->fcw + (size_t)l * 4 * C * C, p->fcb + (size_t)l * 4 * C, BT, C, 4 * C);
        gelu_apply(sub->gelu, fch, (size_t)BT * 4 * C, 0);
        matmul_forward(sub->z, sub->gelu, p->fcprojw + (size_t)l * C * 4 * C, p->fcprojb + (size_t)l * C, BT, 4 * C, C);
    }
}

// forward pass on host tokens (B, T); with targets, returns the mean cross-entropy loss (else -1)
// and the logits are replaced by dL/dlogits (the classifier). B and T may be smaller than
// allocated (sampling runs B = 1).
static float gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T) {
    const GPT2Config* cfg = &m->config;
    if (B > m->batch_size || T > m->seq_len || B < 1 || T < 1) {
        fatal("gpt2_forward: batch (%d, %d) exceeds the allocated (%d, %d)", B, T, m->batch_size, m->seq_len);
    }
    int V = cfg->vocab_size, Vp = cfg->padded_vocab_size, L = cfg->num_layers, C = cfg->channels;
    int BT = B * T;
    check_tokens(inputs, targets, BT, V);
    m->cur_B = B;
    m->cur_T = T;
    // The tokens go to the GPU from pinned host buffers with cudaMemcpyAsync on the default stream,
    // where every kernel here runs: the host does not wait, and the kernels below queue behind the
    // copies. The host waits for the pass at its end, so the next one may rewrite the buffers.
    memcpy(m->inputs, inputs, (size_t)BT * sizeof(int));
    cudaCheck(cudaMemcpyAsync(m->d_inputs, m->inputs, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, 0));
    m->has_targets = targets != NULL;
    if (targets) {
        memcpy(m->targets, targets, (size_t)BT * sizeof(int));
        cudaCheck(cudaMemcpyAsync(m->d_targets, m->targets, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, 0));
    }

    ParameterTensorsX* p = &m->params_x;
    ActivationTensors* acts = &m->acts;
    size_t N = (size_t)BT * C;  // elements in one (B, T, C) tensor
    NormMode mode = cfg->norm_mode;

    // siamese: the update of each sublayer runs inside the next input side's kernel
    floatX* resy = norm_mode_layout(mode)->two_streams ? acts->resy : NULL;  // both streams start as e
    encoder_forward_kernel<<<ceil_div((long)N, 256), 256>>>(acts->resx, resy, m->d_inputs, p->wte, p->wpe, BT, T, C);
    cudaCheckLaunch();

    for (int k = 0; k < 2 * L; k++) {
        Sublayer sub = sublayer_at(m, k, BT);
        SiameseNorms ln = sublayer_norms(p, sub.l, sub.s, C);
        floatX* x_next = sub.x + N;  // stream X after the sublayer (pre, post)
        switch (mode) {  // no default: -Wswitch names a mode this does not handle
            case NORM_PRE:
                layernorm_forward(sub.u, sub.st.mean, sub.st.rstd, sub.x, ln.w, ln.b, BT, C);   // u = LN(x)
                block_forward(m, &sub, B, T);                                                   // z = F(u)
                residual_forward(x_next, sub.x, sub.z, N);                                      // x = x + z
                break;
            case NORM_POST:
                block_forward(m, &sub, B, T);                                                   // z = F(x)
                residual_forward(sub.r, sub.x, sub.z, N);                                       // r = x + z
                layernorm_forward(x_next, sub.st.mean, sub.st.rstd, sub.r, ln.w, ln.b, BT, C);  // x = LN(r)
                break;
            case NORM_SIAMESE:
                // a = LN(x), r = a + LN(y), u = LN(r); after the first sublayer, x and y come from
                // the update of sublayer k - 1 (x = a + z/c, y = y + z), in the same kernel
                if (k > 0) {
                    Sublayer prev = sublayer_at(m, k - 1, BT);
                    siamese_update_input_forward(sub.x, sub.y, prev.a, prev.y, prev.z, siamese_scale(prev.l), sub.a,
                                                 sub.r, sub.u, sub.st, ln, BT, C);
                } else {
                    siamese_input_forward(sub.a, sub.r, sub.u, sub.st, sub.x, sub.y, ln, BT, C);
                }
                block_forward(m, &sub, B, T);                                                   // z = F(u)
                break;
        }
    }

    floatX* x_final = acts->resx + 2 * L * N;
    switch (mode) {
        case NORM_PRE:
        case NORM_POST:
            layernorm_forward(acts->lnf, acts->lnf_mean, acts->lnf_rstd, x_final, p->lnfw, p->lnfb, BT, C);  // h = LN(x)
            break;
        case NORM_SIAMESE: {
            // the update of the last sublayer, then h = LN(LN(x) + LN(y))
            Sublayer last = sublayer_at(m, 2 * L - 1, BT);
            siamese_update_input_forward(x_final, acts->resy + 2 * L * N, last.a, last.y, last.z, siamese_scale(L - 1),
                                         NULL, acts->lnfsum, acts->lnf, final_stats(acts), final_norms(p), BT, C);
            break;
        }
    }
    matmul_forward(acts->logits, acts->lnf, p->wte, NULL, BT, C, Vp);                // tied output layer
    if (targets) {
        classifier(acts->logits, acts->losses, m->d_targets, BT, V, Vp);  // the logits become dL/dlogits
        // the embedding gradient's work list: host work, done while the GPU runs the forward pass
        // just enqueued (kernel launches return at once); its upload queues behind them, and the
        // wait for the losses below waits for it too, before the next forward pass rewrites the list
        token_chunks_build(&m->chunks, m->inputs, BT);
        token_chunks_upload(&m->chunks);
        // the one wait of a forward pass in training: for the losses, after every copy and kernel above
        cudaCheck(cudaMemcpy(m->host_losses, acts->losses, (size_t)BT * sizeof(float), cudaMemcpyDeviceToHost));
        double sum = 0.0;
        for (int i = 0; i < BT; i++) { sum += m->host_losses[i]; }
        return (float)(sum / BT);
    }
    cudaCheck(cudaDeviceSynchronize());  // no loss to wait for; the caller reads the logits next (sampling)
    return -1.0f;
}

// ----------------------------------------------------------------------------
// backward

static void gpt2_zero_grad(GPT2* m) { cudaCheck(cudaMemset(m->grads_memory, 0, m->padded_parameters * sizeof(float))); }

// backward of the block of a sublayer given dz (in scratch): du = (beta 0) or += (beta 1) dL/du,
// in fp32, and the weight gradients
static void block_backward(GPT2* m, const Sublayer* sub, float* du, float beta, int B, int T) {
    const GPT2Config* cfg = &m->config;
    int C = cfg->channels, NH = cfg->num_heads, BT = B * T, l = sub->l;
    ParameterTensorsX* p = &m->params_x;
    ParameterTensors* g = &m->grads;
    ActivationTensors* acts = &m->acts;
    GradScratch* sc = &m->scratch;
    size_t lBT = (size_t)l * BT;
    const floatX *dz = sc->dz, *u = sub->u;
    if (sub->s == 0) {
        size_t wo = (size_t)l * C * C;
        matmul_backward_input(sc->datty, CUDA_R_X, 0.0f, dz, p->attprojw + wo, BT, C, C, NULL);
        matmul_backward_weight(g->attprojw + wo, g->attprojb + (size_t)l * C, dz, acts->atty + lBT * C, BT, C, C);
        flash_attention_backward(sc->dqkv, sc->att_dq, sc->att_dot, sc->datty, acts->qkv + lBT * 3 * C, acts->atty + lBT * C,
                                 acts->att_lse + lBT * NH, B, T, C, NH, flash_dq_splits(B * NH, T));
        matmul_backward_input(du, CUDA_R_32F, beta, sc->dqkv, p->qkvw + 3 * wo, BT, C, 3 * C, NULL);
        matmul_backward_weight(g->qkvw + 3 * wo, g->qkvb + (size_t)l * 3 * C, sc->dqkv, u, BT, C, 3 * C);
    } else {
        size_t wo = (size_t)l * 4 * C * C;
        floatX* fch = acts->fch + lBT * 4 * C;
        matmul_backward_input(sc->dfch, CUDA_R_X, 0.0f, dz, p->fcprojw + wo, BT, 4 * C, C, fch);  // through GELU too
        if (m->recompute >= 1) { gelu_apply(sub->gelu, fch, (size_t)BT * 4 * C, 0); }  // rebuilt as the forward
        matmul_backward_weight(g->fcprojw + wo, g->fcprojb + (size_t)l * C, dz, sub->gelu, BT, 4 * C, C);
        matmul_backward_input(du, CUDA_R_32F, beta, sc->dfch, p->fcw + wo, BT, C, 4 * C, NULL);
        matmul_backward_weight(g->fcw + wo, g->fcb + (size_t)l * 4 * C, sc->dfch, u, BT, C, 4 * C);
    }
}

// backward pass of the last forward pass (which must have had targets); ACCUMULATES into m->grads.
// loss_scale multiplies the loss, e.g. 1/grad_accum_steps so accumulated gradients are a mean.
static void gpt2_backward(GPT2* m, float loss_scale) {
    if (!m->has_targets) { fatal("gpt2_backward: the last forward pass had no targets"); }
    const GPT2Config* cfg = &m->config;
    int B = m->cur_B, T = m->cur_T, BT = B * T;
    int Vp = cfg->padded_vocab_size, L = cfg->num_layers, C = cfg->channels;
    ParameterTensorsX* p = &m->params_x;
    ParameterTensors* g = &m->grads;
    ActivationTensors* acts = &m->acts;
    GradScratch* sc = &m->scratch;
    size_t N = (size_t)BT * C;
    NormMode mode = cfg->norm_mode;
    const float* dy = norm_mode_layout(mode)->two_streams ? sc->dy : NULL;  // dL/d(stream Y), siamese only

    // the tied output layer, from the dlogits the forward pass left (for dloss = 1 / BT; the loss
    // scale is the matmuls' alpha): dh (fp32, in du) and dwte
    matmul_backward_input(sc->du, CUDA_R_32F, 0.0f, acts->logits, p->wte, BT, C, Vp, NULL, loss_scale);
    matmul_backward_weight(g->wte, NULL, acts->logits, acts->lnf, BT, C, Vp, loss_scale);

    // the final LayerNorm(s): dx (and dy) at the last boundary
    floatX* x_final = acts->resx + 2 * L * N;
    switch (mode) {  // no default: -Wswitch names a mode this does not handle
        case NORM_PRE:
        case NORM_POST:
            layernorm_backward(sc->dx, NULL, g->lnfw, g->lnfb, sc->du, x_final, p->lnfw, acts->lnf_mean, acts->lnf_rstd, BT,
                               C, 0);
            break;
        case NORM_SIAMESE:
            // the final merge (nothing flows into dx, dy: they start here), and dz of the last
            // sublayer (its update's backward, scale c_{L-1})
            siamese_input_backward(sc->dx, sc->dy, sc->dz, siamese_scale(L - 1), 0, sc->du, final_norms(g),
                                   final_norms(p), final_stats(acts), x_final, acts->resy + 2 * L * N, acts->lnfsum, BT, C);
            break;
    }
    if (m->stream_grad_hook) { m->stream_grad_hook(m->stream_grad_ctx, 2 * L, sc->dx, dy); }

    // the sublayers, last to first; dx (dy) enter holding dL/d(stream) after sublayer k, leave before it
    for (int k = 2 * L - 1; k >= 0; k--) {
        Sublayer sub = sublayer_at(m, k, BT);
        SiameseNorms ln = sublayer_norms(p, sub.l, sub.s, C);
        SiameseNormGrads dln = sublayer_norms(g, sub.l, sub.s, C);
        float *mean = sub.st.mean, *rstd = sub.st.rstd;
        int rebuild = m->recompute >= 2;  // r and u of this sublayer again, as the forward made them
        switch (mode) {
            case NORM_PRE:
                // x_next = x + F(LN(x)): dz = dx_next, and dx = dx_next + LN_back(du)
                if (rebuild) { layernorm_forward(sub.u, mean, rstd, sub.x, ln.w, ln.b, BT, C, true); }
                cast_to_x(sc->dz, sc->dx, N);
                block_backward(m, &sub, sc->du, 0.0f, B, T);
                layernorm_backward(sc->dx, NULL, dln.w, dln.b, sc->du, sub.x, ln.w, mean, rstd, BT, C, 1);
                break;
            case NORM_POST:
                // x_next = LN(x + F(x)): dr = LN_back(dx_next) (in place in dx, floatX copy in dz);
                // dz = dr; dx = dr + F_back(dr) (the block's input gradient accumulates into dx)
                if (rebuild) { residual_forward(sub.r, sub.x, sub.z, N); }
                layernorm_backward(sc->dx, sc->dz, dln.w, dln.b, sc->dx, sub.r, ln.w, mean, rstd, BT, C, 0);
                block_backward(m, &sub, sc->dx, 1.0f, B, T);
                break;
            case NORM_SIAMESE:
                // dz = dx_next / c + dy_next was written by the input side after this sublayer; the
                // block; then the three LNs of the input side, which also write dz of sublayer k - 1
                if (rebuild) { siamese_input_forward(NULL, sub.r, sub.u, sub.st, sub.x, sub.y, ln, BT, C, true); }
                block_backward(m, &sub, sc->du, 0.0f, B, T);
                siamese_input_backward(sc->dx, sc->dy, k > 0 ? sc->dz : NULL, siamese_scale((k - 1) / 2), 1, sc->du,
                                       dln, ln, sub.st, sub.x, sub.y, sub.r, BT, C);
                break;
        }
        if (m->stream_grad_hook) { m->stream_grad_hook(m->stream_grad_ctx, k, sc->dx, dy); }
    }

    // the embedding feeds both streams when there are two: dL/de = dx + dy
    wte_backward(g->wte, sc->du, N, sc->dx, dy, &m->chunks, C);  // du is free now: the partial rows
    wpe_backward_kernel<<<ceil_div((long)T * C, 256), 256>>>(g->wpe, sc->dx, dy, B, T, C);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// optimizer

// the sum of squares of gradients [lo, hi) (sumsq_kernel). The host waits here for the partials:
// the loop needs the norm for clipping and for its finite check.
static double gpt2_grad_sumsq(GPT2* m, size_t lo, size_t hi) {
    int blocks = norm_blocks(hi - lo);
    sumsq_kernel<<<blocks, NORM_THREADS>>>(m->d_norm_partials, m->grads_memory + lo, hi - lo);
    cudaCheckLaunch();
    cudaCheck(cudaMemcpy(m->host_norm_partials, m->d_norm_partials, blocks * sizeof(float), cudaMemcpyDeviceToHost));
    double total = 0.0;
    for (int i = 0; i < blocks; i++) { total += m->host_norm_partials[i]; }
    return total;
}

// AdamW step `t` (1-based) of parameters [lo, hi) (within [opt_lo, opt_hi), whose master weights
// and moments the model holds), as gpt2_update_range in train_gpt2.c; refreshes their floatX copy
static void gpt2_update_range(GPT2* m, float lr, float beta1, float beta2, float eps, float weight_decay,
                              float grad_scale, int t, size_t lo, size_t hi) {
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);  // bias corrections
    ParamSlice slices[NUM_PARAMETER_TENSORS];
    int num_slices = param_slices(m->param_sizes, lo, hi, slices);  // [lo, hi) cut at the tensors
    for (int i = 0; i < num_slices; i++) {
        size_t start = slices[i].start, n = slices[i].n, held = start - m->opt_lo;
        float wd = param_tensor_decays(slices[i].tensor) ? weight_decay : 0.0f;
        adamw_kernel<<<ceil_div((long)n, 256), 256>>>(m->params_memory + held, m->params_x_memory + start,
                                                      m->grads_memory + start, m->m_memory + held, m->v_memory + held,
                                                      n, lr, beta1, beta2, bc1, bc2, eps, wd, grad_scale);
        cudaCheckLaunch();
    }
}

#ifndef TESTING
// ============================================================================
// Part 3: training
// ============================================================================
// The loop itself (flags, data, evaluation, sampling, checkpoints, the step line) is shared with
// train_gpt2.c in common/train_loop.h; it reaches the model only through the functions main()
// hands it (TrainerOps). What it reads on the host (a logits row, the weights and moments of a
// checkpoint) is copied back here.
#include "common/train_loop.h"

// Each training step is an NVTX range "step", from zero_grad (its first call) to the wait at its
// end (sync), so that a profiler can select whole steps (dev/gpu_check.sh: ncu --nvtx
// --nvtx-include step/); with no profiler attached, push and pop return at once. A step whose
// update is skipped (non-finite) has no wait at its end: its range ends at the next push.
#include <nvtx3/nvToolsExt.h>
static int step_range_open = 0;
static void gpu_zero_grad(GPT2* m) {
    if (step_range_open) { nvtxRangePop(); }
    nvtxRangePushA("step");
    step_range_open = 1;
    gpt2_zero_grad(m);
}
static void gpu_sync(GPT2*) {
    cudaCheck(cudaDeviceSynchronize());
    if (step_range_open) { nvtxRangePop(); step_range_open = 0; }
}
static const float* gpu_logits_row(GPT2* m, size_t row) {
    if (m->has_targets) { fatal("logits_row: the last forward pass had targets; its logits hold dL/dlogits"); }
    size_t Vp = m->config.padded_vocab_size;
    const floatX* row_x =
        (const floatX*)download_into((void**)&m->host_row_x, m->acts.logits + row * Vp, Vp * sizeof(floatX));
    if (!m->host_row) { m->host_row = (float*)malloc_check(Vp * sizeof(float), "logits row (host)"); }
    for (size_t j = 0; j < Vp; j++) { m->host_row[j] = (float)row_x[j]; }
    return m->host_row;
}
// the fp32 master weights this rank holds, at their place among all parameters
static const float* gpu_weights(GPT2* m) {
    cudaCheck(cudaMemcpy(m->host_params + m->opt_lo, m->params_memory, (m->opt_hi - m->opt_lo) * sizeof(float),
                         cudaMemcpyDeviceToHost));
    return m->host_params;
}
static void gpu_moments(GPT2* m, const float** mm, const float** vv) {
    size_t bytes = (m->opt_hi - m->opt_lo) * sizeof(float);
    *mm = (const float*)download_into((void**)&m->host_m, m->m_memory, bytes);
    *vv = (const float*)download_into((void**)&m->host_v, m->v_memory, bytes);
}
static void gpu_load_moments(GPT2* m, const float* mm, const float* vv) {
    size_t bytes = (m->opt_hi - m->opt_lo) * sizeof(float);
    cudaCheck(cudaMemcpy(m->m_memory, mm, bytes, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(m->v_memory, vv, bytes, cudaMemcpyHostToDevice));
}

int main(int argc, char** argv) {
    // What needs no GPU comes first (the flags, the data, the model on the host and the flags checked
    // against it), so each of those errors reads the same on a machine without one
    // (tests/test_train_cu_cli.sh). The loop creates and locks the output folder, and reads the
    // state file of a resume, once the GPU is ready: a run that cannot start leaves nothing behind.
    TrainRun run;
    train_run_setup(&run, argc, argv);
    GPT2 model;
    if (run.fresh) {
        gpt2_build_fresh(&model, &run.fresh_config, run.args.seed);
    } else {
        gpt2_build_from_checkpoint(&model, run.model_path);
    }
    train_run_attach_model(&run, &model.config, model.num_parameters, "");
    char why[200];  // attention's head sizes (attention.cuh), refused before the GPU is looked for
    if (!flash_head_size_supported(model.config.channels / model.config.num_heads, why, sizeof(why))) { fatal("%s", why); }

    char device[512];
    cuda_select_device(run.dist.local_rank, device, sizeof(device));
    lt_setup();
    printf("device: %s | precision %s\n", device, PRECISION_NAME);
    model.opt_lo = run.opt_lo;  // master weights and AdamW moments: all, or this rank's shard (ZeRO-1)
    model.opt_hi = run.opt_hi;
    model.padded_parameters = run.dist.padded;  // the collectives' equal shards (common/dist.h)
    model.recompute = run.args.recompute;        // -r: which activations the backward rebuilds
    gpt2_allocate(&model, run.args.B, run.args.T);
    size_t held = model.opt_hi - model.opt_lo;
    printf("GPU memory: %.1f MiB parameters+grads+AdamW%s, %.1f MiB activations (recompute -r %d), %.1f MiB scratch\n",
           (model.padded_parameters * (sizeof(float) + sizeof(floatX)) + held * 3.0 * sizeof(float)) / 1048576.0,
           held < model.num_parameters ? " (master weights and AdamW: this rank's shard)" : "",
           model.acts_bytes / 1048576.0, model.recompute, model.scratch_bytes / 1048576.0);

    TrainerOps ops = {
        .forward = gpt2_forward,
        .backward = gpt2_backward,
        .zero_grad = gpu_zero_grad,
        .grad_sumsq = gpt2_grad_sumsq,
        .update = gpt2_update_range,
        .logits_row = gpu_logits_row,
        .losses = model.host_losses,  // the forward pass with targets copies them
        .weights = gpu_weights,
        .moments = gpu_moments,
        .load_moments = gpu_load_moments,
        .grads = model.grads_memory,
        .working_weights = model.params_x_memory,  // after a sharded update (the fp32 master stays sharded)
        .working_bytes = sizeof(floatX),
        .sync = gpu_sync,
        .peak_flops = PEAK_FLOPS,
    };
    train_run_loop(&run, &ops, &model);

    train_run_free(&run);
    gpt2_free(&model);
    lt_teardown();
    return 0;
}
#endif // TESTING
