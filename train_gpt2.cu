/*
train_gpt2.cu: SiameseNorm GPT-2 on one NVIDIA GPU, in mixed precision (with siamese.cuh).

What this trains. The same model as train_gpt2.c (read its header and dev/MODEL.md first): a
GPT-2 whose residual stream is wired as pre-norm, post-norm or SiameseNorm (two streams X and Y
that share every attention and MLP block). This file is the GPU version of that CPU reference,
with the same structure, the same command line, the same checkpoints and the same step line
(plus MFU). The two-stream kernels of SiameseNorm live in siamese.cuh, which reads as a tutorial
of its own; it is included below where the forward pass first needs it.

Precision (the default BF16 build):
  - parameters: fp32 MASTER weights (what AdamW updates and what checkpoints hold) plus a bf16
    working copy that the forward and backward passes read; a copy-down kernel refreshes the
    working copy after every AdamW step;
  - activations (the streams, LN outputs, qkv, attention output, MLP hidden, logits): bf16;
  - parameter gradients, AdamW m and v: fp32. The gradients of the residual streams (dx, dy) and
    of every LayerNorm input are fp32 too (they are sums over many layers);
  - every reduction accumulates in fp32: LayerNorm statistics, softmax, the loss, the gradient
    norm, the column sums that give bias and LayerNorm parameter gradients, attention's tile
    products (and its log-sum-exp per row, the one attention tensor kept for the backward pass).
`make train_gpt2cu PRECISION=FP32` (-DENABLE_FP32) makes floatX = float everywhere and runs
cuBLASLt with CUBLAS_COMPUTE_32F on fp32 data (no TF32): slower, but tight parity with PyTorch.

Matmuls. All of them go through cuBLASLt (matmul_lt below): the linear layers with the bias
added in the epilogue (CUBLASLT_EPILOGUE_BIAS), the GELU backward fused into the MLP
down-projection's input gradient (DGELU). The GELU forward is a kernel of its own on the stored
pre-activation (not the GELU_AUX_BIAS epilogue, which applies GELU to the fp32 accumulator before
rounding): then the backward's recompute (-r 1, 2) rebuilds its output from that same stored
pre-activation with the same kernel, bit for bit. Where the library offers no algorithm for the
DGELU epilogue, where the ones it offers fail at run time, or where 4C breaks the epilogue's
alignment rule (odd C), the GELU kernel runs instead (TRAIN_GPT2CU_NO_GELU_FUSION=1 forces that,
for debugging). Bias gradients come from a
deterministic column-sum kernel (not the BGRADB epilogue: that one overwrites, and gradient
accumulation needs +=). Attention is not a cuBLASLt call: flash attention (attention.cuh), tile
products on tensor cores with no T x T tensor, for head sizes 1 to 128.

Determinism. Every kernel here computes each output element in a fixed order: no atomics
anywhere (the embedding gradient, where a token repeats, is grouped by token on the host first;
attention's dQ, a sum over key tiles that different blocks own, goes through per-block fp32
slices added in a fixed order).
So a run is bit-for-bit repeatable on the same GPU with the same cuBLASLt algorithm choices;
cuBLASLt itself is deterministic for a given algorithm and workspace (we never use split-k
atomics modes explicitly; the heuristic's choice could in principle differ between library
versions or GPUs).

How to read this file: Part 1 holds the kernels in forward order, each with its backward next to
it; Part 2 the model (parameters, activations, forward, backward, AdamW); Part 3 hands it to the
training loop shared with train_gpt2.c (common/train_loop.h; train_gpt2.c, Part 3, walks through
one step). Backward functions ACCUMULATE (+=) into parameter gradients, zeroed once per step.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <cublas_api.h>
#include "common/utils.h"
#include "common/params.h"
#include "common/args.h"
#include "common/rng.h"

// ============================================================================
// Part 0: precision, error checks, small device helpers
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

// the architecture the Makefile compiled for (GPU_ARCH), to say so clearly on an older GPU
#ifndef GPU_ARCH_BUILT
#define GPU_ARCH_BUILT 0
#endif

static inline void cuda_check(cudaError_t err, const char* call, const char* file, int line) {
    if (err != cudaSuccess) { fatal("CUDA: %s (%s at %s:%d)", cudaGetErrorString(err), call, file, line); }
}
#define cudaCheck(call) cuda_check((call), #call, __FILE__, __LINE__)

// an environment switch: on when set to anything but "" or "0"
static int env_switch(const char* name) {
    const char* v = getenv(name);
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

// Kernels run asynchronously: a fault inside one (an out-of-bounds access, say) surfaces at the next
// call that waits for the GPU, often a copy far from the kernel at fault. TRAIN_GPT2CU_SYNC_CHECK=1
// (train_gpt2cu and test_gpt2cu) waits for every kernel and cuBLASLt call right after its launch,
// so the error names the launch that failed. Slow: for debugging only.
static int sync_check = -1;  // -1: not read yet

static int sync_check_enabled(void) {
    if (sync_check < 0) {
        sync_check = env_switch("TRAIN_GPT2CU_SYNC_CHECK");
        if (sync_check) { printf("note: TRAIN_GPT2CU_SYNC_CHECK: waiting for the GPU after every launch (slow)\n"); }
    }
    return sync_check;
}

static inline void cuda_check_launch(const char* what, const char* file, int line) {
    cuda_check(cudaGetLastError(), what, file, line);  // a bad launch configuration, reported here
    if (sync_check_enabled()) { cuda_check(cudaDeviceSynchronize(), what, file, line); }  // a fault while it ran
}
// after every kernel launch
#define cudaCheckLaunch() cuda_check_launch("kernel launch", __FILE__, __LINE__)

static inline void cublas_check(cublasStatus_t st, const char* call, const char* file, int line) {
    if (st != CUBLAS_STATUS_SUCCESS) { fatal("cuBLASLt: %s (%s at %s:%d)", cublasGetStatusString(st), call, file, line); }
}
#define cublasCheck(call) cublas_check((call), #call, __FILE__, __LINE__)

// Is there a GPU this build can run on? Returns 0 and fills `msg` with the reason otherwise.
static int cuda_device_usable(char* msg, size_t cap) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        snprintf(msg, cap, "no CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(err));
        return 0;
    }
    if (n == 0) {
        snprintf(msg, cap, "no CUDA device (cudaGetDeviceCount found none)");
        return 0;
    }
    cudaDeviceProp prop;
    err = cudaGetDeviceProperties(&prop, 0);
    if (err != cudaSuccess) {
        snprintf(msg, cap, "cannot query CUDA device 0 (%s)", cudaGetErrorString(err));
        return 0;
    }
    int cc = prop.major * 10 + prop.minor;
#ifndef ENABLE_FP32
    if (cc < 80) {
        snprintf(msg, cap, "GPU %s has compute capability %d.%d; bf16 needs 8.0 or newer (build with PRECISION=FP32)",
                 prop.name, prop.major, prop.minor);
        return 0;
    }
#endif
    if (GPU_ARCH_BUILT > 0 && cc < GPU_ARCH_BUILT) {
        snprintf(msg, cap, "GPU %s has compute capability %d.%d but this binary was built for sm_%d (rebuild with make GPU_ARCH=%d)",
                 prop.name, prop.major, prop.minor, GPU_ARCH_BUILT, cc);
        return 0;
    }
    snprintf(msg, cap, "%s (compute capability %d.%d, %.1f GiB)", prop.name, prop.major, prop.minor,
             prop.totalGlobalMem / 1073741824.0);
    return 1;
}

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

// W consecutive elements of type T, read or written as one access. The row kernels that take a
// width W are written once for W = 1 (any C: lane i walks the columns i, i + 32, ...) and for
// W = VEC_X (where the row allows it, see row_width: lane i owns the 16-byte vectors i, i + 32, ...
// of the row; rows of fp32 gradients then move W floats at a time, two 16-byte accesses in the
// bf16 build)
template <typename T, int W>
struct alignas(W * sizeof(T) < 16 ? W * sizeof(T) : 16) Pack {
    T v[W];
};

// 16 bytes of floatX (8 bf16 or 4 fp32): the unit of the vectorised kernels, one load or store
#define VEC_X ((int)(16 / sizeof(floatX)))
typedef Pack<floatX, VEC_X> VecX;

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

// Row kernels give each row of a (N, C) tensor to one warp: lane i handles columns i, i+32, ...
// and warp shuffles combine the per-lane partial sums (in fp32).
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

// The backward pass scatter-adds each row of dL/de into wte[token] and wpe[t]. A token can appear
// many times in a batch (a few tokens, "the" or ",", fill several percent of it), so instead of
// atomics the host makes a work list from the tokens alone (token_chunks_build, while the GPU runs
// the forward pass): the positions grouped by token (tokens in order of first appearance,
// positions increasing), each group cut into chunks of EMBED_CHUNK positions (the last one
// shorter). Then
//   wte_chunk_kernel: one block per chunk sums dL/de over its positions, in increasing order; a
//     token with one chunk adds that sum into its row of dwte, the chunks of a token with several
//     write their sums to partial rows (scratch of the backward pass);
//   wte_finish_kernel: one block per such token and 256 columns adds its partial rows in chunk
//     order into its row of dwte.
// No block sums more than EMBED_CHUNK rows, however the tokens are spread, and every sum has an
// order fixed by the tokens: deterministic, on any GPU. In siamese mode dL/de = dx + dy.
//
// Per launch at d12, B = 64, T = 1024 (65536 positions, C = 768, siamese): wte_chunk_kernel reads
// dx and dy once (2 x 65536 x 768 x 4 bytes = 403 MB; pre/post modes, dx alone: 201 MB), reads and
// writes the dwte rows of the U distinct tokens (U x 768 x 8 bytes, at most 309 MB for U = V =
// 50257) and writes a partial row per chunk of a token with several (3 KB each); wte_finish_kernel
// reads those back (a token filling half the batch has 512 chunks: 1.6 MB) and adds into its rows.
// 2 x 65536 x 768 = 1.0e8 flops (one add for dx + dy, one into the sum). Lower bound at 3.35 TB/s:
// 0.12 ms for dx, dy, plus up to 0.09 ms for the dwte rows.

#define EMBED_CHUNK 64     // positions per chunk
#define EMBED_THREADS 256  // threads of both kernels' blocks: one column each, the block strides over C

// The work list: one int array, laid out the same in pinned host memory (list) and on the device
// (d_list), from offset 0:
//   pos          [BT]            positions grouped by token
//   chunk_start  [n_chunks + 1]  chunk k is pos[chunk_start[k] .. chunk_start[k + 1])
//   chunk_token  [n_chunks]      its token
//   chunk_slot   [n_chunks]      -1: the token's only chunk; else its partial row
//   split_token  [n_split]       the tokens with several chunks
//   split_first  [n_split + 1]   token k's partial rows are split_first[k] .. split_first[k + 1] - 1
// n_chunks <= BT and n_split <= BT, so 6 BT + 2 ints hold it.
typedef struct {
    int BT;                       // positions the arrays were allocated for
    int n_chunks, n_split, n_partials;
    size_t at_start, at_token, at_slot, at_split_token, at_split_first, len;  // offsets in list; ints in use
    int* list;                    // pinned host (6 BT + 2)
    int* d_list;                  // device (6 BT + 2)
    int* group_of_token;          // host (V): -1, but during token_chunks_build
    int* group_token;             // host (BT) scratch: the token of each group
    int* group_end;               // host (BT) scratch: the end of each group in pos
} TokenChunks;

// the work list of the BT tokens (tc->list; the upload is the caller's)
static void token_chunks_build(TokenChunks* tc, const int* tokens, int BT) {
    if (BT > tc->BT) { fatal("token_chunks_build: %d positions, allocated for %d", BT, tc->BT); }
    int* list = tc->list;
    // a counting sort of the positions by token: the size of each group, then its end, then the
    // positions put in place (group_end[g] runs from the group's start to its end)
    int ng = 0;
    for (int i = 0; i < BT; i++) {
        int g = tc->group_of_token[tokens[i]];
        if (g < 0) {
            g = tc->group_of_token[tokens[i]] = ng++;
            tc->group_token[g] = tokens[i];
            tc->group_end[g] = 0;
        }
        tc->group_end[g]++;
    }
    for (int g = 0, start = 0; g < ng; g++) {
        int n = tc->group_end[g];
        tc->group_end[g] = start;
        start += n;
    }
    for (int i = 0; i < BT; i++) { list[tc->group_end[tc->group_of_token[tokens[i]]]++] = i; }
    for (int g = 0; g < ng; g++) { tc->group_of_token[tc->group_token[g]] = -1; }
    // the chunks: first their number, which places the arrays after pos
    int n_chunks = 0, n_split = 0;
    for (int g = 0; g < ng; g++) {
        int n = tc->group_end[g] - (g > 0 ? tc->group_end[g - 1] : 0);
        int chunks = (n + EMBED_CHUNK - 1) / EMBED_CHUNK;
        n_chunks += chunks;
        n_split += chunks > 1;
    }
    tc->n_chunks = n_chunks;
    tc->n_split = n_split;
    tc->at_start = BT;
    tc->at_token = tc->at_start + n_chunks + 1;
    tc->at_slot = tc->at_token + n_chunks;
    tc->at_split_token = tc->at_slot + n_chunks;
    tc->at_split_first = tc->at_split_token + n_split;
    tc->len = tc->at_split_first + n_split + 1;
    int k = 0, split = 0, slot = 0;
    for (int g = 0; g < ng; g++) {
        int start = g > 0 ? tc->group_end[g - 1] : 0, end = tc->group_end[g];
        int several = end - start > EMBED_CHUNK;
        if (several) {
            list[tc->at_split_token + split] = tc->group_token[g];
            list[tc->at_split_first + split++] = slot;
        }
        for (int p = start; p < end; p += EMBED_CHUNK, k++) {
            list[tc->at_start + k] = p;
            list[tc->at_token + k] = tc->group_token[g];
            list[tc->at_slot + k] = several ? slot++ : -1;
        }
    }
    list[tc->at_start + n_chunks] = BT;
    list[tc->at_split_first + n_split] = slot;
    tc->n_partials = slot;
}

// the work list to the device, without waiting (the host must not rewrite tc->list before the
// copy is done)
static void token_chunks_upload(const TokenChunks* tc) {
    cudaCheck(cudaMemcpyAsync(tc->d_list, tc->list, tc->len * sizeof(int), cudaMemcpyHostToDevice, 0));
}

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
    for (int s = split_first[k]; s < split_first[k + 1]; s++) { sum += partials[(size_t)s * C + c]; }
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

// A row kernel keeps what it reads of a row in registers, so that its later passes over the row
// cost no memory traffic: lane `lane` holds its vectors i = (lane + 32 k) W, k < HeldRow::K, the
// first ROW_HELD_COLS columns of the row at any width W (a whole row of GPT-2 124M or 350M). A
// longer row reads the columns past those from memory again at each pass (L1 or L2: the warp has
// just read them). for_lane_vectors walks the lane's vectors in column order, the held ones in a
// loop of constant trip count that nvcc unrolls, so that held(h, k, i) is a register there and a
// load past them (nvcc --resource-usage: no stack frame, no spills in any kernel that holds rows).
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

// mean and rstd of a held row (every lane gets them): two passes over the registers
template <int W>
__device__ __forceinline__ float2 held_row_stats(const HeldRow<floatX, W>& h, int C, int lane) {
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
    return make_float2(mean, rstd);
}

// W elements per access (see Pack): W = VEC_X where the row width and alignment allow (row_width).
// The row is read once (held), the statistics come from registers, out is written once.
// SAVED: the backward's recompute (-r 2, layernorm_recompute): mean and rstd are read, not computed,
// and the same code rebuilds out bit for bit.
template <int W, bool SAVED = false>
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                                         const floatX* b, int N, int C) {
    int r = warp_row(), lane = threadIdx.x % 32;
    if (r >= N) { return; }
    HeldRow<floatX, W> x = held_load<floatX, W>(inp + (size_t)r * C, C, lane);
    float2 st = SAVED ? make_float2(mean[r], rstd[r]) : held_row_stats<W>(x, C, lane);
    floatX* o = out + (size_t)r * C;
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<floatX, W> xv = held(x, k, i), wv = load_pack<W>(w + i), bv = load_pack<W>(b + i), ov;
        for (int e = 0; e < W; e++) { ov.v[e] = (floatX)(((float)xv.v[e] - st.x) * st.y * (float)wv.v[e] + (float)bv.v[e]); }
        store_pack<W>(o + i, ov);
    });
    if (lane == 0 && !SAVED) { mean[r] = st.x; rstd[r] = st.y; }
}

static void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w, const floatX* b,
                              int N, int C) {
    const void* rows[] = {out, inp, w, b};
    auto kernel = row_width(C, rows, 4) == VEC_X ? layernorm_forward_kernel<VEC_X> : layernorm_forward_kernel<1>;
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(out, mean, rstd, inp, w, b, N, C);
    cudaCheckLaunch();
}

// out = LN(inp) again from the saved mean and rstd (-r 2: pre mode's block input in the backward)
static void layernorm_recompute(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                                const floatX* b, int N, int C) {
    const void* rows[] = {out, inp, w, b};
    auto kernel = row_width(C, rows, 4) == VEC_X ? layernorm_forward_kernel<VEC_X, true> : layernorm_forward_kernel<1, true>;
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(out, mean, rstd, inp, w, b, N, C);
    cudaCheckLaunch();
}

// Backward of one row. With g = w * dout and xhat as above:
//     dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
// ln_backward_means returns (mean(g), mean(g * xhat)) from the held dout and x; every lane gets them.
template <int W>
__device__ __forceinline__ float2 ln_backward_means(const HeldRow<float, W>& dout, const HeldRow<floatX, W>& x,
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
    return make_float2(warp_sum(m1) / C, warp_sum(m2) / C);
}

__device__ __forceinline__ float ln_backward_value(float dout, float x, float w, float mean, float rstd, float2 means) {
    return (w * dout - means.x - (x - mean) * rstd * means.y) * rstd;
}

// ----------------------------------------------------------------------------
// Column sums: out[c] += sum over the N rows of in[r][c], deterministic (no atomics). They give
// the bias gradients of the linear layers (column_grads, in = dout) and add up the LayerNorm
// parameter gradients that the backward row kernels sum per block of rows (ln_grads_finish, in =
// those partial sums).
//
// A block of 32 x 32 threads owns 32 columns; its threads walk the rows 32 apart (a warp reads 32
// neighbouring columns of one row: coalesced) and the 32 partial sums of each column are added in
// a fixed order through shared memory (column_tile_sums). column_sums does that over all rows in
// one launch: right for the few hundred partial rows of ln_grads_finish. For the N = B * T rows of
// a bias gradient it would give too few blocks (24 at C = 768, for a GPU of 132 SMs), so
// column_grads splits the rows into column_splits(N) chunks of at least COLUMN_CHUNK_ROWS (the
// count depends on N only, so every GPU adds the same numbers in the same order): stage 1
// (column_grads_kernel) writes each chunk's sums to column_partials, stage 2
// (column_finish_kernel) adds the chunks of each column in chunk order. At N = 8192 rows and
// C = 768: 32 chunks, 768 blocks in stage 1.
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
    int s = ceil_div(N, COLUMN_CHUNK_ROWS);
    return s < COLUMN_MAX_SPLITS ? s : COLUMN_MAX_SPLITS;
}

// stage 1's output: (COLUMN_MAX_SPLITS, C) floats, for C up to column_partials_cols
static float* column_partials = NULL;
static size_t column_partials_cols = 0;

// The sum of in over the rows [r_begin, r_end) for the column c = blockIdx.x * 32 + threadIdx.x of
// a block of 32 x 32 threads, in a fixed order: the threads walk the rows 32 apart, then the 32
// partial sums of each column are added in order through shared memory. Returns 1 where *total
// holds the column's sum (threadIdx.y == 0, c < C), 0 elsewhere.
template <typename Td>
__device__ int column_tile_sums(const Td* in, int C, int r_begin, int r_end, float* total) {
    int c = blockIdx.x * COLUMN_TILE + threadIdx.x;
    float s = 0.0f;
    if (c < C) {
        for (int r = r_begin + threadIdx.y; r < r_end; r += COLUMN_TILE) { s += (float)in[(size_t)r * C + c]; }
    }
    __shared__ float part[COLUMN_TILE][COLUMN_TILE + 1];
    part[threadIdx.y][threadIdx.x] = s;
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
    if ((size_t)C > column_partials_cols) { fatal("column_grads: %d columns, partials allocated for %zu", C, column_partials_cols); }
    int splits = column_splits(N);
    column_grads_kernel<Td><<<dim3(ceil_div(C, COLUMN_TILE), splits), dim3(COLUMN_TILE, COLUMN_TILE)>>>(in, N, C, column_partials, splits);
    cudaCheckLaunch();
    column_finish_kernel<<<ceil_div(C, 256), 256>>>(out, C, column_partials, splits);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// The LayerNorm parameter gradients, dw[c] += sum_r dout[r][c] * xhat[r][c] and db[c] += sum_r
// dout[r][c], are sums over all N rows. The backward row kernels (layernorm_backward_kernel here,
// siamese_input_backward_kernel in siamese.cuh) sum them as they go, with no second pass over the
// rows. A block takes ln_block_rows(N) consecutive rows (a multiple of ROW_WARPS; the last block
// may hold fewer) and works through them ROW_WARPS rows at a time (ln_backward_rounds):
//   1. one warp per row: the row's reductions (the means of its LayerNorm backwards), into shared
//      memory for step 2;
//   2. the whole block over the columns: thread t owns the vectors of W columns t, t + 256, ... and,
//      for each of the ROW_WARPS rows in order, reads the row's elements in its columns, writes
//      the input gradients and adds the row's parameter-gradient terms to its running sums, which
//      live in shared memory (n sums of C floats) but only that thread ever touches.
// At the end each block writes its sums as one partial row per sum, (n, blocks, C) in ln_partials;
// ln_grads_finish adds the partial rows of all blocks into the fp32 gradients (+=, column_sums).
// The grid (at most LN_GRAD_BLOCKS blocks) and the rows of each block depend only on N, and the
// columns each thread owns only on C and W: every GPU adds the same numbers in the same order.

// At most LN_GRAD_BLOCKS blocks (fewer for N < 4096): enough to give every SM of a large GPU a few
// blocks, few enough that the partial rows stay small against the rows (9.4 MB for six sums at
// C = 768, against 1.4 GB that the SiameseNorm backward moves at N = 65536). A first choice, to
// tune on a GPU (dev/cuda/README.md).
#define LN_GRAD_BLOCKS 512

// rows per block: ROW_WARPS (one round) up to N = ROW_WARPS * LN_GRAD_BLOCKS, then more rounds
static int ln_block_rows(int N) { return ROW_WARPS * ceil_div(N, ROW_WARPS * LN_GRAD_BLOCKS); }
static int ln_grad_blocks(int N) { return ceil_div(N, ln_block_rows(N)); }

// the blocks' partial sums: (n, blocks, C) floats, for n * C up to ln_partials_cols
static float* ln_partials = NULL;
static size_t ln_partials_cols = 0;

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
        for (int s = 0; s < n; s++) {
            for (int e = 0; e < W; e++) { sums[s * C + i + e] = 0.0f; }
        }
    });
}

template <int W, int n>
__device__ __forceinline__ void ln_sums_add(float* sums, const float (&g)[n][W], int C, int i) {
    for (int s = 0; s < n; s++) {
        for (int e = 0; e < W; e++) { sums[s * C + i + e] += g[s][e]; }
    }
}

template <int W>
__device__ __forceinline__ void ln_sums_store(float* partials, const float* sums, int n, int C) {
    for_owned_vectors<W>(C, [&](int i) {
        for (int s = 0; s < n; s++) {
            float* p = partials + ((size_t)s * gridDim.x + blockIdx.x) * C + i;
            for (int e = 0; e < W; e++) { p[e] = sums[s * C + i + e]; }
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
    if ((size_t)n * C > ln_partials_cols) { fatal("%s: %d x %d partial columns, allocated for %zu", what, n, C, ln_partials_cols); }
    if (l.smem > 48 * 1024 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)l.smem) != cudaSuccess) {
        fatal("%s: C = %d needs %zu bytes of shared memory per block, more than this GPU allows", what, C, l.smem);
    }
    return l;
}

// grads[s] += the sum over the blocks of their partial rows of sum s, s < n (in a fixed order:
// column_sums)
static void ln_grads_finish(float* const* grads, int n, int N, int C) {
    int blocks = ln_grad_blocks(N);
    ColumnJobs<float> jobs = {};
    for (int s = 0; s < n; s++) { jobs.job[s] = ColumnJob<float>{grads[s], ln_partials + (size_t)s * blocks * C}; }
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
    __shared__ float2 row_means[ROW_WARPS];  // step 1 -> step 2, per row of the round
    int lane = threadIdx.x % 32;
    ln_sums_zero<W>(sums, 2, C);
    ln_backward_rounds(N, block_rows,
        [&](int row, int slot) {
            size_t o = (size_t)row * C;
            HeldRow<float, W> dv = held_load<float, W>(dout + o, C, lane);
            HeldRow<floatX, W> xv = held_load<floatX, W>(inp + o, C, lane);
            float2 m = ln_backward_means<W>(dv, xv, w, mean[row], rstd[row], C, lane);
            if (lane == 0) { row_means[slot] = m; }
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
    kernel<<<l.blocks, ROW_WARPS * 32, l.smem>>>(dinp, dinp_x, ln_partials, dout, inp, w, mean, rstd, N, C, l.block_rows,
                                                 accumulate);
    cudaCheckLaunch();
    float* grads[] = {dw, db};
    ln_grads_finish(grads, 2, N, C);
}

// ----------------------------------------------------------------------------
// the two-stream (siamese) kernels: see siamese.cuh

#include "siamese.cuh"

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
// matmul through cuBLASLt.
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
//             The bias epilogue adds bias[i] to row i of D, i.e. to output channel i. Good.
//   dinp      dinp = dout . W         transposed: dinp^T (C x BT) = W^T (C x OC) . dout^T (OC x BT)
//             A = W op N (lda = C), B = dout op N (ldb = OC), ldd = C; m = C, n = BT, k = OC.
//   dW        dW = dout^T . inp       transposed: dW^T (C x OC) = inp^T (C x BT) . dout (BT x OC)
//             A = inp op N (lda = C), B = dout op T (its bytes are dout^T, ldb = OC), ldd = C;
//             m = C, n = OC, k = BT; beta = 1 accumulates into the fp32 gradient.
//
// matmul_lt is the one call behind all of these: at a shape's
// first call it builds the descriptors and asks the heuristic for its best algorithms (up to
// LT_MAX_ALGOS, fastest first), keeping both in a plan for that shape (LtPlan below), and runs the
// first that does not fail. It returns 0 (and runs nothing) only when allow_missing is
// set and no algorithm ran, e.g. for a fused GELU epilogue; otherwise that is a fatal error.

static cublasLtHandle_t lt_handle;
static void* lt_workspace = NULL;
static const size_t LT_WORKSPACE_BYTES = 32u << 20;
// fp32 accumulation in both builds; with fp32 data this is true fp32 (the _FAST_TF32 variant is never used)
static const cublasComputeType_t LT_COMPUTE = CUBLAS_COMPUTE_32F;

// the largest power of two (at most 256) that divides the address
static uint32_t lt_alignment(const void* p) {
    uint64_t v = (uint64_t)(uintptr_t)p | 256u;
    return (uint32_t)(v & (~v + 1));
}

typedef struct {
    int m, n, k;
    int transa, transb;
    const floatX* A;
    int lda;
    const floatX* B;
    int ldb;
    void* D;               // also C (beta accumulates into D)
    cudaDataType_t d_type;  // CUDA_R_X or CUDA_R_32F (fp32 gradients)
    int ldd;
    float alpha, beta;
    cublasLtEpilogue_t epilogue;
    const void* bias;       // EPILOGUE_BIAS
    void* aux;              // DGELU (read): the GELU pre-activation
    int ld_aux;
} MatmulSpec;

// D (m x n) = op(A) (m x k) . op(B) (k x n), plain floatX output; callers set the rest
static MatmulSpec matmul_spec(int m, int n, int k, const floatX* A, int transa, int lda, const floatX* B, int transb,
                              int ldb, void* D, int ldd) {
    // fields in declaration order: alpha 1, beta 0, no epilogue
    MatmulSpec s = {m, n, k, transa, transb, A, lda, B, ldb, D, CUDA_R_X, ldd, 1.0f, 0.0f, CUBLASLT_EPILOGUE_DEFAULT,
                    NULL, NULL, 0};
    return s;
}

static int matmul_fp32_out_fallback(const MatmulSpec* s);

// how many of the heuristic's algorithms a matmul tries before it gives up
#define LT_MAX_ALGOS 8

// an algorithm the heuristic offered failed at run time: said once per process (it repeats every step)
static void lt_note_failure(const MatmulSpec* s, int failed, cublasStatus_t st, const char* outcome) {
    static int said = 0;
    if (said) { return; }
    said = 1;
    printf("note: %d cuBLASLt algorithm(s) for a %dx%dx%d matmul (epilogue %d) failed at run time (%s); %s\n",
           failed, s->m, s->n, s->k, (int)s->epilogue, cublasGetStatusString(st), outcome);
}

// A plan per matmul shape: its descriptors and the heuristic's algorithms, built at the shape's
// first call and reused by every later one (a step makes each shape's call dozens of times, and
// building descriptors and asking the heuristic costs more than a small matmul's run). The key is
// everything the descriptors and the heuristic depend on but the pointers themselves: shape,
// transposes, leading dimensions, output type, epilogue and the pointers'
// alignments. The bias and aux pointers are set on the descriptor at each call. `next` is the
// algorithm that ran the last time, so later calls run that one at once: the same arithmetic at
// every step, and no algorithm that failed at run time is tried again. A full table still works:
// the call builds a plan, uses it and destroys it.
typedef struct {
    int m, n, k, transa, transb, lda, ldb, ldd, ld_aux;
    cudaDataType_t d_type;
    cublasLtEpilogue_t epilogue;
    uint32_t align_a, align_b, align_d;
} LtKey;

typedef struct {
    LtKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulHeuristicResult_t results[LT_MAX_ALGOS];
    int found;                 // how many algorithms the heuristic offered
    cublasStatus_t heuristic;  // the status of the heuristic query
    int next;                  // the first algorithm to try: the one that ran last time (found: none ran)
} LtPlan;

#define LT_MAX_PLANS 64
static LtPlan lt_plans[LT_MAX_PLANS];
static int lt_num_plans = 0;

static LtKey lt_key(const MatmulSpec* s) {
    LtKey key;
    memset(&key, 0, sizeof(key));  // the padding too: keys are compared with memcmp
    key.m = s->m, key.n = s->n, key.k = s->k, key.transa = s->transa, key.transb = s->transb;
    key.lda = s->lda, key.ldb = s->ldb, key.ldd = s->ldd, key.ld_aux = s->aux ? s->ld_aux : 0;
    key.d_type = s->d_type, key.epilogue = s->epilogue;
    // tell the heuristic how aligned our pointers really are (it assumes 256 bytes otherwise)
    key.align_a = lt_alignment(s->A);
    key.align_b = lt_alignment(s->B);
    key.align_d = lt_alignment(s->D);
    return key;
}

// the per-call pointers of the epilogue
static void lt_set_pointers(cublasLtMatmulDesc_t desc, const MatmulSpec* s) {
    if (s->bias) {
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &s->bias, sizeof(s->bias)));
    }
    if (s->aux) {
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &s->aux, sizeof(s->aux)));
    }
}

static void lt_plan_build(LtPlan* p, const LtKey* key, const MatmulSpec* s) {
    p->key = *key;
    cublasCheck(cublasLtMatmulDescCreate(&p->desc, LT_COMPUTE, CUDA_R_32F));
    cublasOperation_t ta = key->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtEpilogue_t epi = key->epilogue;
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    lt_set_pointers(p->desc, s);
    if (s->aux) {
        int64_t ld_aux = key->ld_aux;
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof(ld_aux)));
    }
    // op(A) is m x k, so A is stored k x m when transposed; op(B) is k x n
    cublasCheck(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_X, key->transa ? key->k : key->m,
                                           key->transa ? key->m : key->k, key->lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_X, key->transb ? key->n : key->k,
                                           key->transb ? key->k : key->n, key->ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->ld, key->d_type, key->m, key->n, key->ldd));

    uint64_t ws = LT_WORKSPACE_BYTES;
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &key->align_a,
                                                     sizeof(key->align_a)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &key->align_b,
                                                     sizeof(key->align_b)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &key->align_d,
                                                     sizeof(key->align_d)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &key->align_d,
                                                     sizeof(key->align_d)));
    // the heuristic's candidates, fastest first
    p->found = 0;
    p->heuristic = cublasLtMatmulAlgoGetHeuristic(lt_handle, p->desc, p->la, p->lb, p->ld, p->ld, pref, LT_MAX_ALGOS,
                                                  p->results, &p->found);
    if (p->heuristic != CUBLAS_STATUS_SUCCESS) { p->found = 0; }
    p->next = 0;
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
}

static void lt_plan_destroy(LtPlan* p) {
    cublasCheck(cublasLtMatrixLayoutDestroy(p->la));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->ld));
    cublasCheck(cublasLtMatmulDescDestroy(p->desc));
}

static int matmul_lt(const MatmulSpec* s, int allow_missing) {
    LtKey key = lt_key(s);
    LtPlan* p = NULL;
    for (int i = 0; i < lt_num_plans && p == NULL; i++) {
        if (memcmp(&lt_plans[i].key, &key, sizeof(key)) == 0) { p = &lt_plans[i]; }
    }
    LtPlan transient;
    if (p == NULL) {
        p = lt_num_plans < LT_MAX_PLANS ? &lt_plans[lt_num_plans++] : &transient;
        lt_plan_build(p, &key, s);
    } else {
        lt_set_pointers(p->desc, s);
    }

    // from the algorithm that ran last time; one that fails at run time (cuBLASLt returns an error
    // and computes nothing) gives way to the next
    int ran = 0, tried = 0;
    cublasStatus_t last = CUBLAS_STATUS_SUCCESS;  // the status of the last algorithm that failed
    int i = p->next;
    for (; i < p->found; i++) {
        const cublasLtMatmulHeuristicResult_t* r = &p->results[i];
        if (r->state != CUBLAS_STATUS_SUCCESS || r->workspaceSize > LT_WORKSPACE_BYTES) { continue; }
        tried++;
        cublasStatus_t st = cublasLtMatmul(lt_handle, p->desc, &s->alpha, s->A, p->la, s->B, p->lb, &s->beta, s->D,
                                           p->ld, s->D, p->ld, &r->algo, lt_workspace, LT_WORKSPACE_BYTES, 0);
        if (st == CUBLAS_STATUS_SUCCESS) {
            ran = 1;
            break;
        }
        last = st;
        (void)cudaGetLastError();  // a refused launch must not be reported at the next kernel's
    }
    p->next = i;  // the one that ran, or found: none runs
    cublasStatus_t heuristic = p->heuristic;
    if (p == &transient) { lt_plan_destroy(p); }
    if (ran) {
        if (tried > 1) { lt_note_failure(s, tried - 1, last, "another algorithm ran instead"); }
        cuda_check_launch("cuBLASLt matmul", __FILE__, __LINE__);
        return 1;
    }
    if (allow_missing) {  // the caller has another way (the GELU kernels)
        if (tried > 0) { lt_note_failure(s, tried, last, "the GELU kernels run instead"); }
        return 0;
    }
    if (matmul_fp32_out_fallback(s)) { return 1; }
    char why[160];
    if (heuristic != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, sizeof(why), "the heuristic query failed: %s", cublasGetStatusString(heuristic));
    } else if (tried == 0) {
        snprintf(why, sizeof(why), "the heuristic offered no usable algorithm");
    } else {
        snprintf(why, sizeof(why), "all %d algorithms offered failed, the last with %s", tried, cublasGetStatusString(last));
    }
    fatal("cuBLASLt cannot run a %dx%dx%d matmul (epilogue %d, output %s): %s", s->m, s->n, s->k, (int)s->epilogue, s->d_type == CUDA_R_32F ? "fp32" : "floatX", why);
}

// The fp32 gradients are written by matmuls with bf16 inputs and an fp32 output, a combination
// cuBLASLt documents. Should a library version offer no algorithm for one, this fallback computes
// the product (times alpha) into a bf16 buffer (allocated once, at the first use, for the largest such output:
// lt_fallback_elems, set by gpt2_allocate) and adds it to the fp32 output with a kernel. It says so
// once, since it costs accuracy.
static floatX* lt_fallback = NULL;
static size_t lt_fallback_elems = 0;

__global__ void accumulate_fp32_kernel(float* d, const floatX* src, float beta, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { d[i] = (beta != 0.0f ? beta * d[i] : 0.0f) + (float)src[i]; }
}

static int matmul_fp32_out_fallback(const MatmulSpec* s) {
    size_t n = (size_t)s->m * s->n;
    if (sizeof(floatX) == sizeof(float) || s->d_type != CUDA_R_32F || s->ldd != s->m ||
        s->epilogue != CUBLASLT_EPILOGUE_DEFAULT || s->alpha != 1.0f || n > lt_fallback_elems) {
        return 0;
    }
    if (lt_fallback == NULL) {
        printf("note: cuBLASLt offers no bf16 x bf16 -> fp32 matmul here; using a bf16 output plus an fp32 add\n");
        cudaCheck(cudaMalloc((void**)&lt_fallback, lt_fallback_elems * sizeof(floatX)));
    }
    MatmulSpec t = *s;
    t.D = lt_fallback;
    t.d_type = CUDA_R_X;
    t.beta = 0.0f;
    matmul_lt(&t, 0);
    accumulate_fp32_kernel<<<ceil_div((long)n, 256), 256>>>((float*)s->D, lt_fallback, s->beta, n);
    cudaCheckLaunch();
    return 1;
}

// ----------------------------------------------------------------------------
// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). The forward always
// (block_forward, and the backward's recompute); the backward where cuBLASLt offers no fused DGELU
// epilogue for a shape (see matmul_backward_input).

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
// the linear layers (derivations in the matmul comment above)

// The fused GELU backward epilogue can be switched off with TRAIN_GPT2CU_NO_GELU_FUSION=1 (then the
// GELU kernel above runs instead): a debugging aid for parity checks on a new GPU or cuBLASLt version.
// (test_gpt2cu also sets gelu_fusion to 0 itself, to check both paths.)
static int gelu_fusion = -1;  // -1: not decided yet

static int gelu_fusion_enabled(void) {
    if (gelu_fusion < 0) { gelu_fusion = !env_switch("TRAIN_GPT2CU_NO_GELU_FUSION"); }
    return gelu_fusion;
}

// cuBLASLt documents that the leading dimension of the GELU pre-activation (the aux matrix, 4C
// elements) must be a multiple of 8 (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD): true for even C only
// (-e d2c63h7 has 4C = 252). The fusion is tried only where that holds.
static int gelu_fusion_fits(int ld_aux) { return gelu_fusion_enabled() && ld_aux % 8 == 0; }

// out[BT][OC] = inp[BT][C] . W[OC][C]^T + bias
static void matmul_forward(floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int BT, int C, int OC) {
    MatmulSpec s = matmul_spec(OC, BT, C, w, 1, C, inp, 0, C, out, OC);
    s.bias = bias;
    s.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    matmul_lt(&s, 0);
}

// dinp = alpha dout . W (dinp_type CUDA_R_X or CUDA_R_32F; beta = 1 accumulates). With gelu_pre,
// the layer's input was GELU(gelu_pre) and dinp becomes dL/d(gelu_pre) (the fused DGELU epilogue).
static void matmul_backward_input(void* dinp, cudaDataType_t dinp_type, float beta, const floatX* dout, const floatX* w,
                                  int BT, int C, int OC, const floatX* gelu_pre, float alpha = 1.0f) {
    MatmulSpec s = matmul_spec(C, BT, OC, w, 0, C, dout, 0, OC, dinp, C);
    s.d_type = dinp_type;
    s.alpha = alpha;
    s.beta = beta;
    if (gelu_pre) {
        if (dinp_type != CUDA_R_X || beta != 0.0f) { fatal("matmul_backward_input: GELU backward needs a fresh floatX output"); }
        MatmulSpec fused = s;
        fused.epilogue = CUBLASLT_EPILOGUE_DGELU;
        fused.aux = (void*)gelu_pre;
        fused.ld_aux = C;
        if (gelu_fusion_fits(fused.ld_aux) && matmul_lt(&fused, 1)) { return; }
        matmul_lt(&s, 0);
        gelu_apply((floatX*)dinp, gelu_pre, (size_t)BT * C, 1);
        return;
    }
    matmul_lt(&s, 0);
}

// dW += alpha dout^T . inp (fp32); dbias += the column sums of dout (deterministic kernel), when
// given (with alpha 1: the bias of a layer whose gradient is scaled has no column sum here)
static void matmul_backward_weight(float* dw, float* dbias, const floatX* dout, const floatX* inp, int BT, int C, int OC,
                                   float alpha = 1.0f) {
    if (dbias && alpha != 1.0f) { fatal("matmul_backward_weight: a bias gradient takes alpha 1"); }
    MatmulSpec s = matmul_spec(C, OC, BT, inp, 0, C, dout, 1, OC, dw, C);
    s.d_type = CUDA_R_32F;
    s.alpha = alpha;
    s.beta = 1.0f;
    matmul_lt(&s, 0);
    if (dbias) { column_grads(dbias, dout, BT, OC); }
}

// ----------------------------------------------------------------------------
// causal self-attention: qkv rows are [q | k | v], each C = NH heads of HS = C/NH channels; per
// (b, head) out = causal softmax(q k^T / sqrt(HS)) v. Flash attention, in attention.cuh (a chapter
// of its own, like siamese.cuh): q, k, v read straight from the qkv rows, the output written into
// the (B, T, C) rows the projection reads, and per row a log-sum-exp saved for the backward pass
// instead of any (B, NH, T, T) tensor. Head sizes 1 to 128 (gpt2_allocate checks, at start-up).

#include "attention.cuh"

// ----------------------------------------------------------------------------
// the fused classifier: softmax cross-entropy over the V real entries of each logits row (the
// entries V..Vp-1 are padding) and its gradient, in ONE pass over the row:
//     loss[row]  = lse - logit[target],        lse = log sum_{i < V} exp(logit_i)
//     dlogits[i] = (softmax_i - [i == target]) * dloss      (0 on the padding)
// The gradient is written IN PLACE over the logits, so the probabilities never exist as a tensor
// and the backward pass starts from dlogits. dloss = 1 / (B*T), the gradient of the mean loss;
// the backward pass applies its loss scale as the alpha of the two matmuls that read dlogits.
// So every forward pass with targets, training or evaluation, leaves dlogits behind, not logits;
// one without targets (sampling) runs no classifier and leaves the logits to be read.
//
// One block of CLASSIFIER_THREADS threads per row. Each thread holds its share of the row in
// registers as fp32, with -inf for the padding: CLASSIFIER_PER_THREAD entries, read in units of 4
// bytes (units t, t + CLASSIFIER_THREADS, ... for thread t: each warp access is 128 contiguous
// bytes). Then
//   1. the row max M: each thread's max, then block_reduce;
//   2. e_i = exp(x_i - M), kept in the registers in place of x_i (the one expf per entry), and the
//      row sum S of them: each thread's sum, then block_reduce;
//   3. loss = M + log S - logit[target] (thread 0), and dlogits_i = e_i * (dloss / S), less dloss
//      at the target, stored from the registers.
// The row is read from memory once and written once. That holds for rows of up to CLASSIFIER_TILE
// = 51200 entries (GPT-2's 50304 among them): classifier_kernel<true>. 50 fp32 entries per thread
// are what 1024 threads can keep in their 64 registers without a spill (ptxas, CUDA 13, sm_90;
// 16-byte units, 56 entries in 7 of them, spill 96 bytes per thread). A longer row takes
// classifier_kernel<false>, the same kernel over tiles of CLASSIFIER_TILE entries, each step a
// loop over the tiles that loads each one again (and step 3 computes its exponentials again): it
// reads the row three times and calls expf twice per entry.
//
// Per launch at d12, B = 64, T = 1024 (65536 rows, V = 50257, Vp = 50304, bf16): reads and writes
// 65536 x 50304 x 2 bytes each (6.59 GB + 6.59 GB; targets and losses 0.5 MB): 13.19 GB, 3.94 ms
// at H100 SXM's 3.35 TB/s. 65536 x 50257 = 3.29e9 expf and about 4 flops per entry (max, subtract,
// add, multiply): 13.2 GFLOP, far below what bounds it (memory).

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
    float s = 0.0f;
    for (int k = 0; k < CLASSIFIER_UNITS; k++) {
        for (int e = 0; e < CLASSIFIER_W; e++) {
            x[k][e] = expf(x[k][e] - M);
            s += x[k][e];
        }
    }
    return s;
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
    float m = -INFINITY;
    for (int t = 0; t < tiles; t++) {
        classifier_load(x, l, t, V, Vp);
        for (int k = 0; k < CLASSIFIER_UNITS; k++) {
            for (int e = 0; e < CLASSIFIER_W; e++) { m = fmaxf(m, x[k][e]); }
        }
    }
    float M = block_reduce(m, 1, max_posts);
    // 2. the sum of exp(x - M)
    float s = 0.0f;
    for (int t = 0; t < tiles; t++) {
        if (!WHOLE_ROW) { classifier_load(x, l, t, V, Vp); }
        s += classifier_exp(x, M);
    }
    float S = block_reduce(s, 0, sum_posts);
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
// order (in double). The grid is a function of n alone (norm_blocks), so every addition happens in
// an order fixed by n: deterministic, on any GPU. Small tensors get few blocks (each thread sums at
// least NORM_PER_THREAD elements); GPT-2 sizes get NORM_MAX_BLOCKS, about two waves on a 132-SM
// H100 (4 resident blocks of 512 threads per SM: 528 at once).
#define NORM_THREADS 512
#define NORM_MAX_BLOCKS 1024
#define NORM_PER_THREAD 16

static int norm_blocks(size_t n) {
    size_t per_block = (size_t)NORM_THREADS * NORM_PER_THREAD;
    size_t blocks = (n + per_block - 1) / per_block;
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

// the parameters, in checkpoint order (common/params.h); siamese-only tensors are empty otherwise.
// ParameterTensors (float) points into the fp32 master weights or the fp32 gradients,
// ParameterTensorsX (floatX) into the working copy the kernels read.
template <typename T>
struct ParamPtrs {
    T *wte, *wpe;
    T *lnx1w, *lnx1b, *lny1w, *lny1b, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    T *lnx2w, *lnx2b, *lny2w, *lny2b, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
    T *lnfxw, *lnfxb, *lnfyw, *lnfyb, *lnfw, *lnfb;
};
typedef ParamPtrs<float> ParameterTensors;
typedef ParamPtrs<floatX> ParameterTensorsX;
static_assert(sizeof(ParameterTensors) == NUM_PARAMETER_TENSORS * sizeof(float*), "one pointer per tensor");

template <typename T>
static void point_parameters(ParamPtrs<T>* p, T* memory, const size_t sizes[NUM_PARAMETER_TENSORS]) {
    T** ptrs = (T**)p;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { ptrs[i] = memory; memory += sizes[i]; }
}

// the activations the backward pass needs (floatX), as in train_gpt2.c. k indexes sublayers (2L), l layers.
// Recompute (-r, train_gpt2.c's ActivationTensors says more): with -r 1, fch_gelu holds one layer
// and the backward rebuilds each layer's from fch (gelu_apply, the forward's kernel); with -r 2,
// also lnsum and blockin hold one sublayer, rebuilt from the streams and the saved statistics
// (siamese_input_recompute, layernorm_recompute, residual_forward), and lnx two (the forward's
// update of sublayer k reads a of sublayer k - 1; the backward never reads a).
typedef struct {
    floatX* resx;      // (2L+1, B, T, C) stream X at each sublayer boundary; resx[0] is the embedding
    floatX* resy;      // (2L+1, B, T, C) siamese: stream Y
    floatX* lnx;       // (2L, B, T, C)   siamese: a = LN(x) (-r 2: two sublayers, k % 2)
    floatX* lnsum;     // (2L, B, T, C)   the input of the sublayer's main LN: siamese a + LN(y), post x + z
                       //                 (-r 2: one sublayer)
    floatX* blockin;   // (2L, B, T, C)   the block input u (pre, siamese; post reads x) (-r 2: one sublayer)
    floatX* qkv;       // (L, B, T, 3C)
    floatX* atty;      // (L, B, T, C)    attention output before its projection
    floatX* fch;       // (L, B, T, 4C)   MLP hidden pre-activation
    floatX* fch_gelu;  // (L, B, T, 4C)   GELU(fch) (-r 1 and 2: one layer)
    floatX* blockout;  // (2L, B, T, C)   z, the block output
    floatX* lnfsum;    // (B, T, C)       siamese: LN(x; lnfx) + LN(y; lnfy)
    floatX* lnf;       // (B, T, C)       h, the final LN output
    floatX* logits;    // (B, T, Vp)      overwritten by dL/dlogits in a forward pass with targets
} ActivationsX;
#define NUM_ACTS_X ((int)(sizeof(ActivationsX) / sizeof(floatX*)))

// the fp32 statistics and losses
typedef struct {
    float* ln_mean;    // (2L, B, T) statistics of the sublayer's main LN (ln1 / ln2)
    float* ln_rstd;
    float* lnx_mean;   // (2L, B, T) siamese: statistics of LN(x) and LN(y)
    float* lnx_rstd;
    float* lny_mean;
    float* lny_rstd;
    float* lnfx_mean;  // (B, T) siamese: statistics of the final LN(x) and LN(y)
    float* lnfx_rstd;
    float* lnfy_mean;
    float* lnfy_rstd;
    float* lnf_mean;   // (B, T)
    float* lnf_rstd;
    float* losses;     // (B, T)
    float* att_lse;    // (L, B, NH, T) attention: each row's log-sum-exp (attention.cuh)
} ActivationsF;
#define NUM_ACTS_F ((int)(sizeof(ActivationsF) / sizeof(float*)))

static void fill_activation_sizes(size_t* sx, size_t* sf, const GPT2Config* cfg, int B, int T, int recompute) {
    size_t L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads, Vp = cfg->padded_vocab_size;
    size_t BT = (size_t)B * T;
    // the mode-dependent tensors exist or are empty (common/params.h, NORM_MODE_LAYOUTS)
    const NormModeLayout* mode = norm_mode_layout(cfg->norm_mode);
    size_t S = mode->two_streams, U = mode->block_input, R = mode->ln_sum;
    size_t gelu_layers = recompute >= 1 ? 1 : L;       // layers of fch_gelu kept
    size_t ln_sublayers = recompute >= 2 ? 1 : 2 * L;  // sublayers of lnsum and blockin kept
    size_t a_sublayers = recompute >= 2 ? 2 : 2 * L;   // and of lnx
    size_t vx[] = {
        (2 * L + 1) * BT * C, S * (2 * L + 1) * BT * C, S * a_sublayers * BT * C, R * ln_sublayers * BT * C,
        U * ln_sublayers * BT * C, L * BT * 3 * C, L * BT * C, L * BT * 4 * C, gelu_layers * BT * 4 * C, 2 * L * BT * C,
        S * BT * C, BT * C, BT * Vp,
    };
    size_t vf[] = {2 * L * BT, 2 * L * BT, S * 2 * L * BT, S * 2 * L * BT, S * 2 * L * BT, S * 2 * L * BT,
                   S * BT, S * BT, S * BT, S * BT, BT, BT, BT, L * B * NH * T};
    static_assert(sizeof(vx) / sizeof(vx[0]) == NUM_ACTS_X, "one size per floatX activation");
    static_assert(sizeof(vf) / sizeof(vf[0]) == NUM_ACTS_F, "one size per fp32 activation");
    for (int i = 0; i < NUM_ACTS_X; i++) { sx[i] = vx[i]; }
    for (int i = 0; i < NUM_ACTS_F; i++) { sf[i] = vf[i]; }
}

// scratch of the backward pass, reused by every layer: the floatX matmul operands...
typedef struct {
    floatX* dz;     // (B, T, C)  dL/dz, the block output gradient
    floatX* datty;  // (B, T, C)
    floatX* dqkv;   // (B, T, 3C)
    floatX* dfch;   // (B, T, 4C) dL/d(MLP pre-activation)
} ScratchX;
#define NUM_SCRATCH_X ((int)(sizeof(ScratchX) / sizeof(floatX*)))

// ... and the fp32 gradients of the streams and of LayerNorm inputs
typedef struct {
    float* dx;    // (B, T, C) dL/d(stream X) at the current sublayer boundary
    float* dy;    // (B, T, C) dL/d(stream Y)
    float* du;    // (B, T, C) dL/du, the block input gradient (also dL/dh at the top)
    float* att_dot;  // (B, NH, T) attention: sum_c dO O per row
    float* att_dq;   // attention: the fp32 dQ splits (attention.cuh, flash_dq_acc_floats_upto)
} ScratchF;
#define NUM_SCRATCH_F ((int)(sizeof(ScratchF) / sizeof(float*)))

static void fill_scratch_sizes(size_t* sx, size_t* sf, const GPT2Config* cfg, int B, int T) {
    size_t C = cfg->channels, BT = (size_t)B * T, NH = cfg->num_heads;
    size_t S = norm_mode_layout(cfg->norm_mode)->two_streams;  // the gradients of Y and its LayerNorms
    size_t vx[] = {BT * C, BT * C, BT * 3 * C, BT * 4 * C};
    size_t vf[] = {BT * C, S * BT * C, BT * C, B * NH * T, flash_dq_acc_floats_upto(B, (int)NH, T, (int)(C / NH))};
    static_assert(sizeof(vx) / sizeof(vx[0]) == NUM_SCRATCH_X, "one size per floatX scratch tensor");
    static_assert(sizeof(vf) / sizeof(vf[0]) == NUM_SCRATCH_F, "one size per fp32 scratch tensor");
    for (int i = 0; i < NUM_SCRATCH_X; i++) { sx[i] = vx[i]; }
    for (int i = 0; i < NUM_SCRATCH_F; i++) { sf[i] = vf[i]; }
}

// carves n consecutive device tensors out of one cudaMalloc; each starts 256-byte aligned
// (cuBLASLt's favourite). Returns the allocation; *total receives the bytes.
template <typename T>
static T* cuda_alloc_tensors(T** ptrs, const size_t* sizes, int n, size_t* total, const char* what) {
    const size_t align = 256 / sizeof(T);
    size_t sum = 0;
    for (int i = 0; i < n; i++) { sum += (sizes[i] + align - 1) / align * align; }
    T* memory = NULL;
    cudaError_t err = cudaMalloc((void**)&memory, (sum > 0 ? sum : 1) * sizeof(T));
    if (err != cudaSuccess) { fatal("out of GPU memory allocating %.1f MiB for %s", sum * sizeof(T) / 1048576.0, what); }
    T* p = memory;
    for (int i = 0; i < n; i++) { ptrs[i] = p; p += (sizes[i] + align - 1) / align * align; }
    if (total) { *total = sum * sizeof(T); }
    return memory;
}

static void* cuda_malloc_check(size_t bytes, const char* what) {
    void* p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes > 0 ? bytes : 1);
    if (err != cudaSuccess) { fatal("out of GPU memory allocating %.1f MiB for %s", bytes / 1048576.0, what); }
    return p;
}

// pinned (page-locked) host memory: the GPU reads and writes it directly, so a cudaMemcpyAsync
// from it returns at once; from ordinary (pageable) memory the copy makes the host wait
static void* pinned_malloc_check(size_t bytes, const char* what) {
    void* p = NULL;
    cudaError_t err = cudaMallocHost(&p, bytes > 0 ? bytes : 1);
    if (err != cudaSuccess) { fatal("cannot allocate %.1f MiB of pinned host memory for %s", bytes / 1048576.0, what); }
    return p;
}

static void token_chunks_alloc(TokenChunks* tc, int V, int BT) {
    tc->BT = BT;
    tc->list = (int*)pinned_malloc_check((6 * (size_t)BT + 2) * sizeof(int), "token chunks");
    tc->d_list = (int*)cuda_malloc_check((6 * (size_t)BT + 2) * sizeof(int), "token chunks");
    tc->group_of_token = (int*)malloc_check((size_t)V * sizeof(int), "token chunks");
    for (int i = 0; i < V; i++) { tc->group_of_token[i] = -1; }
    tc->group_token = (int*)malloc_check((size_t)BT * sizeof(int), "token chunks");
    tc->group_end = (int*)malloc_check((size_t)BT * sizeof(int), "token chunks");
}

static void token_chunks_free(TokenChunks* tc) {
    cudaCheck(cudaFreeHost(tc->list));
    cudaCheck(cudaFree(tc->d_list));
    free(tc->group_of_token);
    free(tc->group_token);
    free(tc->group_end);
}

typedef struct {
    GPT2Config config;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    size_t num_parameters;
    size_t padded_parameters;      // the length of params_x_memory and grads_memory: num_parameters and
                                   // zeros up to a multiple of the ranks (common/dist.h; set by main)
    float* host_params;            // host fp32: checkpoint load and save
    float* params_memory;          // device fp32 master weights, of parameters [opt_lo, opt_hi)
    floatX* params_x_memory;       // device floatX working copy, all parameters (and the zero padding)
    float* grads_memory;           // device fp32 (and the zero padding)
    float* m_memory;               // device fp32 AdamW first moment, of parameters [opt_lo, opt_hi)
    float* v_memory;               // device fp32 AdamW second moment, of the same
    size_t opt_lo, opt_hi;         // all parameters (set by gpt2_upload_params), or a rank's shard (ZeRO-1: set before it)
    ParameterTensors params, grads;
    ParameterTensorsX params_x;
    ActivationsX ax;
    ActivationsF af;
    floatX* acts_x_memory;
    float* acts_f_memory;
    size_t activation_bytes;
    ScratchX sx;
    ScratchF sf;
    floatX* scratch_x_memory;
    float* scratch_f_memory;
    size_t scratch_bytes;
    int batch_size, seq_len;       // the (B, T) the buffers were allocated for
    int recompute;                 // -r: 0, 1 or 2 (ActivationsX); set before gpt2_allocate, 0 unless set
    int cur_B, cur_T;              // the (B, T) of the last forward pass
    int* inputs;                   // pinned host (B, T) tokens of the last forward pass
    int* targets;                  // pinned host (B, T) its targets
    int* d_inputs;                 // device copies
    int* d_targets;
    cudaEvent_t tokens_copied;     // recorded after the copies of inputs and targets to the device
    int tokens_in_flight;          // those copies may still be running (nothing waited for them since)
    int has_targets;               // the last forward pass had targets: the logits hold dL/dlogits
    float mean_loss;               // of the last forward pass with targets
    float* host_losses;            // pinned (B, T)
    TokenChunks chunks;            // the embedding gradient's work list of the last forward pass with targets
    float* d_norm_partials;        // device (NORM_MAX_BLOCKS)
    float* host_norm_partials;     // pinned
    // NULL in training. test_gpt2.cu sets it to see the stream gradients: gpt2_backward calls it at
    // every sublayer boundary b (2L down to 0) with the DEVICE fp32 dL/dx and dL/dy there (dy NULL
    // outside siamese mode).
    void (*stream_grad_hook)(void* ctx, int boundary, const float* dx, const float* dy);
    void* stream_grad_ctx;
} GPT2;

static void observe_stream_grads(GPT2* m, int boundary) {
    if (m->stream_grad_hook) {
        const float* dy = norm_mode_layout(m->config.norm_mode)->two_streams ? m->sf.dy : NULL;
        m->stream_grad_hook(m->stream_grad_ctx, boundary, m->sf.dx, dy);
    }
}

// The model is built in two halves: on the host (the config and the fp32 weights, read from a
// checkpoint or freshly initialised; no GPU needed, so a bad checkpoint is refused the same way on
// any machine), then uploaded (the device master weights and their floatX working copy).

// sets the config and allocates the host weights (not yet initialised)
static void gpt2_init_host(GPT2* m, const GPT2Config* cfg) {
    memset(m, 0, sizeof(*m));
    m->config = *cfg;
    fill_param_sizes(m->param_sizes, cfg);
    m->num_parameters = count_parameters(cfg);
    m->host_params = (float*)malloc_check(m->num_parameters * sizeof(float), "parameters");
}

// our checkpoint, or llm.c's GPT-2 (float32 or bf16) as a pre-mode model (common/params.h)
static void gpt2_host_from_checkpoint(GPT2* m, const char* path) {
    CheckpointFile ck;
    checkpoint_open(&ck, path);
    gpt2_init_host(m, &ck.config);
    checkpoint_read_params(&ck, m->host_params);
}

// fresh initialisation happens on the host with common/params.h, so train_gpt2 and train_gpt2cu
// start from bit-identical models for the same seed
static void gpt2_host_fresh(GPT2* m, const GPT2Config* cfg, uint64_t seed) {
    gpt2_init_host(m, cfg);
    params_init_fresh(m->host_params, cfg, seed);
}

// allocates the device weights; host_params -> device master weights -> floatX working copy
static void gpt2_upload_params(GPT2* m) {
    size_t n = m->num_parameters;
    if (m->opt_hi == 0) { m->opt_hi = n; }
    if (m->padded_parameters < n) { m->padded_parameters = n; }
    size_t held = m->opt_hi - m->opt_lo;  // ZeRO-1: the master weights of this rank's shard only
    m->params_x_memory = (floatX*)cuda_malloc_check(m->padded_parameters * sizeof(floatX), "working weights");
    point_parameters(&m->params_x, m->params_x_memory, m->param_sizes);
    float* all = (float*)cuda_malloc_check(n * sizeof(float), "master weights");
    cudaCheck(cudaMemcpy(all, m->host_params, n * sizeof(float), cudaMemcpyHostToDevice));
    cast_to_x(m->params_x_memory, all, n);
    if (m->padded_parameters > n) {
        cudaCheck(cudaMemset(m->params_x_memory + n, 0, (m->padded_parameters - n) * sizeof(floatX)));
    }
    if (held == n) {
        m->params_memory = all;
        point_parameters(&m->params, m->params_memory, m->param_sizes);
    } else {
        m->params_memory = (float*)cuda_malloc_check(held * sizeof(float), "master weights (shard)");
        cudaCheck(cudaMemcpy(m->params_memory, all + m->opt_lo, held * sizeof(float), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaDeviceSynchronize());
        cudaCheck(cudaFree(all));
        memset(&m->params, 0, sizeof(m->params));  // no full fp32 tensors
    }
    cudaCheck(cudaDeviceSynchronize());
}

// the scratch of the column sums (column_grads) for rows of up to cols columns, and of the
// LayerNorm backwards' block sums (ln_partials) for n sums of C columns with n * C up to cols;
// each grows, never shrinks (one process may allocate several models)
static void column_partials_reserve(size_t cols) {
    if (cols <= column_partials_cols) { return; }
    if (column_partials) { cudaCheck(cudaFree(column_partials)); }
    column_partials = (float*)cuda_malloc_check(COLUMN_MAX_SPLITS * cols * sizeof(float), "column-sum partials");
    column_partials_cols = cols;
}

static void ln_partials_reserve(size_t cols) {
    if (cols <= ln_partials_cols) { return; }
    if (ln_partials) { cudaCheck(cudaFree(ln_partials)); }
    ln_partials = (float*)cuda_malloc_check(LN_GRAD_BLOCKS * cols * sizeof(float), "LayerNorm gradient partials");
    ln_partials_cols = cols;
}

// allocates, once, everything training with micro-batches of (B, T) needs
static void gpt2_allocate(GPT2* m, int B, int T) {
    const GPT2Config* cfg = &m->config;
    size_t BT = (size_t)B * T;
    m->batch_size = B;
    m->seq_len = T;
    m->grads_memory = (float*)cuda_malloc_check(m->padded_parameters * sizeof(float), "gradients");
    size_t held = m->opt_hi - m->opt_lo;  // set by gpt2_upload_params, with padded_parameters
    m->m_memory = (float*)cuda_malloc_check(held * sizeof(float), "AdamW m");
    m->v_memory = (float*)cuda_malloc_check(held * sizeof(float), "AdamW v");
    cudaCheck(cudaMemset(m->grads_memory, 0, m->padded_parameters * sizeof(float)));
    cudaCheck(cudaMemset(m->m_memory, 0, held * sizeof(float)));
    cudaCheck(cudaMemset(m->v_memory, 0, held * sizeof(float)));
    point_parameters(&m->grads, m->grads_memory, m->param_sizes);
    size_t ax[NUM_ACTS_X], af[NUM_ACTS_F], sx[NUM_SCRATCH_X], sf[NUM_SCRATCH_F], bytes;
    char why[200];  // attention's head size on this GPU (its shared memory): refused before anything is allocated
    if (!flash_attention_supported(cfg->channels / cfg->num_heads, why, sizeof(why))) { fatal("%s", why); }
    if (m->recompute < 0 || m->recompute > 2) { fatal("recompute -r %d is out of range [0, 2]", m->recompute); }
    fill_activation_sizes(ax, af, cfg, B, T, m->recompute);
    m->acts_x_memory = cuda_alloc_tensors((floatX**)&m->ax, ax, NUM_ACTS_X, &m->activation_bytes, "activations");
    m->acts_f_memory = cuda_alloc_tensors((float**)&m->af, af, NUM_ACTS_F, &bytes, "activation statistics");
    m->activation_bytes += bytes;
    fill_scratch_sizes(sx, sf, cfg, B, T);
    m->scratch_x_memory = cuda_alloc_tensors((floatX**)&m->sx, sx, NUM_SCRATCH_X, &m->scratch_bytes, "backward scratch");
    m->scratch_f_memory = cuda_alloc_tensors((float**)&m->sf, sf, NUM_SCRATCH_F, &bytes, "backward scratch");
    m->scratch_bytes += bytes;
    // what moves between host and GPU in a training step sits in pinned host memory (gpt2_forward)
    m->inputs = (int*)pinned_malloc_check(BT * sizeof(int), "inputs");
    m->targets = (int*)pinned_malloc_check(BT * sizeof(int), "targets");
    m->d_inputs = (int*)cuda_malloc_check(BT * sizeof(int), "inputs");
    m->d_targets = (int*)cuda_malloc_check(BT * sizeof(int), "targets");
    cudaCheck(cudaEventCreateWithFlags(&m->tokens_copied, cudaEventDisableTiming));
    m->tokens_in_flight = 0;
    m->host_losses = (float*)pinned_malloc_check(BT * sizeof(float), "losses");
    token_chunks_alloc(&m->chunks, cfg->vocab_size, (int)BT);
    m->d_norm_partials = (float*)cuda_malloc_check(NORM_MAX_BLOCKS * sizeof(float), "norm partials");
    m->host_norm_partials = (float*)pinned_malloc_check(NORM_MAX_BLOCKS * sizeof(float), "norm partials");
    if (lt_workspace == NULL) { lt_workspace = cuda_malloc_check(LT_WORKSPACE_BYTES, "cuBLASLt workspace"); }
    // the widest column sum: the MLP's up-projection bias, 4C columns; the LayerNorm backwards'
    // block sums: 6 per input side in siamese mode, 2 per LayerNorm otherwise
    column_partials_reserve(4 * (size_t)cfg->channels);
    ln_partials_reserve((norm_mode_layout(cfg->norm_mode)->two_streams ? SIAMESE_SUMS : 2) * (size_t)cfg->channels);
    // the largest fp32 matmul output: dwte (Vp, C), dfcw (4C, C), or an activation gradient (B*T, C)
    size_t C = cfg->channels, big = (size_t)cfg->padded_vocab_size * C;
    if (4 * C * C > big) { big = 4 * C * C; }
    if (BT * C > big) { big = BT * C; }
    if (big > lt_fallback_elems) {
        if (lt_fallback) { cudaCheck(cudaFree(lt_fallback)); lt_fallback = NULL; }  // regrown at its next use
        lt_fallback_elems = big;
    }
}

static void gpt2_free(GPT2* m) {
    void* device[] = {m->params_memory, m->params_x_memory, m->grads_memory,     m->m_memory,
                      m->v_memory,      m->acts_x_memory,   m->acts_f_memory,    m->scratch_x_memory,
                      m->scratch_f_memory, m->d_inputs,     m->d_targets,        m->d_norm_partials};
    void* pinned[] = {m->inputs, m->targets, m->host_losses, m->host_norm_partials};
    void* host[] = {m->host_params};
    if (m->inputs) { cudaCheck(cudaEventDestroy(m->tokens_copied)); }  // made by gpt2_allocate
    for (size_t i = 0; i < sizeof(device) / sizeof(device[0]); i++) { cudaCheck(cudaFree(device[i])); }
    for (size_t i = 0; i < sizeof(pinned) / sizeof(pinned[0]); i++) { cudaCheck(cudaFreeHost(pinned[i])); }
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) { free(host[i]); }
    if (m->inputs) { token_chunks_free(&m->chunks); }
}

// the three LayerNorms of sublayer s (0 attention, 1 MLP) of layer l, for parameters or gradients
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

static SiameseStats sublayer_stats(const ActivationsF* a, int k, size_t BT) {
    SiameseStats st = {a->lnx_mean + k * BT, a->lnx_rstd + k * BT, a->lny_mean + k * BT,
                       a->lny_rstd + k * BT, a->ln_mean + k * BT,  a->ln_rstd + k * BT};
    return st;
}

static SiameseStats final_stats(const ActivationsF* a) {
    SiameseStats st = {a->lnfx_mean, a->lnfx_rstd, a->lnfy_mean, a->lnfy_rstd, a->lnf_mean, a->lnf_rstd};
    return st;
}

// where sublayer k's a (-r 2: two slots, k % 2), r and u (-r 2: one slot) and layer l's GELU output
// (-r 1 and 2: one slot) are kept, counted in (B, T, C) and (B, T, 4C) tensors
static size_t a_slot(const GPT2* m, int k) { return m->recompute >= 2 ? (size_t)(k % 2) : (size_t)k; }
static size_t ln_slot(const GPT2* m, int k) { return m->recompute >= 2 ? 0 : (size_t)k; }
static size_t gelu_slot(const GPT2* m, int l) { return m->recompute >= 1 ? 0 : (size_t)l; }

// ----------------------------------------------------------------------------
// forward

// the block of sublayer s of layer l: z = Attn_l(u) or z = MLP_l(u)
static void block_forward(GPT2* m, int l, int s, floatX* z, const floatX* u, int B, int T) {
    const GPT2Config* cfg = &m->config;
    int C = cfg->channels, NH = cfg->num_heads, BT = B * T;
    ParameterTensorsX* p = &m->params_x;
    ActivationsX* a = &m->ax;
    size_t lBT = (size_t)l * BT;
    if (s == 0) {
        floatX* qkv = a->qkv + lBT * 3 * C;
        floatX* atty = a->atty + lBT * C;
        matmul_forward(qkv, u, p->qkvw + (size_t)l * 3 * C * C, p->qkvb + (size_t)l * 3 * C, BT, C, 3 * C);
        flash_attention_forward(atty, m->af.att_lse + lBT * NH, qkv, B, T, C, NH);
        matmul_forward(z, atty, p->attprojw + (size_t)l * C * C, p->attprojb + (size_t)l * C, BT, C, C);
    } else {
        floatX* fch = a->fch + lBT * 4 * C;
        floatX* fch_gelu = a->fch_gelu + gelu_slot(m, l) * BT * 4 * C;
        matmul_forward(fch, u, p->fcw + (size_t)l * 4 * C * C, p->fcb + (size_t)l * 4 * C, BT, C, 4 * C);
        gelu_apply(fch_gelu, fch, (size_t)BT * 4 * C, 0);
        matmul_forward(z, fch_gelu, p->fcprojw + (size_t)l * C * 4 * C, p->fcprojb + (size_t)l * C, BT, 4 * C, C);
    }
}

// forward pass on host tokens (B, T); with targets, also the mean cross-entropy loss in m->mean_loss,
// and the logits are replaced by dL/dlogits (the classifier). B and T may be smaller than allocated
// (sampling runs B = 1).
static void gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T) {
    const GPT2Config* cfg = &m->config;
    if (m->acts_x_memory == NULL) { fatal("gpt2_forward: buffers not allocated (call gpt2_allocate)"); }
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
    // copies. The buffers may be rewritten only once those copies are done: a forward pass with
    // targets waits for its loss at the end (which queues behind them), one without does not, so
    // the next forward pass waits for them here (sampling; never in a training step).
    if (m->tokens_in_flight) { cudaCheck(cudaEventSynchronize(m->tokens_copied)); }
    memcpy(m->inputs, inputs, (size_t)BT * sizeof(int));
    cudaCheck(cudaMemcpyAsync(m->d_inputs, m->inputs, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, 0));
    m->has_targets = targets != NULL;
    if (targets) {
        memcpy(m->targets, targets, (size_t)BT * sizeof(int));
        cudaCheck(cudaMemcpyAsync(m->d_targets, m->targets, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, 0));
    }
    cudaCheck(cudaEventRecord(m->tokens_copied, 0));
    m->tokens_in_flight = 1;

    ParameterTensorsX* p = &m->params_x;
    ActivationsX* a = &m->ax;
    ActivationsF* f = &m->af;
    size_t N = (size_t)BT * C;  // elements in one (B, T, C) tensor
    NormMode mode = cfg->norm_mode;

    // siamese: the update of each sublayer runs inside the next input side's kernel (siamese.cuh)
    floatX* resy = norm_mode_layout(mode)->two_streams ? a->resy : NULL;  // both streams start as e
    encoder_forward_kernel<<<ceil_div((long)N, 256), 256>>>(a->resx, resy, m->d_inputs, p->wte, p->wpe, BT, T, C);
    cudaCheckLaunch();

    for (int k = 0; k < 2 * L; k++) {
        int l = k / 2, s = k % 2;
        floatX* x = a->resx + k * N;
        floatX* x_next = a->resx + (k + 1) * N;
        floatX* z = a->blockout + k * N;
        floatX* lnw = (s == 0 ? p->ln1w : p->ln2w) + (size_t)l * C;
        floatX* lnb = (s == 0 ? p->ln1b : p->ln2b) + (size_t)l * C;
        float* mean = f->ln_mean + (size_t)k * BT;
        float* rstd = f->ln_rstd + (size_t)k * BT;
        switch (mode) {  // no default: -Wswitch names a mode this does not handle
            case NORM_PRE: {
                floatX* u = a->blockin + ln_slot(m, k) * N;
                layernorm_forward(u, mean, rstd, x, lnw, lnb, BT, C);              // u = LN(x)
                block_forward(m, l, s, z, u, B, T);                                // z = F(u)
                residual_forward(x_next, x, z, N);                                 // x = x + z
                break;
            }
            case NORM_POST: {
                floatX* sum = a->lnsum + ln_slot(m, k) * N;
                block_forward(m, l, s, z, x, B, T);                                // z = F(x)
                residual_forward(sum, x, z, N);                                    // r = x + z
                layernorm_forward(x_next, mean, rstd, sum, lnw, lnb, BT, C);       // x = LN(r)
                break;
            }
            case NORM_SIAMESE: {
                floatX* u = a->blockin + ln_slot(m, k) * N;
                floatX* lnx = a->lnx + a_slot(m, k) * N;
                floatX* r = a->lnsum + ln_slot(m, k) * N;
                floatX* y = a->resy + k * N;
                // a = LN(x), u = LN(a + LN(y)); after the first sublayer, x and y come from the update
                // of sublayer k - 1 (x = a + z/c, y = y + z) in the same kernel
                if (k > 0) {
                    siamese_update_input_forward(x, y, a->lnx + a_slot(m, k - 1) * N, a->resy + (k - 1) * N,
                                                 a->blockout + (k - 1) * N, siamese_scale((k - 1) / 2), lnx, r, u,
                                                 sublayer_stats(f, k, BT), sublayer_norms(p, l, s, C), BT, C);
                } else {
                    siamese_input_forward(lnx, r, u, sublayer_stats(f, k, BT), x, y, sublayer_norms(p, l, s, C), BT, C);
                }
                block_forward(m, l, s, z, u, B, T);                                // z = F(u)
                break;
            }
        }
    }

    floatX* x_final = a->resx + 2 * L * N;
    switch (mode) {
        case NORM_PRE:
        case NORM_POST:
            layernorm_forward(a->lnf, f->lnf_mean, f->lnf_rstd, x_final, p->lnfw, p->lnfb, BT, C);  // h = LN(x)
            break;
        case NORM_SIAMESE:
            // the update of the last sublayer, then h = LN(LN(x) + LN(y))
            siamese_update_input_forward(x_final, a->resy + 2 * L * N, a->lnx + a_slot(m, 2 * L - 1) * N,
                                         a->resy + (2 * L - 1) * N, a->blockout + (2 * L - 1) * N,
                                         siamese_scale(L - 1), NULL, a->lnfsum, a->lnf, final_stats(f),
                                         final_norms(p), BT, C);
            break;
    }
    matmul_forward(a->logits, a->lnf, p->wte, NULL, BT, C, Vp);                // tied output layer
    if (targets) {
        classifier(a->logits, f->losses, m->d_targets, BT, V, Vp);  // the logits become dL/dlogits
        // the embedding gradient's work list: host work, done while the GPU runs the forward pass
        // just enqueued (kernel launches return at once); its upload queues behind them, and the
        // wait for the losses below waits for it too, before the next forward pass rewrites the list
        token_chunks_build(&m->chunks, m->inputs, BT);
        token_chunks_upload(&m->chunks);
        // the one wait of a forward pass in training: for the losses, after every copy and kernel above
        cudaCheck(cudaMemcpy(m->host_losses, f->losses, (size_t)BT * sizeof(float), cudaMemcpyDeviceToHost));
        m->tokens_in_flight = 0;
        double sum = 0.0;
        for (int i = 0; i < BT; i++) { sum += m->host_losses[i]; }
        m->mean_loss = (float)(sum / BT);
    } else {
        m->mean_loss = -1.0f;
    }
}

// ----------------------------------------------------------------------------
// backward

static void gpt2_zero_grad(GPT2* m) { cudaCheck(cudaMemset(m->grads_memory, 0, m->padded_parameters * sizeof(float))); }

// backward of the block of sublayer s of layer l given dz: du = (beta 0) or += (beta 1) dL/du,
// in fp32, and the weight gradients
static void block_backward(GPT2* m, int l, int s, float* du, float beta, const floatX* dz, const floatX* u, int B, int T) {
    const GPT2Config* cfg = &m->config;
    int C = cfg->channels, NH = cfg->num_heads, BT = B * T;
    ParameterTensorsX* p = &m->params_x;
    ParameterTensors* g = &m->grads;
    ActivationsX* a = &m->ax;
    ScratchX* sc = &m->sx;
    size_t lBT = (size_t)l * BT;
    if (s == 0) {
        size_t wo = (size_t)l * C * C;
        matmul_backward_input(sc->datty, CUDA_R_X, 0.0f, dz, p->attprojw + wo, BT, C, C, NULL);
        matmul_backward_weight(g->attprojw + wo, g->attprojb + (size_t)l * C, dz, a->atty + lBT * C, BT, C, C);
        flash_attention_backward(sc->dqkv, m->sf.att_dq, m->sf.att_dot, sc->datty, a->qkv + lBT * 3 * C, a->atty + lBT * C,
                                 m->af.att_lse + lBT * NH, B, T, C, NH, flash_dq_splits(B * NH, T));
        matmul_backward_input(du, CUDA_R_32F, beta, sc->dqkv, p->qkvw + 3 * wo, BT, C, 3 * C, NULL);
        matmul_backward_weight(g->qkvw + 3 * wo, g->qkvb + (size_t)l * 3 * C, sc->dqkv, u, BT, C, 3 * C);
    } else {
        size_t wo = (size_t)l * 4 * C * C;
        floatX* fch = a->fch + lBT * 4 * C;
        floatX* fch_gelu = a->fch_gelu + gelu_slot(m, l) * BT * 4 * C;
        matmul_backward_input(sc->dfch, CUDA_R_X, 0.0f, dz, p->fcprojw + wo, BT, 4 * C, C, fch);  // through GELU too
        if (m->recompute >= 1) { gelu_apply(fch_gelu, fch, (size_t)BT * 4 * C, 0); }  // GELU(fch) again, as the forward
        matmul_backward_weight(g->fcprojw + wo, g->fcprojb + (size_t)l * C, dz, fch_gelu, BT, 4 * C, C);
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
    ActivationsX* a = &m->ax;
    ActivationsF* f = &m->af;
    ScratchX* sx = &m->sx;
    ScratchF* sf = &m->sf;
    size_t N = (size_t)BT * C;
    NormMode mode = cfg->norm_mode;

    // the tied output layer, from the dlogits the forward pass left (for dloss = 1 / BT; the loss
    // scale is the matmuls' alpha): dh (fp32, in du) and dwte
    matmul_backward_input(sf->du, CUDA_R_32F, 0.0f, a->logits, p->wte, BT, C, Vp, NULL, loss_scale);
    matmul_backward_weight(g->wte, NULL, a->logits, a->lnf, BT, C, Vp, loss_scale);

    // the final LayerNorm(s): dx (and dy) at the last boundary
    floatX* x_final = a->resx + 2 * L * N;
    switch (mode) {  // no default: -Wswitch names a mode this does not handle
        case NORM_PRE:
        case NORM_POST:
            layernorm_backward(sf->dx, NULL, g->lnfw, g->lnfb, sf->du, x_final, p->lnfw, f->lnf_mean, f->lnf_rstd, BT,
                               C, 0);
            break;
        case NORM_SIAMESE:
            // the final merge (nothing flows into dx, dy: they start here), and dz of the last
            // sublayer (its update's backward, scale c_{L-1})
            siamese_input_backward(sf->dx, sf->dy, sx->dz, siamese_scale(L - 1), 0, sf->du, final_norms(g),
                                   final_norms(p), final_stats(f), x_final, a->resy + 2 * L * N, a->lnfsum, BT, C);
            break;
    }
    observe_stream_grads(m, 2 * L);

    // the sublayers, last to first; dx (dy) enter holding dL/d(stream) after sublayer k, leave before it
    for (int k = 2 * L - 1; k >= 0; k--) {
        int l = k / 2, s = k % 2;
        floatX* x = a->resx + k * N;
        floatX* lnw = (s == 0 ? p->ln1w : p->ln2w) + (size_t)l * C;
        floatX* lnb = (s == 0 ? p->ln1b : p->ln2b) + (size_t)l * C;
        float* dlnw = (s == 0 ? g->ln1w : g->ln2w) + (size_t)l * C;
        float* dlnb = (s == 0 ? g->ln1b : g->ln2b) + (size_t)l * C;
        float* mean = f->ln_mean + (size_t)k * BT;
        float* rstd = f->ln_rstd + (size_t)k * BT;
        floatX* r = a->lnsum + ln_slot(m, k) * N;
        floatX* u = a->blockin + ln_slot(m, k) * N;
        int rebuild = m->recompute >= 2;  // r and u of this sublayer again, as the forward made them
        switch (mode) {
            case NORM_PRE:
                // x_next = x + F(LN(x)): dz = dx_next, and dx = dx_next + LN_back(du)
                if (rebuild) { layernorm_recompute(u, mean, rstd, x, lnw, lnb, BT, C); }
                cast_to_x(sx->dz, sf->dx, N);
                block_backward(m, l, s, sf->du, 0.0f, sx->dz, u, B, T);
                layernorm_backward(sf->dx, NULL, dlnw, dlnb, sf->du, x, lnw, mean, rstd, BT, C, 1);
                break;
            case NORM_POST:
                // x_next = LN(x + F(x)): dr = LN_back(dx_next) (in place in dx, floatX copy in dz);
                // dz = dr; dx = dr + F_back(dr) (the block's input gradient accumulates into dx)
                if (rebuild) { residual_forward(r, x, a->blockout + k * N, N); }
                layernorm_backward(sf->dx, sx->dz, dlnw, dlnb, sf->dx, r, lnw, mean, rstd, BT, C, 0);
                block_backward(m, l, s, sf->dx, 1.0f, sx->dz, x, B, T);
                break;
            case NORM_SIAMESE: {
                // dz = dx_next / c + dy_next was written by the input side after this sublayer; the
                // block; then the three LNs of the input side, which also write dz of sublayer k - 1
                floatX* y = a->resy + k * N;
                SiameseStats st = sublayer_stats(f, k, BT);
                if (rebuild) { siamese_input_recompute(r, u, st, x, y, sublayer_norms(p, l, s, C), BT, C); }
                block_backward(m, l, s, sf->du, 0.0f, sx->dz, u, B, T);
                siamese_input_backward(sf->dx, sf->dy, k > 0 ? sx->dz : NULL, siamese_scale((k - 1) / 2), 1, sf->du,
                                       sublayer_norms(g, l, s, C), sublayer_norms(p, l, s, C), st, x, y, r, BT, C);
                break;
            }
        }
        observe_stream_grads(m, k);
    }

    // the embedding feeds both streams when there are two: dL/de = dx + dy
    const float* dy = norm_mode_layout(mode)->two_streams ? sf->dy : NULL;
    wte_backward(g->wte, sf->du, N, sf->dx, dy, &m->chunks, C);  // du is free now: the partial rows
    wpe_backward_kernel<<<ceil_div((long)T * C, 256), 256>>>(g->wpe, sf->dx, dy, B, T, C);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// optimizer

// the sum of squares of gradients [lo, hi) (a grid fixed by hi - lo, the partials summed in order
// on the host: deterministic). The host waits here for the partials: the loop needs the norm for
// clipping and for its finite check.
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
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    ParamSlice slices[NUM_PARAMETER_TENSORS];
    int num_slices = param_slices(m->param_sizes, lo, hi, slices);  // [lo, hi) cut at the tensors
    for (int s = 0; s < num_slices; s++) {
        size_t start = slices[s].start, n = slices[s].n, held = start - m->opt_lo;
        float wd = param_tensor_decays(slices[s].tensor) ? weight_decay : 0.0f;
        adamw_kernel<<<ceil_div((long)n, 256), 256>>>(m->params_memory + held, m->params_x_memory + start,
                                                      m->grads_memory + start, m->m_memory + held, m->v_memory + held,
                                                      n, lr, beta1, beta2, bc1, bc2, eps, wd, grad_scale);
        cudaCheckLaunch();
    }
}

#ifdef TESTING
// the global L2 norm of all gradients and an AdamW step of all parameters, for test_gpt2.cu (the
// trainer works on shards)
static float gpt2_grad_norm(GPT2* m) { return (float)sqrt(gpt2_grad_sumsq(m, 0, m->num_parameters)); }
static void gpt2_update(GPT2* m, float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                        int t) {
    gpt2_update_range(m, lr, beta1, beta2, eps, weight_decay, grad_scale, t, 0, m->num_parameters);
}
#endif

// cuBLASLt: one handle for the process; cuda_teardown releases it with the workspace and the
// fallback buffer (gpt2_allocate and matmul_fp32_out_fallback allocate those)
static void cuda_setup(void) { cublasCheck(cublasLtCreate(&lt_handle)); }

static void cuda_teardown(void) {
    cudaCheck(cudaFree(lt_workspace));  // cudaFree(NULL) does nothing
    cudaCheck(cudaFree(lt_fallback));
    lt_workspace = NULL;
    lt_fallback = NULL;
    lt_fallback_elems = 0;
    cudaCheck(cudaFree(column_partials));
    column_partials = NULL;
    column_partials_cols = 0;
    cudaCheck(cudaFree(ln_partials));
    ln_partials = NULL;
    ln_partials_cols = 0;
    for (int i = 0; i < lt_num_plans; i++) { lt_plan_destroy(&lt_plans[i]); }
    lt_num_plans = 0;
    cublasCheck(cublasLtDestroy(lt_handle));
}

#ifndef TESTING
// ============================================================================
// Part 3: training
// ============================================================================
// The loop itself (flags, data, evaluation, sampling, checkpoints, the step line) is shared with
// train_gpt2.c in common/train_loop.h; it reaches the model only through these functions. What it
// reads on the host (a logits row, the weights and moments of a checkpoint) is copied back here.
#include "common/train_loop.h"

// host copies of what the loop reads, allocated on first use
static struct {
    floatX* row_x;  // (Vp) one logits row as the GPU holds it
    float* row;     // (Vp) the same in fp32
    float* m;       // AdamW moments, for checkpoints and resuming
    float* v;
} host_copy;

static float gpu_forward(void* self, const int* inputs, const int* targets, int B, int T) {
    GPT2* m = (GPT2*)self;
    gpt2_forward(m, inputs, targets, B, T);
    return m->mean_loss;
}
static void gpu_backward(void* self, float loss_scale) { gpt2_backward((GPT2*)self, loss_scale); }
static void gpu_zero_grad(void* self) { gpt2_zero_grad((GPT2*)self); }
static double gpu_grad_sumsq(void* self, size_t lo, size_t hi) { return gpt2_grad_sumsq((GPT2*)self, lo, hi); }
static void gpu_update(void* self, float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                       int t, size_t lo, size_t hi) {
    gpt2_update_range((GPT2*)self, lr, beta1, beta2, eps, weight_decay, grad_scale, t, lo, hi);
}
static const float* gpu_logits_row(void* self, size_t row) {
    GPT2* m = (GPT2*)self;
    if (m->has_targets) { fatal("logits_row: the last forward pass had targets; its logits hold dL/dlogits"); }
    size_t Vp = m->config.padded_vocab_size;
    if (!host_copy.row) {
        host_copy.row_x = (floatX*)malloc_check(Vp * sizeof(floatX), "logits row (host)");
        host_copy.row = (float*)malloc_check(Vp * sizeof(float), "logits row (host)");
    }
    cudaCheck(cudaMemcpy(host_copy.row_x, m->ax.logits + row * Vp, Vp * sizeof(floatX), cudaMemcpyDeviceToHost));
    for (size_t j = 0; j < Vp; j++) { host_copy.row[j] = (float)host_copy.row_x[j]; }
    return host_copy.row;
}
// the losses of every position, which the forward pass with targets copied to the host
static const float* gpu_losses(void* self) {
    GPT2* m = (GPT2*)self;
    if (!m->has_targets) { fatal("losses: the last forward pass had no targets"); }
    return m->host_losses;
}
// the fp32 master weights this rank holds, at their place among all parameters
static const float* gpu_weights(void* self) {
    GPT2* m = (GPT2*)self;
    cudaCheck(cudaMemcpy(m->host_params + m->opt_lo, m->params_memory, (m->opt_hi - m->opt_lo) * sizeof(float),
                         cudaMemcpyDeviceToHost));
    return m->host_params;
}
static void gpu_moments(void* self, const float** mm, const float** vv) {
    GPT2* m = (GPT2*)self;
    size_t held = m->opt_hi - m->opt_lo;
    if (!host_copy.m) {
        host_copy.m = (float*)malloc_check(held * sizeof(float), "AdamW m (host)");
        host_copy.v = (float*)malloc_check(held * sizeof(float), "AdamW v (host)");
    }
    cudaCheck(cudaMemcpy(host_copy.m, m->m_memory, held * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(host_copy.v, m->v_memory, held * sizeof(float), cudaMemcpyDeviceToHost));
    *mm = host_copy.m;
    *vv = host_copy.v;
}
static void gpu_load_moments(void* self, const float* mm, const float* vv) {
    GPT2* m = (GPT2*)self;
    size_t bytes = (m->opt_hi - m->opt_lo) * sizeof(float);
    cudaCheck(cudaMemcpy(m->m_memory, mm, bytes, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(m->v_memory, vv, bytes, cudaMemcpyHostToDevice));
}
static float* gpu_grads(void* self) { return ((GPT2*)self)->grads_memory; }
// the floatX working copy: after a sharded update the ranks gather it (the fp32 master stays sharded)
static void* gpu_working_weights(void* self, size_t* elem_bytes) {
    *elem_bytes = sizeof(floatX);
    return ((GPT2*)self)->params_x_memory;
}
static void gpu_sync(void* self) {
    (void)self;
    cudaCheck(cudaDeviceSynchronize());
}

int main(int argc, char** argv) {
    // What needs no GPU comes first: -h, the flags, the output folder (read, not yet created), the
    // data, the model on the host (checkpoint or fresh) and the flags checked against it. So each
    // of those errors reads the same on a machine without a GPU (tests/test_train_cu_cli.sh). The
    // loop creates and locks the output folder once the GPU and its memory are ready: a run that
    // cannot start leaves nothing behind. The state file of a resume is read in the loop too.
    TrainRun run;
    train_run_setup(&run, argc, argv);
    GPT2 model;
    if (run.fresh) {
        gpt2_host_fresh(&model, &run.fresh_config, run.args.seed);
    } else {
        gpt2_host_from_checkpoint(&model, run.model_path);
    }
    train_run_attach_model(&run, &model.config, model.num_parameters, "");
    char why[200];  // attention's head sizes (attention.cuh), refused before the GPU is looked for
    if (!flash_head_size_supported(model.config.channels / model.config.num_heads, why, sizeof(why))) { fatal("%s", why); }

    char device[512];
    if (!cuda_device_usable(device, sizeof(device))) { fatal("%s", device); }
    // one GPU per rank (common/dist.h); ranks can share one only without NCCL (sums through the host)
    int gpus = 0;
    cudaCheck(cudaGetDeviceCount(&gpus));
#ifdef USE_NCCL
    if (run.dist.local_rank >= gpus) {
        fatal("%d ranks on this machine need a GPU each; it has %d", run.dist.local_rank + 1, gpus);
    }
#endif
    cudaCheck(cudaSetDevice(run.dist.local_rank % gpus));
    cuda_setup();
    printf("device: %s | precision %s\n", device, PRECISION_NAME);
    model.opt_lo = run.opt_lo;  // master weights and AdamW moments: all, or this rank's shard (ZeRO-1)
    model.opt_hi = run.opt_hi;
    model.padded_parameters = run.dist.padded;  // the collectives' equal shards (common/dist.h)
    model.recompute = run.args.recompute;        // -r: which activations the backward rebuilds
    gpt2_upload_params(&model);
    gpt2_allocate(&model, run.args.B, run.args.T);
    size_t held = model.opt_hi - model.opt_lo;
    printf("GPU memory: %.1f MiB parameters+grads+AdamW%s, %.1f MiB activations (recompute -r %d), %.1f MiB scratch\n",
           (model.padded_parameters * (sizeof(float) + sizeof(floatX)) + held * 3.0 * sizeof(float)) / 1048576.0,
           held < model.num_parameters ? " (master weights and AdamW: this rank's shard)" : "",
           model.activation_bytes / 1048576.0, model.recompute, model.scratch_bytes / 1048576.0);

    run.adamw.beta1 = 0.9f;  // AdamW as GPT-2 and GPT-3 were trained (the weight decay is -c)
    run.adamw.beta2 = 0.95f;
    run.adamw.eps = 1e-8f;

    TrainerOps ops = {
        .forward = gpu_forward,
        .backward = gpu_backward,
        .zero_grad = gpu_zero_grad,
        .grad_sumsq = gpu_grad_sumsq,
        .update = gpu_update,
        .logits_row = gpu_logits_row,
        .losses = gpu_losses,
        .weights = gpu_weights,
        .moments = gpu_moments,
        .load_moments = gpu_load_moments,
        .grads = gpu_grads,
        .working_weights = gpu_working_weights,
        .sync = gpu_sync,
        .peak_flops = PEAK_FLOPS,
    };
    train_run_loop(&run, &ops, &model);

    train_run_free(&run);
    gpt2_free(&model);
    free(host_copy.row_x);
    free(host_copy.row);
    free(host_copy.m);
    free(host_copy.v);
    cuda_teardown();
    return 0;
}
#endif // TESTING
