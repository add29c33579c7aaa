/*
train_gpt2.cu: SiameseNorm GPT-2 on one NVIDIA GPU, in mixed precision.

What this trains: the model of train_gpt2.c (read its header and dev/MODEL.md first), a GPT-2 whose
residual stream is wired as pre-norm, post-norm or SiameseNorm (two streams X and Y that share every
attention and MLP block), with the same structure, command line, checkpoints and step line (plus MFU).

Precision (the default BF16 build):
  - parameters: fp32 MASTER weights (what AdamW updates and checkpoints hold) and a bf16 working copy the passes read;
  - activations (the streams, LN outputs, qkv, attention output, MLP hidden, logits): bf16;
  - fp32: parameter gradients, AdamW m and v, the gradients of the streams (dx, dy) and LN inputs (sums over layers);
  - every reduction accumulates in fp32: LayerNorm statistics, softmax, the loss, the gradient norm, the column
    sums that give bias and LayerNorm parameter gradients, attention's tiles.
`make train_gpt2cu PRECISION=FP32` (-DENABLE_FP32) makes floatX = float everywhere and runs
cuBLASLt with CUBLAS_COMPUTE_32F on fp32 data (no TF32): slower, but tight parity with PyTorch.

Every kernel computes each output element in a fixed order that depends only on the problem sizes
(no atomics), so a run is bit-for-bit repeatable on the same GPU with the same cuBLASLt algorithms.

How to read this file: Part 0 the precision and small helpers; Part 1 the kernels in forward order, each backward
beside its forward, with the chapters siamese.cuh (LayerNorms), matmul_lt.cuh (cuBLASLt) and attention.cuh (flash
attention); Part 2 the model; Part 3 the training loop shared with train_gpt2.c (common/train_loop.h; train_gpt2.c's
Part 3 walks through one step). Backward functions ACCUMULATE (+=) into parameter gradients, zeroed once per step.
*/
#include <cuda_bf16.h>
#include "common/utils.h"  // fatal, malloc_check and the C headers (stdio, stdlib, string, stdint)
#include "cuda_common.cuh"  // the checks around CUDA and cuBLASLt calls, allocation, the device
#include "common/params.h"
#define RECOMPUTE_MAX 3  // -r 3: stream Y kept only at checkpoints (y_every_for), a level train_gpt2.c does not have
#include "common/args.h"

// ============================================================================
// Part 0: precision, small device helpers (the error checks: cuda_common.cuh)
// ============================================================================

#ifdef ENABLE_FP32
typedef float floatX;
#define CUDA_R_X CUDA_R_32F
#define PRECISION_NAME "fp32"
#define PEAK_FLOPS 67e12  // H100 SXM dense fp32 peak (no tensor cores), MFU's denominator in the FP32 build
#else
typedef __nv_bfloat16 floatX;
#define CUDA_R_X CUDA_R_16BF
#define PRECISION_NAME "bf16"
#define PEAK_FLOPS 989e12  // H100 SXM dense bf16 tensor-core peak (989 TFLOP/s), the denominator of MFU
#endif

#include "siamese.cuh"  // LayerNorms, plain and two-stream, and the row helpers (Pack, VEC_X, warp_sum, ...)

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) { v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset)); }
    return v;
}

// the max (is_max) or the sum of v over the block, the same bits in every thread: each warp's lane 0 posts to
// posts[warp] (shared), all add the posts in warp order; two calls in a row need two arrays (all read, then rewrite)
__device__ float block_reduce(float v, int is_max, float* posts) {
    v = is_max ? warp_max(v) : warp_sum(v);
    if (threadIdx.x % 32 == 0) { posts[threadIdx.x / 32] = v; }
    __syncthreads();
    v = is_max ? -INFINITY : 0.0f;
    for (int w = 0; w < (int)blockDim.x / 32; w++) { v = is_max ? fmaxf(v, posts[w]) : v + posts[w]; }
    return v;
}

// dst = src converted to floatX: the copy-down of fp32 master weights, and fp32 -> floatX gradients
__global__ void cast_to_x_kernel(floatX* dst, const float* src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { dst[i] = (floatX)src[i]; }
}

static void cast_to_x(floatX* dst, const float* src, size_t n) {
    cast_to_x_kernel<<<ceil_div((long)n, 256), 256>>>(dst, src, n);
    cudaCheckLaunch();
}

// ============================================================================
// Part 1: the layers, in forward order
// ============================================================================

// ----------------------------------------------------------------------------
// embedding: e[b,t] = wte[token] + wpe[t], one thread per element; in siamese mode also stream Y (out2)

__global__ void encoder_forward_kernel(floatX* out, floatX* out2, const int* tokens, const floatX* wte,
                                       const floatX* wpe, int BT, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)BT * C) { return; }
    int bt = (int)(i / C), c = (int)(i % C);
    float e = (float)wte[(size_t)tokens[bt] * C + c] + (float)wpe[(size_t)(bt % T) * C + c];
    out[i] = (floatX)e;
    if (out2) { out2[i] = (floatX)e; }
}

// The backward pass scatter-adds each row of dL/de (dx, plus dy in siamese mode) into wte[token] and wpe[t].
// A token can repeat in a batch, so, with no atomics, the host lists the positions by token in chunks of EMBED_CHUNK
// (token_chunks_build, while the GPU runs the forward pass), which fixes every sum's order:
//   wte_chunk_kernel: a block per chunk sums its dL/de rows in order, into dwte (token's only chunk) or a partial row;
//   wte_finish_kernel: one block per token with several chunks and 256 columns adds its partial rows in order.

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

// dwte += dL/de = dx (+ dy) summed by token, from the work list on the device; partials: free device memory
// for 2 BT / EMBED_CHUNK rows of C floats (n > EMBED_CHUNK positions make under 2n / EMBED_CHUNK chunks)
static void wte_backward(float* dwte, float* partials, const float* dx, const float* dy, const TokenChunks* tc, int C) {
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
// the residual add of the pre and post modes, out = x + z (their LayerNorms: siamese.cuh, included above)

__global__ void residual_forward_kernel(floatX* out, const floatX* x, const floatX* z, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = (floatX)((float)x[i] + (float)z[i]); }
}

static void residual_forward(floatX* out, const floatX* x, const floatX* z, size_t n) {
    residual_forward_kernel<<<ceil_div((long)n, 256), 256>>>(out, x, z, n);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). A kernel, not an epilogue, in the
// forward (so the recompute, -r 1 or 2, rebuilds it bit for bit) and in the backward where no DGELU runs.

#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)

__device__ __forceinline__ float gelu_value(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float gelu_slope(float x) {  // dGELU/dx
    float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    float dth = (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * dth;
}

// out = GELU(inp) (backward 0) or out = out * GELU'(inp) (backward 1), W per thread: VEC_X where row_width allows
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

static void gelu_apply(floatX* out, const floatX* inp, size_t n, int backward) {
    int w = row_width(n, {out, inp});
    auto kernel = w == VEC_X ? gelu_kernel<VEC_X> : gelu_kernel<1>;
    kernel<<<ceil_div((long)(n / w), 256), 256>>>(out, inp, n / w, backward);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// the linear layers, through cuBLASLt, which like all of BLAS is column-major: the bytes of a row-major (R x K) array
// M are exactly the col-major (K x R) matrix M^T, so we compute the TRANSPOSE of each product, whose operands it sees
// for free. W (OC, C) row-major like nn.Linear, inp (BT, C), out (BT, OC); each a MatmulSpec D (m x n) = op(A) . op(B):
//
//   forward   out = inp . W^T         transposed: out^T (OC x BT) = W (OC x C) . inp^T (C x BT)
//             A = W op T (W's bytes are W^T), B = inp op N; m = OC, n = BT, k = C; bias[i] adds to D's row i.
//   dinp      dinp = dout . W         transposed: dinp^T (C x BT) = W^T (C x OC) . dout^T (OC x BT)
//             A = W op N, B = dout op N; m = C, n = BT, k = OC.
//   dW        dW = dout^T . inp       transposed: dW^T (C x OC) = inp^T (C x BT) . dout (BT x OC)
//             A = inp op N, B = dout op T (its bytes are dout^T); m = C, n = OC, k = BT; beta 1: +=.
#include "matmul_lt.cuh"

// The fused GELU backward (test_gpt2cu sets 0 too), only where cuBLASLt's EPILOGUE_AUX_LD = 4C is a multiple of 8
static int gelu_fusion = 1;

// out[BT][OC] = inp[BT][C] . W[OC][C]^T + bias
static void matmul_forward(floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int BT, int C, int OC) {
    MatmulSpec spec = {OC, BT, C, w, 1, inp, 0, out, CUDA_R_X, 1.0f, 0.0f, bias, NULL};
    matmul_lt(&spec, 0);
}

// dinp = alpha dout . W (dinp_type CUDA_R_X or CUDA_R_32F; beta = 1 accumulates). With gelu_pre (the
// layer's input was GELU(gelu_pre)), dinp = dL/d(gelu_pre): the fused DGELU epilogue, else the GELU kernel.
static void matmul_backward_input(void* dinp, cudaDataType_t dinp_type, float beta, const floatX* dout, const floatX* w,
                                  int BT, int C, int OC, const floatX* gelu_pre, float alpha = 1.0f) {
    if (gelu_pre && (dinp_type != CUDA_R_X || beta != 0.0f)) {
        fatal("matmul_backward_input: GELU backward needs a fresh floatX output");
    }
    MatmulSpec spec = {C, BT, OC, w, 0, dout, 0, dinp, dinp_type, alpha, beta, NULL, gelu_pre};
    if (gelu_pre && gelu_fusion && C % 8 == 0 && matmul_lt(&spec, 1)) { return; }
    spec.aux = NULL;  // the plain matmul, then the GELU kernel
    matmul_lt(&spec, 0);
    if (gelu_pre) { gelu_apply((floatX*)dinp, gelu_pre, (size_t)BT * C, 1); }
}

// dW += alpha dout^T . inp (fp32); dbias += dout's column sums, given (alpha 1), by a kernel (BGRADB would overwrite)
static void matmul_backward_weight(float* dw, float* dbias, const floatX* dout, const floatX* inp, int BT, int C, int OC,
                                   float alpha = 1.0f) {
    if (dbias && alpha != 1.0f) { fatal("matmul_backward_weight: a bias gradient takes alpha 1"); }
    MatmulSpec spec = {C, OC, BT, inp, 0, dout, 1, dw, CUDA_R_32F, alpha, 1.0f, NULL, NULL};
    matmul_lt(&spec, 0);
    if (dbias) { column_grads(dbias, dout, BT, OC); }
}

// ----------------------------------------------------------------------------
// causal self-attention: flash attention reads q, k, v straight from the qkv rows [q | k | v] (NH heads of HS = C/NH
// channels, 1 to 128), writes the (B, T, C) rows the projection reads and a log-sum-exp per row for the backward.
#include "attention.cuh"

// ----------------------------------------------------------------------------
// the fused classifier: softmax cross-entropy over the V real entries of each logits row (V..Vp-1: padding) and
// its gradient, in ONE pass over the row, written IN PLACE over the logits:
//     loss[row]  = lse - logit[target],        lse = log sum_{i < V} exp(logit_i) = M + log S
//     dlogits[i] = (softmax_i - [i == target]) * dloss = exp(logit_i - M) dloss / S - [i == target] dloss, 0 on padding
// with M the row max, S = sum_{i < V} exp(logit_i - M), dloss = 1 / (B*T), the gradient of the mean loss.
//
// One block of CLASSIFIER_THREADS threads per row; each holds CLASSIFIER_PER_THREAD entries in fp32 registers (-inf
// for the padding), read at t, t + CLASSIFIER_THREADS, ... (coalesced). Rows up to CLASSIFIER_TILE = 51200 (GPT-2's
// 50304; 50 fp32 per thread fit 64 registers unspilled) are read and written once: classifier_kernel<true>; longer
// rows take classifier_kernel<false>, the same three steps over tiles of the row, each loaded again per step.

#define CLASSIFIER_THREADS 1024
#define CLASSIFIER_PER_THREAD 50
#define CLASSIFIER_TILE (CLASSIFIER_THREADS * CLASSIFIER_PER_THREAD)
#define CLASSIFIER_W ((int)(4 / sizeof(floatX)))  // entries per 4-byte unit: 2 bf16, 1 fp32
#define CLASSIFIER_UNITS (CLASSIFIER_PER_THREAD / CLASSIFIER_W)  // units per thread
typedef Pack<floatX, CLASSIFIER_W> ClassifierUnit;

// the unit index of this thread's k-th unit of tile t
__device__ __forceinline__ int classifier_unit(int t, int k) {
    return t * (CLASSIFIER_TILE / CLASSIFIER_W) + threadIdx.x + k * CLASSIFIER_THREADS;
}

// x = this thread's units of tile t of the row, as fp32 (-inf for the padding and past the row); returns their max
__device__ __forceinline__ float classifier_load(float (*x)[CLASSIFIER_W], const floatX* row, int t, int V, int Vp) {
    float max = -INFINITY;
    for (int k = 0; k < CLASSIFIER_UNITS; k++) {
        int j = classifier_unit(t, k);
        ClassifierUnit u = {};  // past the row (j * CLASSIFIER_W >= Vp >= V): not read, all -inf
        if (j < Vp / CLASSIFIER_W) { u = load_pack<CLASSIFIER_W>(row + (size_t)j * CLASSIFIER_W); }
        for (int e = 0; e < CLASSIFIER_W; e++) { x[k][e] = j * CLASSIFIER_W + e < V ? (float)u.v[e] : -INFINITY; }
        for (int e = 0; e < CLASSIFIER_W; e++) { max = fmaxf(max, x[k][e]); }
    }
    return max;
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
    for (int t = 0; t < tiles; t++) { thread_max = fmaxf(thread_max, classifier_load(x, l, t, V, Vp)); }
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

// the losses of the BT rows, the rows overwritten by dL/dlogits (above): whole 4-byte units (the trainer pads to 128)
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

// partial sums of squares of the fp32 gradients, one per block, added by the host in order (in double). The grid
// (gpt2_grad_sumsq: each thread NORM_PER_THREAD elements or more) depends on n alone, and so does each sum's order.
#define NORM_THREADS 512
#define NORM_MAX_BLOCKS 1024  // what GPT-2 sizes get: ~2 waves on an H100
#define NORM_PER_THREAD 16

__global__ void sumsq_kernel(float* partials, const float* g, size_t n) {
    __shared__ float posts[NORM_THREADS / 32];
    float sum = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        sum += g[i] * g[i];
    }
    sum = block_reduce(sum, 0, posts);
    if (threadIdx.x == 0) { partials[blockIdx.x] = sum; }
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

// a pointer per parameter tensor, in checkpoint order, as in train_gpt2.c (common/params.h's PARAMETER_TENSORS,
// sized by fill_param_sizes): ParameterTensors into the fp32 gradients, ParameterTensorsX into the floatX copy.
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

// The activations and the backward scratch share one device allocation: next_tensor hands out its next n Ts,
// 256-byte aligned (cuBLASLt, the 16-byte row kernels); with memory NULL it only counts, so it sizes and points.
template <typename T>
static T* next_tensor(char* memory, size_t* used, size_t n) {
    T* t = memory ? (T*)(memory + *used) : NULL;
    *used += (n * sizeof(T) + 255) / 256 * 256;
    return t;
}

// the activations the backward pass needs, saved by the forward pass, as in train_gpt2.c (the math's names, of
// dev/MODEL.md, beside each). X(type, name, elements): sizes from point_buffers, where a factor S (two streams),
// R (r stored) or U (u stored) of 0 empties a tensor the mode does not use (common/params.h, NORM_MODE_LAYOUTS).
// Recompute (-r; train_gpt2.c's ActivationTensors says more): -r 1 keeps one layer of fch_gelu, rebuilt from fch in
// the backward; -r 2 also one sublayer of lnsum and blockin, rebuilt from the streams and the saved statistics, and
// two of lnx (the update of sublayer k reads a of k - 1; the backward never reads a); -r 3 thins stream Y (below).
#define ACTIVATION_TENSORS(X) \
    X(floatX, resx, (2 * L + 1) * BT * C)       /* stream X at each sublayer boundary; resx[0] is e */ \
    X(floatX, resy, S * y_slots * BT * C)       /* siamese: stream Y (sublayer_at: which boundary where) */ \
    X(floatX, lnx, S * a_sublayers * BT * C)    /* siamese: a = LN(x), the base of the X update */ \
    X(floatX, lnsum, R * ln_sublayers * BT * C) /* r, what the main LN normalises: siamese a + LN(y), post x + z */ \
    X(floatX, blockin, U * ln_sublayers * BT * C) /* the block input u: pre LN(x), siamese LN(r); post reads x */ \
    X(LnStats, ln_stats, (2 * L + 1) * BT)      /* main LN (ln1 / ln2, then lnf): train_gpt2.c's ln_mean, ln_rstd */ \
    X(LnStats, lnx_stats, S * (2 * L + 1) * BT) /* siamese: statistics of LN(x) (lnx1 / lnx2, then lnfx) */ \
    X(LnStats, lny_stats, S * (2 * L + 1) * BT) /* siamese: statistics of LN(y) (lny1 / lny2, then lnfy) */ \
    X(floatX, qkv, L * BT * 3 * C) \
    X(float, att_lse, L * B * NH * T)           /* each attention row's log-sum-exp, all its backward needs */ \
    X(floatX, atty, L * BT * C)                 /* attention output before its projection */ \
    X(floatX, fch, L * BT * 4 * C)              /* MLP hidden pre-activation */ \
    X(floatX, fch_gelu, gelu_layers * BT * 4 * C) /* GELU(fch) */ \
    X(floatX, blockout, 2 * L * BT * C)         /* z, the block output */ \
    X(floatX, lnfsum, S * BT * C)               /* siamese: r of the final merge, LN(x; lnfx) + LN(y; lnfy) */ \
    X(floatX, lnf, BT * C)                      /* h, the final LN output */ \
    X(floatX, logits, BT * Vp)                  /* overwritten by dL/dlogits in a forward pass with targets */ \
    X(float, losses, BT)

#define DECLARE_TENSOR(T, name, n) T* name;

typedef struct { ACTIVATION_TENSORS(DECLARE_TENSOR) } ActivationTensors;

// scratch for the backward pass, reused by every layer (only the streams' gradients, dx and dy, travel)
#define SCRATCH_TENSORS(X) \
    X(float, dx, BT * C)        /* dL/d(stream X) at the current sublayer boundary */ \
    X(float, dy, S * BT * C)    /* siamese: dL/d(stream Y) */ \
    X(floatX, dz, BT * C)       /* dL/dz, the block output gradient */ \
    X(float, du, BT * C)        /* dL/du, the block input gradient (dL/dh at the top) */ \
    X(floatX, datty, BT * C) \
    X(floatX, dqkv, BT * 3 * C) \
    X(floatX, dfch, BT * 4 * C) /* dL/d(MLP pre-activation) */ \
    X(float, att_dot, B * NH * T) /* attention: sum_c dO O per row */

typedef struct { SCRATCH_TENSORS(DECLARE_TENSOR) } GradScratch;

// -r 3, siamese: stream Y kept at the boundaries k % y_every == 0 and at 2L (the final merge reads it), then
// y_every - 1 SEGMENT slots shared by the boundaries between (sublayer_at). The forward writes every y_k, so the top
// segment is in place when the backward starts; walking down, it rebuilds each lower segment from its kept boundary
// by the forward's update y + z (y_segment_ensure; z is kept for every sublayer). Below -r 3, pre, post: y_every 1.
static int y_slots_for(int L, int every) { return ceil_div(2 * L, every) + every; }

// -r 3's stride: the fewest slots, near sqrt(2L + 1), of equal counts the longest (L 12: 6, 10 slots of 25)
static int y_every_for(int L, int recompute) {
    int every = 1;
    for (int e = 2; recompute >= 3 && e <= 2 * L; e++) {
        if (y_slots_for(L, e) <= y_slots_for(L, every)) { every = e; }
    }
    return every;
}

#define CARVE_ACTIVATION(T, name, n) acts->name = next_tensor<T>(memory, &used, n);
#define CARVE_SCRATCH(T, name, n) scratch->name = next_tensor<T>(memory, &used, n);

// points the activation, then the scratch tensors into `memory` (NULL: counts); their bytes (activations: *acts_bytes)
static size_t point_buffers(ActivationTensors* acts, GradScratch* scratch, size_t* acts_bytes, char* memory,
                            const GPT2Config* cfg, int B, int T, int recompute) {
    size_t L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads, Vp = cfg->padded_vocab_size, BT = (size_t)B * T;
    const NormModeLayout* mode = norm_mode_layout(cfg->norm_mode);
    size_t S = mode->two_streams, U = mode->block_input, R = mode->ln_sum;
    size_t gelu_layers = recompute >= 1 ? 1 : L;       // layers of fch_gelu kept
    size_t ln_sublayers = recompute >= 2 ? 1 : 2 * L;  // sublayers of lnsum and blockin kept
    size_t a_sublayers = recompute >= 2 ? 2 : 2 * L;   // and of lnx
    size_t y_slots = y_slots_for((int)L, y_every_for((int)L, recompute));  // of stream Y (2L + 1 below -r 3)
    size_t used = 0;
    ACTIVATION_TENSORS(CARVE_ACTIVATION)
    *acts_bytes = used;
    SCRATCH_TENSORS(CARVE_SCRATCH)
    return used;
}

typedef struct GPT2 {
    GPT2Config config;
    size_t param_sizes[NUM_PARAMETER_TENSORS];  // floats in each parameter tensor (common/params.h)
    size_t num_parameters, padded_parameters;  // padded: zeros up to a multiple of the ranks (common/dist.h)
    float *host_params, *host_moments;  // host fp32 for checkpoints: the weights, AdamW's m then v (on first use)
    floatX* host_row_x;         // one logits row as the GPU holds it, and in fp32 (allocated on first use)
    float* host_row;
    float* params_memory;       // device fp32 master weights, of parameters [opt_lo, opt_hi)
    ParameterTensorsX params_x; // the floatX working copy, pointing into params_x_memory
    floatX* params_x_memory;    // device, all parameters and the zero padding
    ParameterTensors grads;     // the same layout, pointing into grads_memory
    float* grads_memory;        // device fp32, all parameters and the zero padding
    float *m_memory, *v_memory; // device fp32 AdamW moments of parameters [opt_lo, opt_hi), v after m
    size_t opt_lo, opt_hi;      // all parameters (set by gpt2_allocate), or a rank's shard (ZeRO-1: set before it)
    ActivationTensors acts;
    GradScratch scratch;
    char* buffers_memory;       // device: every activation tensor, then every scratch tensor
    size_t acts_bytes, scratch_bytes;
    int batch_size, seq_len, cur_B, cur_T;  // the (B, T) the buffers were allocated for, and the last forward pass's
    int recompute;              // -r: 0 to 3 (ActivationTensors); set before gpt2_allocate, 0 unless set
    int y_every;                // stream Y kept at every y_every-th boundary (sublayer_at; 1 below -r 3)
    int y_segment;              // the kept boundary below the segment of stream Y whose slots hold it, -1: none
    int *tokens, *d_tokens;     // pinned host (2, B, T) and device: the last forward pass's inputs, then targets
    int has_targets;            // the last forward pass had targets: the logits hold dL/dlogits
    float* host_losses;         // pinned (B, T)
    TokenChunks chunks;         // the embedding gradient's work list of the last forward pass with targets
    float *d_norm_partials, *host_norm_partials;  // (NORM_MAX_BLOCKS) device and pinned
    // NULL in training; test_gpt2.cu's view of the stream gradients: gpt2_backward calls it at every
    // sublayer boundary b (2L down to 0) with the DEVICE fp32 dL/dx and dL/dy (NULL outside siamese)
    void (*stream_grad_hook)(void* ctx, int boundary, const float* dx, const float* dy);
    void* stream_grad_ctx;
} GPT2;

// The model is built on the host as in train_gpt2.c (the config and fp32 weights, from a checkpoint or fresh;
// no GPU needed, so a bad checkpoint is refused the same way on any machine), then uploaded by gpt2_allocate.
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

// uploads the weights (host_params -> device fp32 master weights, floatX working copy); allocates once for (B, T) steps
static void gpt2_allocate(GPT2* m, int B, int T) {
    const GPT2Config* cfg = &m->config;
    size_t n = m->num_parameters, BT = (size_t)B * T, C = cfg->channels;
    char why[200];  // attention's head size on this GPU (its shared memory): refused before anything is allocated
    if (!flash_attention_supported(cfg->channels / cfg->num_heads, why, sizeof(why))) { fatal("%s", why); }
    if (m->opt_hi == 0) { m->opt_hi = n; }
    if (m->padded_parameters < n) { m->padded_parameters = n; }
    size_t held = m->opt_hi - m->opt_lo;  // ZeRO-1: the master weights and moments of this rank's shard only
    m->batch_size = B;
    m->seq_len = T;
    if (m->recompute < 0 || m->recompute > RECOMPUTE_MAX) {
        fatal("recompute -r %d is out of range [0, %d]", m->recompute, RECOMPUTE_MAX);
    }
    m->y_every = y_every_for(cfg->num_layers, m->recompute);
    m->y_segment = -1;
    m->grads_memory = (float*)cuda_malloc_check(m->padded_parameters * sizeof(float), "gradients");
    m->params_x_memory = (floatX*)cuda_malloc_check(m->padded_parameters * sizeof(floatX), "working weights");
    m->params_memory = (float*)cuda_malloc_check(held * sizeof(float), "master weights");
    point_parameters(&m->grads, m->grads_memory, m->param_sizes);
    point_parameters(&m->params_x, m->params_x_memory, m->param_sizes);
    // the fp32 weights reach the working copy through the gradient buffer (gpt2_zero_grad clears it); padding stays 0
    cudaCheck(cudaMemcpy(m->grads_memory, m->host_params, n * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(m->params_x_memory, 0, m->padded_parameters * sizeof(floatX)));
    cast_to_x(m->params_x_memory, m->grads_memory, n);
    cudaCheck(cudaMemcpy(m->params_memory, m->host_params + m->opt_lo, held * sizeof(float), cudaMemcpyHostToDevice));
    m->m_memory = (float*)cuda_malloc_check(2 * held * sizeof(float), "AdamW moments");
    m->v_memory = m->m_memory + held;
    cudaCheck(cudaMemset(m->m_memory, 0, 2 * held * sizeof(float)));
    size_t bytes = point_buffers(&m->acts, &m->scratch, &m->acts_bytes, NULL, cfg, B, T, m->recompute);
    m->scratch_bytes = bytes - m->acts_bytes;
    m->buffers_memory = (char*)cuda_malloc_check(bytes, "activations and backward scratch");
    point_buffers(&m->acts, &m->scratch, &m->acts_bytes, m->buffers_memory, cfg, B, T, m->recompute);
    m->tokens = (int*)pinned_malloc_check(2 * BT * sizeof(int), "tokens");
    m->d_tokens = (int*)cuda_malloc_check(2 * BT * sizeof(int), "tokens");
    m->host_losses = (float*)pinned_malloc_check(BT * sizeof(float), "losses");
    token_chunks_alloc(&m->chunks, cfg->vocab_size, (int)BT);
    m->d_norm_partials = (float*)cuda_malloc_check(NORM_MAX_BLOCKS * sizeof(float), "norm partials");
    m->host_norm_partials = (float*)pinned_malloc_check(NORM_MAX_BLOCKS * sizeof(float), "norm partials");
    // the widest column sum (the MLP's up-projection bias, 4C), the LayerNorm backwards' block sums (siamese: 6 a side)
    partials_reserve((size_t)COLUMN_MAX_SPLITS * 4 * C);
    partials_reserve((size_t)LN_GRAD_BLOCKS * (norm_mode_layout(cfg->norm_mode)->two_streams ? SIAMESE_SUMS : 2) * C);
}

static void gpt2_free(GPT2* m) {
    void* device[] = {m->params_memory,  m->params_x_memory, m->grads_memory,
                      m->m_memory,       m->buffers_memory,  m->d_tokens,     m->d_norm_partials};
    void* pinned[] = {m->tokens, m->host_losses, m->host_norm_partials};
    void* host[] = {m->host_params, m->host_moments, m->host_row_x, m->host_row};
    for (void* p : device) { cudaCheck(cudaFree(p)); }
    for (void* p : pinned) { cudaCheck(cudaFreeHost(p)); }
    for (void* p : host) { free(p); }
    token_chunks_free(&m->chunks);
    partials_free();  // reserved by gpt2_allocate
}

// the three LayerNorms of sublayer s (0 attention, 1 MLP) of layer l (outside siamese, w and b only), then the final's
template <typename T>
static SiameseNormsT<T> sublayer_norms(const ParamPtrs<T>* p, int l, int s, int C) {
    size_t o = (size_t)l * C;
    if (s == 0) { return {p->lnx1w + o, p->lnx1b + o, p->lny1w + o, p->lny1b + o, p->ln1w + o, p->ln1b + o}; }
    return {p->lnx2w + o, p->lnx2b + o, p->lny2w + o, p->lny2b + o, p->ln2w + o, p->ln2b + o};
}

template <typename T>
static SiameseNormsT<T> final_norms(const ParamPtrs<T>* p) {
    return {p->lnfxw, p->lnfxb, p->lnfyw, p->lnfyb, p->lnfw, p->lnfb};
}

// the segment of stream Y that boundary k lies in (the kept boundary below it), -1 where y_k is kept
static int y_segment_of(const GPT2* m, int k) {
    int e = m->y_every;
    return k % e == 0 || k == 2 * m->config.num_layers ? -1 : k / e * e;
}

// sublayer k's activations, as the forward writes and the backward reads them; k = 2L: only x, y, st (the final merge)
typedef struct {
    int l, s;               // its layer k / 2, and 0 attention or 1 MLP
    floatX *x, *y;          // the streams entering it (y: siamese)
    floatX *a, *r, *u, *z;  // a = LN(x), r, the block input u (post: x itself), the block output z
    floatX* gelu;           // the MLP's GELU output
    SiameseStats st;        // its LayerNorms' statistics (ln: the main LN's, in every mode)
} Sublayer;

static Sublayer sublayer_at(const GPT2* m, int k, int BT) {
    const ActivationTensors* t = &m->acts;
    size_t N = (size_t)BT * m->config.channels, K = (size_t)k * BT;
    size_t a_slot = m->recompute >= 2 ? k % 2 : k, ln_slot = m->recompute >= 2 ? 0 : k;
    int L = m->config.num_layers, e = m->y_every;  // y_k: kept in slot ceil(k / e), else segment slot k % e
    size_t y_slot = y_segment_of(m, k) < 0 ? ceil_div(k, e) : ceil_div(2 * L, e) + k % e;
    Sublayer sub;
    sub.l = k / 2;
    sub.s = k % 2;
    sub.x = t->resx + k * N;
    sub.y = t->resy + y_slot * N;
    sub.a = t->lnx + a_slot * N;
    sub.r = t->lnsum + ln_slot * N;
    sub.u = m->config.norm_mode == NORM_POST ? sub.x : t->blockin + ln_slot * N;
    sub.z = t->blockout + k * N;
    sub.gelu = t->fch_gelu + (m->recompute >= 1 ? 0 : sub.l) * 4 * N;
    sub.st = {t->lnx_stats + K, t->lny_stats + K, t->ln_stats + K};
    return sub;
}

// -r 3, walking down: y_k into the segment slots, rebuilt up from its kept boundary by y_j = y_{j-1} + z_{j-1}
static void y_segment_ensure(GPT2* m, int k, int BT) {
    int base = y_segment_of(m, k), top = 2 * m->config.num_layers;
    if (base < 0 || base == m->y_segment) { return; }
    for (int j = base + 1; j < base + m->y_every && j < top; j++) {
        Sublayer below = sublayer_at(m, j - 1, BT);
        residual_forward(sublayer_at(m, j, BT).y, below.y, below.z, (size_t)BT * m->config.channels);
    }
    m->y_segment = base;
}

// ----------------------------------------------------------------------------
// forward

// the block of a sublayer: z = Attn_l(u) or z = MLP_l(u)
static void block_forward(GPT2* m, const Sublayer* sub, int B, int T) {
    int C = m->config.channels, NH = m->config.num_heads, BT = B * T, l = sub->l;
    ParameterTensorsX* p = &m->params_x;
    ActivationTensors* acts = &m->acts;
    size_t lBT = (size_t)l * BT;
    if (sub->s == 0) {
        floatX *qkv = acts->qkv + lBT * 3 * C, *atty = acts->atty + lBT * C;
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

// forward pass on host tokens (B, T) up to the allocated; with targets: the mean loss, logits := dL/dlogits; else -1
static float gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T) {
    const GPT2Config* cfg = &m->config;
    if (B > m->batch_size || T > m->seq_len || B < 1 || T < 1) {
        fatal("gpt2_forward: batch (%d, %d) exceeds the allocated (%d, %d)", B, T, m->batch_size, m->seq_len);
    }
    int V = cfg->vocab_size, Vp = cfg->padded_vocab_size, L = cfg->num_layers, C = cfg->channels, BT = B * T;
    check_tokens(inputs, targets, BT, V);
    m->cur_B = B;
    m->cur_T = T;
    // The inputs, then the targets, go up from pinned memory in one cudaMemcpyAsync on the default stream,
    // ahead of every kernel below; the host waits only at the pass's end, then the next may rewrite them.
    memcpy(m->tokens, inputs, (size_t)BT * sizeof(int));
    if (targets) { memcpy(m->tokens + BT, targets, (size_t)BT * sizeof(int)); }
    cudaCheck(cudaMemcpyAsync(m->d_tokens, m->tokens, (targets ? 2 : 1) * BT * sizeof(int), cudaMemcpyHostToDevice, 0));
    m->has_targets = targets != NULL;

    ParameterTensorsX* p = &m->params_x;
    ActivationTensors* acts = &m->acts;
    size_t N = (size_t)BT * C;  // elements in one (B, T, C) tensor

    floatX* resy = norm_mode_layout(cfg->norm_mode)->two_streams ? acts->resy : NULL;  // both streams start as e
    encoder_forward_kernel<<<ceil_div((long)N, 256), 256>>>(acts->resx, resy, m->d_tokens, p->wte, p->wpe, BT, T, C);
    cudaCheckLaunch();

    for (int k = 0; k < 2 * L; k++) {
        Sublayer sub = sublayer_at(m, k, BT);
        SiameseNorms ln = sublayer_norms(p, sub.l, sub.s, C);
        floatX* x_next = sub.x + N;  // stream X after the sublayer (pre, post)
        switch (cfg->norm_mode) {  // no default: -Wswitch names a mode this does not handle
            case NORM_PRE:
                layernorm_forward(sub.u, sub.st.ln, sub.x, ln.w, ln.b, BT, C);                  // u = LN(x)
                block_forward(m, &sub, B, T);                                                   // z = F(u)
                residual_forward(x_next, sub.x, sub.z, N);                                      // x = x + z
                break;
            case NORM_POST:
                block_forward(m, &sub, B, T);                                                   // z = F(x)
                residual_forward(sub.r, sub.x, sub.z, N);                                       // r = x + z
                layernorm_forward(x_next, sub.st.ln, sub.r, ln.w, ln.b, BT, C);                 // x = LN(r)
                break;
            case NORM_SIAMESE:
                // a = LN(x), r = a + LN(y), u = LN(r); x, y from sublayer k - 1's update in the same kernel
                Sublayer prev = k > 0 ? sublayer_at(m, k - 1, BT) : Sublayer{};  // k = 0: none, NULLs
                siamese_input_forward(sub.a, sub.r, sub.u, sub.st, sub.x, sub.y, ln, BT, C, false, prev.a, prev.y,
                                      prev.z, siamese_scale(prev.l));
                if (y_segment_of(m, k) >= 0) { m->y_segment = y_segment_of(m, k); }  // -r 3: its slots hold y_k
                block_forward(m, &sub, B, T);                                                   // z = F(u)
                break;
        }
    }

    Sublayer fin = sublayer_at(m, 2 * L, BT);  // the final merge
    switch (cfg->norm_mode) {
        case NORM_PRE:
        case NORM_POST:
            layernorm_forward(acts->lnf, fin.st.ln, fin.x, p->lnfw, p->lnfb, BT, C);  // h = LN(x)
            break;
        case NORM_SIAMESE:
            // the update of the last sublayer, then h = LN(LN(x) + LN(y))
            Sublayer last = sublayer_at(m, 2 * L - 1, BT);
            siamese_input_forward(NULL, acts->lnfsum, acts->lnf, fin.st, fin.x, fin.y, final_norms(p), BT, C, false,
                                  last.a, last.y, last.z, siamese_scale(L - 1));
            break;
    }
    matmul_forward(acts->logits, acts->lnf, p->wte, NULL, BT, C, Vp);                // tied output layer
    if (targets) {
        classifier(acts->logits, acts->losses, m->d_tokens + BT, BT, V, Vp);  // the logits become dL/dlogits
        // the embedding gradient's work list, built on the host while the GPU runs the pass just queued;
        // its upload queues behind it, and the pass's one wait (for the losses, next) covers it too
        token_chunks_build(&m->chunks, m->tokens, BT);
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

// backward of a sublayer's block from dz (scratch): du = (beta 0) or += (beta 1) fp32 dL/du, and dW
static void block_backward(GPT2* m, const Sublayer* sub, float* du, float beta, int B, int T) {
    int C = m->config.channels, NH = m->config.num_heads, BT = B * T, l = sub->l;
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
        flash_attention_backward(sc->dqkv, sc->att_dot, sc->datty, acts->qkv + lBT * 3 * C, acts->atty + lBT * C,
                                 acts->att_lse + lBT * NH, B, T, C, NH);
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

// backward of the last forward pass (with targets) into m->grads (+=), the loss times loss_scale (1/grad_accum: a mean)
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
    const float* dy = norm_mode_layout(cfg->norm_mode)->two_streams ? sc->dy : NULL;  // dL/d(stream Y), siamese only

    // the tied output layer, from the forward's dlogits (dloss = 1 / BT; loss_scale: the matmuls' alpha): dh (du), dwte
    matmul_backward_input(sc->du, CUDA_R_32F, 0.0f, acts->logits, p->wte, BT, C, Vp, NULL, loss_scale);
    matmul_backward_weight(g->wte, NULL, acts->logits, acts->lnf, BT, C, Vp, loss_scale);

    Sublayer fin = sublayer_at(m, 2 * L, BT);  // the final LayerNorm(s): dx (and dy) at the last boundary
    switch (cfg->norm_mode) {  // no default: -Wswitch names a mode this does not handle
        case NORM_PRE:
        case NORM_POST:
            layernorm_backward(sc->dx, NULL, g->lnfw, g->lnfb, sc->du, fin.x, p->lnfw, fin.st.ln, BT, C, 0);
            break;
        case NORM_SIAMESE:
            // the final merge (dx and dy start here) and dz of the last sublayer (its update's backward, c_{L-1})
            siamese_input_backward(sc->dx, sc->dy, sc->dz, siamese_scale(L - 1), 0, sc->du, final_norms(g),
                                   final_norms(p), fin.st, fin.x, fin.y, acts->lnfsum, BT, C);
            break;
    }
    if (m->stream_grad_hook) { m->stream_grad_hook(m->stream_grad_ctx, 2 * L, sc->dx, dy); }

    // the sublayers, last to first; dx (dy) enter holding dL/d(stream) after sublayer k, leave before it
    for (int k = 2 * L - 1; k >= 0; k--) {
        Sublayer sub = sublayer_at(m, k, BT);
        SiameseNorms ln = sublayer_norms(p, sub.l, sub.s, C);
        SiameseNormGrads dln = sublayer_norms(g, sub.l, sub.s, C);
        int rebuild = m->recompute >= 2;  // r and u of this sublayer again, as the forward made them
        switch (cfg->norm_mode) {
            case NORM_PRE:
                // x_next = x + F(LN(x)): dz = dx_next, and dx = dx_next + LN_back(du)
                if (rebuild) { layernorm_forward(sub.u, sub.st.ln, sub.x, ln.w, ln.b, BT, C, true); }
                cast_to_x(sc->dz, sc->dx, N);
                block_backward(m, &sub, sc->du, 0.0f, B, T);
                layernorm_backward(sc->dx, NULL, dln.w, dln.b, sc->du, sub.x, ln.w, sub.st.ln, BT, C, 1);
                break;
            case NORM_POST:
                // x_next = LN(x + F(x)): dr = LN_back(dx_next) (in place in dx, floatX copy in dz);
                // dz = dr; dx = dr + F_back(dr) (the block's input gradient accumulates into dx)
                if (rebuild) { residual_forward(sub.r, sub.x, sub.z, N); }
                layernorm_backward(sc->dx, sc->dz, dln.w, dln.b, sc->dx, sub.r, ln.w, sub.st.ln, BT, C, 0);
                block_backward(m, &sub, sc->dx, 1.0f, B, T);
                break;
            case NORM_SIAMESE:
                // dz = dx_next / c + dy_next was written by the input side after this sublayer; the
                // block; then the three LNs of the input side, which also write dz of sublayer k - 1
                y_segment_ensure(m, k, BT);  // -r 3: y_k, rebuilt where its segment's slots hold another
                if (rebuild) { siamese_input_forward(NULL, sub.r, sub.u, sub.st, sub.x, sub.y, ln, BT, C, true); }
                block_backward(m, &sub, sc->du, 0.0f, B, T);
                siamese_input_backward(sc->dx, sc->dy, k > 0 ? sc->dz : NULL, siamese_scale((k - 1) / 2), 1, sc->du,
                                       dln, ln, sub.st, sub.x, sub.y, sub.r, BT, C);
                break;
        }
        if (m->stream_grad_hook) { m->stream_grad_hook(m->stream_grad_ctx, k, sc->dx, dy); }
    }

    wte_backward(g->wte, sc->du, sc->dx, dy, &m->chunks, C);  // du is free now: the partial rows
    wpe_backward_kernel<<<ceil_div((long)T * C, 256), 256>>>(g->wpe, sc->dx, dy, B, T, C);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// optimizer

// the sum of squares of gradients [lo, hi); the host waits for it (the loop clips by it, checks it finite)
static double gpt2_grad_sumsq(GPT2* m, size_t lo, size_t hi) {
    int blocks = std::min(std::max(ceil_div((long)(hi - lo), NORM_THREADS * NORM_PER_THREAD), 1), NORM_MAX_BLOCKS);
    sumsq_kernel<<<blocks, NORM_THREADS>>>(m->d_norm_partials, m->grads_memory + lo, hi - lo);
    cudaCheckLaunch();
    cudaCheck(cudaMemcpy(m->host_norm_partials, m->d_norm_partials, blocks * sizeof(float), cudaMemcpyDeviceToHost));
    double total = 0.0;
    for (int i = 0; i < blocks; i++) { total += m->host_norm_partials[i]; }
    return total;
}

// AdamW step t (1-based) of parameters [lo, hi) in the model's [opt_lo, opt_hi), as train_gpt2.c's; and their floatX
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
// The loop shared with train_gpt2.c (flags, data, evaluation, sampling, checkpoints) reaches the model via TrainerOps
#include "common/train_loop.h"

// Each step is an NVTX range "step", zero_grad to sync, for a profiler to select (dev/gpu_check.sh: ncu --nvtx
// --nvtx-include step/; without one, push and pop return at once); a skipped update has no sync: the next push ends it.
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
    download_into((void**)&m->host_row_x, m->acts.logits + row * Vp, Vp * sizeof(floatX));
    if (!m->host_row) { m->host_row = (float*)malloc_check(Vp * sizeof(float), "logits row (host)"); }
    for (size_t j = 0; j < Vp; j++) { m->host_row[j] = (float)m->host_row_x[j]; }
    return m->host_row;
}
// the fp32 master weights this rank holds, at their place among all parameters
static const float* gpu_weights(GPT2* m) {
    cudaCheck(cudaMemcpy(m->host_params + m->opt_lo, m->params_memory, (m->opt_hi - m->opt_lo) * sizeof(float),
                         cudaMemcpyDeviceToHost));
    return m->host_params;
}
static void gpu_moments(GPT2* m, const float** mm, const float** vv) {
    size_t held = m->opt_hi - m->opt_lo;
    *mm = (const float*)download_into((void**)&m->host_moments, m->m_memory, 2 * held * sizeof(float));
    *vv = *mm + held;  // v after m, as on the device
}
static void gpu_load_moments(GPT2* m, const float* mm, const float* vv) {
    size_t bytes = (m->opt_hi - m->opt_lo) * sizeof(float);
    cudaCheck(cudaMemcpy(m->m_memory, mm, bytes, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(m->v_memory, vv, bytes, cudaMemcpyHostToDevice));
}

int main(int argc, char** argv) {
    // What needs no GPU comes first (flags, data, the host model, checked against the flags): its errors read the
    // same without one (tests/test_train_cu_cli.sh); the loop locks the output folder only once the GPU is ready.
    TrainRun run;
    train_run_setup(&run, argc, argv);
    GPT2 model;
    if (run.fresh) {  // on the host (common/params.h): train_gpt2 and train_gpt2cu start bit-identical for a seed
        gpt2_init_params(&model, &run.fresh_config);
        params_init_fresh(model.host_params, &run.fresh_config, run.args.seed);
    } else {
        gpt2_build_from_checkpoint(&model, run.model_path);
    }
    train_run_attach_model(&run, &model.config, model.num_parameters, "");
    char why[200];  // attention's head sizes (attention.cuh), refused before the GPU is looked for
    if (!flash_config(model.config.channels / model.config.num_heads, why, sizeof(why))) { fatal("%s", why); }

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

    run.adamw.beta1 = 0.9f;  // AdamW as GPT-2 and GPT-3 were trained (the weight decay is -c)
    run.adamw.beta2 = 0.95f;
    run.adamw.eps = 1e-8f;
    TrainerOps ops = {
        .forward = gpt2_forward, .backward = gpt2_backward, .zero_grad = gpu_zero_grad,  // a step
        .grad_sumsq = gpt2_grad_sumsq, .update = gpt2_update_range,                       // clipping, AdamW
        .logits_row = gpu_logits_row,
        .losses = model.host_losses,  // the forward pass with targets copies them
        .weights = gpu_weights, .moments = gpu_moments, .load_moments = gpu_load_moments,  // checkpoints
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
