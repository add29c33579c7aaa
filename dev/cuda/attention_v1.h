/*
dev/cuda/attention_v1.h: the trainer's attention path with the (B, NH, T, T) tensors, as version 1
of attention_forward.cu and attention_backward.cu: permute qkv into (B, NH, T, HS) heads, batched
matmuls (cublasGemmStridedBatchedEx with the shapes of train_gpt2.cu's cuBLASLt calls, fp32
accumulation), a causal softmax kernel (one warp per row) and its backward, permute back.
*/
#ifndef DEV_CUDA_ATTENTION_V1_H
#define DEV_CUDA_ATTENTION_V1_H

#include <cublas_v2.h>
#include "common.h"

#ifndef ROW_WARPS
#define ROW_WARPS 8
#endif

static void cublas_check(cublasStatus_t st, int line) {
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cuBLAS error %d at line %d\n", (int)st, line);
        exit(EXIT_FAILURE);
    }
}

// element i of a (B, NH, T, HS) head tensor lives at this offset of a (B, T, row_len) row tensor
__device__ __forceinline__ size_t head_offset(size_t i, int T, int NH, int HS, size_t row_len) {
    size_t c = i % HS, t = (i / HS) % T, h = (i / ((size_t)HS * T)) % NH, b = i / ((size_t)HS * T * NH);
    return (b * T + t) * row_len + h * HS + c;
}

__global__ void permute_qkv_v1(bf16* q, bf16* k, bf16* v, const bf16* qkv, int B, int T, int NH, int HS) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * HS) { return; }
    size_t C = (size_t)NH * HS;
    const bf16* row = qkv + head_offset(i, T, NH, HS, 3 * C);
    q[i] = row[0];
    k[i] = row[C];
    v[i] = row[2 * C];
}

__global__ void unpermute_v1(bf16* out, const bf16* y, int B, int T, int NH, int HS) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * HS) { return; }
    out[head_offset(i, T, NH, HS, (size_t)NH * HS)] = y[i];
}

__global__ void softmax_v1(bf16* att, const bf16* preatt, int rows, int T, float scale) {
    int r = blockIdx.x * ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) { return; }
    int t = r % T;
    const bf16* p = preatt + (size_t)r * T;
    bf16* a = att + (size_t)r * T;
    float maxval = -INFINITY;
    for (int i = lane; i <= t; i += 32) { maxval = fmaxf(maxval, (float)p[i] * scale); }
    maxval = warp_max(maxval);
    float sum = 0.0f;
    for (int i = lane; i <= t; i += 32) { sum += expf((float)p[i] * scale - maxval); }
    float inv = 1.0f / warp_sum(sum);
    for (int i = lane; i < T; i += 32) { a[i] = (bf16)(i <= t ? expf((float)p[i] * scale - maxval) * inv : 0.0f); }
}

typedef struct {
    bf16 *q, *k, *v, *preatt, *att, *y, *dq, *dk, *dv;
} V1Scratch;

// D (m x n, col-major, per batch) = op(A) op(B), bf16 in and out, fp32 accumulation
static void batched_gemm(cublasHandle_t h, int ta, int tb, int m, int n, int k, const bf16* A, int lda, long long sa,
                         const bf16* Bm, int ldb, long long sb, bf16* D, int ldd, long long sd, int batch) {
    float one = 1.0f, zero = 0.0f;
    cublas_check(cublasGemmStridedBatchedEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                                            &one, A, CUDA_R_16BF, lda, sa, Bm, CUDA_R_16BF, ldb, sb, &zero, D,
                                            CUDA_R_16BF, ldd, sd, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 __LINE__);
}

static void attention_v1(cublasHandle_t h, bf16* out, const bf16* qkv, V1Scratch* sc, int B, int T, int NH, int HS) {
    int heads = B * NH, rows = B * NH * T;
    long long sth = (long long)T * HS, stt = (long long)T * T;
    int blocks = ceil_div((long)B * NH * T * HS, 256);
    permute_qkv_v1<<<blocks, 256>>>(sc->q, sc->k, sc->v, qkv, B, T, NH, HS);
    cudaCheckLaunch();
    // row-major preatt (T x T) = q . k^T, i.e. col-major preatt^T = k . q^T
    batched_gemm(h, 1, 0, T, T, HS, sc->k, HS, sth, sc->q, HS, sth, sc->preatt, T, stt, heads);
    softmax_v1<<<ceil_div(rows, ROW_WARPS), ROW_WARPS * 32>>>(sc->att, sc->preatt, rows, T, 1.0f / sqrtf((float)HS));
    cudaCheckLaunch();
    // row-major y (T x HS) = att . v, i.e. col-major y^T = v^T . att^T
    batched_gemm(h, 0, 0, HS, T, T, sc->v, HS, sth, sc->att, T, stt, sc->y, HS, sth, heads);
    unpermute_v1<<<blocks, 256>>>(out, sc->y, B, T, NH, HS);
    cudaCheckLaunch();
}

// in place: d holds datt on entry, dpre = att (datt - sum_j att_j datt_j) * scale on exit; one warp per row
__global__ void softmax_backward_v1(bf16* d, const bf16* att, int rows, int T, float scale) {
    int r = blockIdx.x * ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) { return; }
    int t = r % T;
    bf16* dr = d + (size_t)r * T;
    const bf16* a = att + (size_t)r * T;
    float sum = 0.0f;
    for (int i = lane; i <= t; i += 32) { sum += (float)a[i] * (float)dr[i]; }
    sum = warp_sum(sum);
    for (int i = lane; i < T; i += 32) { dr[i] = (bf16)(i <= t ? (float)a[i] * ((float)dr[i] - sum) * scale : 0.0f); }
}

// the backward pass given att from attention_v1: dqkv (B, T, 3C) from dout (B, T, C); uses sc->preatt
// for datt and dpre, sc->y for dy, and sc->q, k, v (refilled from qkv) and dq, dk, dv
__global__ void permute_back_v1(bf16* qkv, const bf16* q, const bf16* k, const bf16* v, int B, int T, int NH, int HS) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * HS) { return; }
    size_t C = (size_t)NH * HS;
    bf16* row = qkv + head_offset(i, T, NH, HS, 3 * C);
    row[0] = q[i];
    row[C] = k[i];
    row[2 * C] = v[i];
}

__global__ void rows_to_heads_v1(bf16* heads, const bf16* rows, int B, int T, int NH, int HS) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * HS) { return; }
    heads[i] = rows[head_offset(i, T, NH, HS, (size_t)NH * HS)];
}

static void attention_backward_v1(cublasHandle_t h, bf16* dqkv, const bf16* dout, const bf16* qkv, V1Scratch* sc, int B,
                                  int T, int NH, int HS) {
    int heads = B * NH, rows = B * NH * T;
    long long sth = (long long)T * HS, stt = (long long)T * T;
    int blocks = ceil_div((long)B * NH * T * HS, 256);
    permute_qkv_v1<<<blocks, 256>>>(sc->q, sc->k, sc->v, qkv, B, T, NH, HS);
    cudaCheckLaunch();
    rows_to_heads_v1<<<blocks, 256>>>(sc->y, dout, B, T, NH, HS);
    cudaCheckLaunch();
    bf16* datt = sc->preatt;
    batched_gemm(h, 1, 0, T, T, HS, sc->v, HS, sth, sc->y, HS, sth, datt, T, stt, heads);     // datt = dy . v^T
    batched_gemm(h, 0, 1, HS, T, T, sc->y, HS, sth, sc->att, T, stt, sc->dv, HS, sth, heads);  // dv = att^T . dy
    softmax_backward_v1<<<ceil_div(rows, ROW_WARPS), ROW_WARPS * 32>>>(datt, sc->att, rows, T, 1.0f / sqrtf((float)HS));
    cudaCheckLaunch();
    batched_gemm(h, 0, 0, HS, T, T, sc->k, HS, sth, datt, T, stt, sc->dq, HS, sth, heads);  // dq = dpre . k
    batched_gemm(h, 0, 1, HS, T, T, sc->q, HS, sth, datt, T, stt, sc->dk, HS, sth, heads);  // dk = dpre^T . q
    permute_back_v1<<<blocks, 256>>>(dqkv, sc->dq, sc->dk, sc->dv, B, T, NH, HS);
    cudaCheckLaunch();
}

// every (B, NH, T, HS) and (B, NH, T, T) buffer version 1 needs
static V1Scratch v1_scratch_alloc(int B, int T, int NH, int HS) {
    size_t nhead = (size_t)B * NH * T * HS, natt = (size_t)B * NH * T * T;
    V1Scratch sc;
    bf16** heads[] = {&sc.q, &sc.k, &sc.v, &sc.y, &sc.dq, &sc.dk, &sc.dv};
    for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) { *heads[i] = (bf16*)device_alloc(nhead * sizeof(bf16)); }
    sc.preatt = (bf16*)device_alloc(natt * sizeof(bf16));
    sc.att = (bf16*)device_alloc(natt * sizeof(bf16));
    return sc;
}

#endif  // DEV_CUDA_ATTENTION_V1_H
