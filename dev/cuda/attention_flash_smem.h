/*
dev/cuda/attention_flash_smem.h: a first flash attention, as version 3 of attention_forward.cu and
version 2 of attention_backward.cu: causal self-attention without the (B, NH, T, T) matrix, with
the fp32 accumulators in shared memory. Same layouts as the trainer (qkv rows (B, T, 3C), output
rows (B, T, C), lse (B, NH, T)); bf16 only.

Forward: a block owns `tile` query rows (16 per warp) of one (b, head) and streams the key and
value tiles through shared memory (one bf16 per load); per tile each warp computes
S = Q K^T (WMMA), then an online softmax row by row (16 rows of three full-warp reductions), P
rounded to bf16, and O += P V, where O lives in shared memory in fp32 (the WMMA fragments round-trip
through it every tile, since the rescale needs each element's row). Saves the row log-sum-exp.

Backward: D = rowsum(dO O) (one kernel), then two kernels that each recompute S and dP from the
log-sum-exp: one owns query tiles (dQ = dS K), one owns key tiles (dK = dS^T Q, dV = P^T dO,
computed as the transposed products K Q^T and V dO^T): 7 tile products per (query, key) tile
pair, fixed order, no atomics. Head sizes: multiples of 16 up to 256; the tile is 64 rows (4
warps), or 32 or 16 where the shared memory of 64 does not fit.

The includer defines floatX (bf16), ROW_WARPS, cudaCheck, cudaCheckLaunch, ceil_div, row_blocks,
warp_row, warp_sum and warp_max (dev/cuda/common.h).
*/
#ifndef DEV_CUDA_ATTENTION_FLASH_SMEM_H
#define DEV_CUDA_ATTENTION_FLASH_SMEM_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <cuda_runtime.h>

// tensor cores for bf16 tiles where the GPU has them (sm_80 on); fp32 loops otherwise (the FP32
// build, and a device pass for an older architecture, which the bf16 build refuses to run on)
#if !defined(ENABLE_FP32) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800)
#define FS_WMMA 1
#include <mma.h>
#endif

#define FS_WARP_ROWS 16  // rows of a tile per warp
#define FS_MAX_HS 256

// the shared memory of one flash kernel: `own` tiles (the block's rows: q, or q and dO, or k and v),
// `other` tiles streamed through (k and v, or q and dO), fp32 score tiles (S, dP), floatX
// probability tiles (P, dS) and fp32 accumulators, counted per kernel in FLASH_SMEM_COUNTS
typedef struct {
    floatX* own[2];
    floatX* other[2];
    float* score[2];
    floatX* prob[2];
    float* acc[2];
    int ld_x, ld_s, ld_p, ld_a;  // leading dimensions, padded against bank conflicts (WMMA: multiples of 8 and 4)
} FsSmem;

enum { FS_FORWARD, FS_BACKWARD_DQ, FS_BACKWARD_DKV, FS_NUM_KERNELS };
__host__ __device__ inline void fs_smem_counts(int kind, int c[5]) {
    // own, other, score, prob, acc
    const int counts[FS_NUM_KERNELS][5] = {{1, 2, 1, 1, 1}, {2, 2, 2, 1, 1}, {2, 2, 2, 2, 2}};
    for (int i = 0; i < 5; i++) { c[i] = counts[kind][i]; }
}

// carves the block's dynamic shared memory (base NULL: only the size); returns the bytes. Every
// tile starts 128-byte aligned (WMMA needs 32), whatever the alignment of the base: 128 bytes of slack.
__host__ __device__ inline size_t fs_smem_carve(FsSmem* s, unsigned char* base, int kind, int tile, int HS) {
    if (base) { base += (128 - (uintptr_t)base % 128) % 128; }
    int c[5];
    fs_smem_counts(kind, c);
    s->ld_x = HS + 8;
    s->ld_s = tile + 4;
    s->ld_p = tile + 8;
    s->ld_a = HS + 4;
    size_t bytes[5] = {(size_t)tile * s->ld_x * sizeof(floatX), (size_t)tile * s->ld_x * sizeof(floatX),
                       (size_t)tile * s->ld_s * sizeof(float), (size_t)tile * s->ld_p * sizeof(floatX),
                       (size_t)tile * s->ld_a * sizeof(float)};
    void** slots[5][2] = {{(void**)&s->own[0], (void**)&s->own[1]}, {(void**)&s->other[0], (void**)&s->other[1]},
                          {(void**)&s->score[0], (void**)&s->score[1]}, {(void**)&s->prob[0], (void**)&s->prob[1]},
                          {(void**)&s->acc[0], (void**)&s->acc[1]}};
    size_t off = 0;
    for (int i = 0; i < 5; i++) {
        for (int j = 0; j < 2; j++) {
            *slots[i][j] = NULL;
            if (j < c[i]) {
                if (base) { *slots[i][j] = base + off; }
                off += (bytes[i] + 127) / 128 * 128;
            }
        }
    }
    return off + 128;  // with the slack for the alignment
}

// S (16 x n, fp32) = A (16 x HS) . B^T, B (n x HS): one warp, every operand in shared memory
__device__ inline void fs_warp_scores(float* S, int lds, const floatX* A, const floatX* Bm, int ldx, int n, int HS) {
#ifndef FS_WMMA
    for (int e = threadIdx.x % 32; e < FS_WARP_ROWS * n; e += 32) {
        int r = e / n, j = e % n;
        float dot = 0.0f;
        for (int c = 0; c < HS; c++) { dot += (float)A[r * ldx + c] * (float)Bm[j * ldx + c]; }
        S[r * lds + j] = dot;
    }
#else
    using namespace nvcuda;
    for (int j0 = 0; j0 < n; j0 += 16) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int c = 0; c < HS; c += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;  // B^T
            wmma::load_matrix_sync(a, A + c, ldx);
            wmma::load_matrix_sync(b, Bm + (size_t)j0 * ldx + c, ldx);
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(S + j0, acc, lds, wmma::mem_row_major);
    }
#endif
    __syncwarp(0xffffffffu);
}

// O (16 x HS, fp32) += P (16 x n) . V (n x HS): one warp, every operand in shared memory
__device__ inline void fs_warp_accumulate(float* O, int ldo, const floatX* P, int ldp, const floatX* V, int ldx, int n,
                                          int HS) {
#ifndef FS_WMMA
    for (int e = threadIdx.x % 32; e < FS_WARP_ROWS * HS; e += 32) {
        int r = e / HS, c = e % HS;
        float sum = 0.0f;
        for (int j = 0; j < n; j++) { sum += (float)P[r * ldp + j] * (float)V[j * ldx + c]; }
        O[r * ldo + c] += sum;
    }
#else
    using namespace nvcuda;
    for (int c0 = 0; c0 < HS; c0 += 16) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::load_matrix_sync(acc, O + c0, ldo, wmma::mem_row_major);
        for (int j = 0; j < n; j += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
            wmma::load_matrix_sync(a, P + j, ldp);
            wmma::load_matrix_sync(b, V + (size_t)j * ldx + c0, ldx);
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(O + c0, acc, ldo, wmma::mem_row_major);
    }
#endif
    __syncwarp(0xffffffffu);
}

// rows [t0, t0 + tile) of head h at channel offset `part` (0 q, C k, 2C v) of (B, T, row_len) rows
// into a shared tile; rows at or past T are zero (they are masked, but 0 x garbage could be NaN)
__device__ inline void fs_load_tile(floatX* dst, int ldx, const floatX* rows, size_t row_len, int t0, int T, int tile,
                                    int HS) {
    for (int e = threadIdx.x; e < tile * HS; e += blockDim.x) {
        int r = e / HS, c = e % HS;
        dst[r * ldx + c] = t0 + r < T ? rows[(size_t)(t0 + r) * row_len + c] : (floatX)0.0f;
    }
}

__device__ inline void fs_zero(float* acc, int lda, int rows, int HS) {
    for (int e = threadIdx.x % 32; e < rows * HS; e += 32) { acc[(e / HS) * lda + e % HS] = 0.0f; }
}

// the forward pass: block (query tile, b * NH + h); out (B, T, C), lse (B, NH, T)
__global__ void fs_forward_kernel(floatX* out, float* lse, const floatX* qkv, int T, int NH, int HS, int tile,
                                     float scale) {
    extern __shared__ float4 fs_dynamic_smem[];
    FsSmem sm;
    fs_smem_carve(&sm, (unsigned char*)fs_dynamic_smem, FS_FORWARD, tile, HS);
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS, q0 = blockIdx.x * tile;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * FS_WARP_ROWS;
    size_t row_len = 3 * (size_t)C;
    const floatX* base = qkv + (size_t)b * T * row_len + h * HS;
    fs_load_tile(sm.own[0], sm.ld_x, base, row_len, q0, T, tile, HS);
    float* O = sm.acc[0] + r0 * sm.ld_a;
    fs_zero(O, sm.ld_a, FS_WARP_ROWS, HS);
    float m_run = -INFINITY, l_run = 0.0f;  // running max and sum of row r0 + lane (lanes 0..15)
    int last = (q0 + tile < T ? q0 + tile : T) - 1;  // the block's last query: keys up to it
    for (int k0 = 0; k0 <= last; k0 += tile) {
        __syncthreads();  // every warp is done with the previous key tile
        fs_load_tile(sm.other[0], sm.ld_x, base + C, row_len, k0, T, tile, HS);
        fs_load_tile(sm.other[1], sm.ld_x, base + 2 * C, row_len, k0, T, tile, HS);
        __syncthreads();
        float* S = sm.score[0] + r0 * sm.ld_s;
        floatX* P = sm.prob[0] + r0 * sm.ld_p;
        fs_warp_scores(S, sm.ld_s, sm.own[0] + r0 * sm.ld_x, sm.other[0], sm.ld_x, tile, HS);
        for (int r = 0; r < FS_WARP_ROWS; r++) {
            int t = q0 + r0 + r;
            float s[2], mx = -INFINITY;  // this lane's columns: lane and lane + 32 (tile <= 64)
            for (int i = 0; i < 2; i++) {
                int j = lane + 32 * i;
                s[i] = j < tile && k0 + j <= t && t < T ? S[r * sm.ld_s + j] * scale : -INFINITY;
                mx = fmaxf(mx, s[i]);
            }
            float m_old = __shfl_sync(0xffffffffu, m_run, r), l_old = __shfl_sync(0xffffffffu, l_run, r);
            float m_new = fmaxf(m_old, warp_max(mx));
            float corr = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
            float sum = 0.0f;
            for (int i = 0; i < 2; i++) {
                int j = lane + 32 * i;
                float p = s[i] == -INFINITY ? 0.0f : expf(s[i] - m_new);
                if (j < tile) { P[r * sm.ld_p + j] = (floatX)p; }
                sum += p;
            }
            float l_new = l_old * corr + warp_sum(sum);
            if (lane == r) { m_run = m_new; l_run = l_new; }
            for (int c = lane; c < HS; c += 32) { O[r * sm.ld_a + c] *= corr; }
        }
        __syncwarp(0xffffffffu);
        fs_warp_accumulate(O, sm.ld_a, P, sm.ld_p, sm.other[1], sm.ld_x, tile, HS);
    }
    for (int r = 0; r < FS_WARP_ROWS; r++) {
        int t = q0 + r0 + r;
        float m = __shfl_sync(0xffffffffu, m_run, r), l = __shfl_sync(0xffffffffu, l_run, r);
        if (t >= T) { continue; }  // (no break: every lane must reach the shuffles above)
        float inv = 1.0f / l;
        floatX* o = out + ((size_t)b * T + t) * C + h * HS;
        for (int c = lane; c < HS; c += 32) { o[c] = (floatX)(O[r * sm.ld_a + c] * inv); }
        if (lane == 0) { lse[(size_t)bh * T + t] = m + logf(l); }
    }
}

// D[b, h, t] = sum_c dO[b, t, h*HS + c] O[b, t, h*HS + c]: one warp per (b, t, h)
__global__ void fs_backward_dot_kernel(float* D, const floatX* dout, const floatX* out, int B, int T, int NH, int HS) {
    int r = warp_row(), lane = threadIdx.x % 32;
    if (r >= B * T * NH) { return; }
    int h = r % NH, bt = r / NH, b = bt / T, t = bt % T;
    size_t o = (size_t)bt * NH * HS + h * HS;
    float sum = 0.0f;
    for (int c = lane; c < HS; c += 32) { sum += (float)dout[o + c] * (float)out[o + c]; }
    sum = warp_sum(sum);
    if (lane == 0) { D[((size_t)b * NH + h) * T + t] = sum; }
}

// The backward kernels, block (own tile, b * NH + h). KEYS_OWN = 0: the block owns query rows
// (own q, dO; streams k, v) and computes dQ; KEYS_OWN = 1: it owns key rows (own k, v; streams
// q, dO) and computes dK and dV. Either way the warp's 16 x tile products are
//     S = own[0] . other[0]^T, dP' = own[1] . other[1]^T
// (S and dP, or their transposes), and the position pair of element (r, j) is (query, key) =
// (own row, other row) or (other row, own row).
template <int KEYS_OWN>
__global__ void fs_backward_kernel(floatX* dqkv, const float* lse, const float* D, const floatX* qkv,
                                      const floatX* dout, int T, int NH, int HS, int tile, float scale) {
    extern __shared__ float4 fs_dynamic_smem[];
    FsSmem sm;
    fs_smem_carve(&sm, (unsigned char*)fs_dynamic_smem, KEYS_OWN ? FS_BACKWARD_DKV : FS_BACKWARD_DQ, tile, HS);
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, C = NH * HS, o0 = blockIdx.x * tile;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * FS_WARP_ROWS;
    size_t row_len = 3 * (size_t)C;
    const floatX* base = qkv + (size_t)b * T * row_len + h * HS;
    const floatX* dbase = dout + (size_t)b * T * C + h * HS;
    const float* lse_h = lse + (size_t)bh * T;
    const float* D_h = D + (size_t)bh * T;
    // own: k, v (KEYS_OWN) or q, dO; other: q, dO or k, v
    const floatX* own_src[2] = {KEYS_OWN ? base + C : base, KEYS_OWN ? base + 2 * C : dbase};
    const floatX* other_src[2] = {KEYS_OWN ? base : base + C, KEYS_OWN ? dbase : base + 2 * C};
    size_t own_len[2] = {row_len, KEYS_OWN ? row_len : (size_t)C};
    size_t other_len[2] = {row_len, KEYS_OWN ? (size_t)C : row_len};
    for (int i = 0; i < 2; i++) { fs_load_tile(sm.own[i], sm.ld_x, own_src[i], own_len[i], o0, T, tile, HS); }
    for (int i = 0; i < 1 + KEYS_OWN; i++) { fs_zero(sm.acc[i] + r0 * sm.ld_a, sm.ld_a, FS_WARP_ROWS, HS); }
    // the other side's tiles that meet the causal triangle: keys up to the last own query, or
    // queries from the first own key on
    int first = KEYS_OWN ? o0 : 0;
    int end = KEYS_OWN ? T : (o0 + tile < T ? o0 + tile : T);
    for (int x0 = first; x0 < end; x0 += tile) {
        __syncthreads();
        for (int i = 0; i < 2; i++) { fs_load_tile(sm.other[i], sm.ld_x, other_src[i], other_len[i], x0, T, tile, HS); }
        __syncthreads();
        float* S = sm.score[0] + r0 * sm.ld_s;
        float* dP = sm.score[1] + r0 * sm.ld_s;
        fs_warp_scores(S, sm.ld_s, sm.own[0] + r0 * sm.ld_x, sm.other[0], sm.ld_x, tile, HS);
        fs_warp_scores(dP, sm.ld_s, sm.own[1] + r0 * sm.ld_x, sm.other[1], sm.ld_x, tile, HS);
        floatX* dS = sm.prob[0] + r0 * sm.ld_p;
        floatX* P = KEYS_OWN ? sm.prob[1] + r0 * sm.ld_p : NULL;
        for (int e = lane; e < FS_WARP_ROWS * tile; e += 32) {
            int r = e / tile, j = e % tile;
            int own_pos = o0 + r0 + r, other_pos = x0 + j;
            int tq = KEYS_OWN ? other_pos : own_pos, tk = KEYS_OWN ? own_pos : other_pos;
            float p = 0.0f, ds = 0.0f;
            if (tk <= tq && tq < T) {
                p = expf(S[r * sm.ld_s + j] * scale - lse_h[tq]);
                ds = p * (dP[r * sm.ld_s + j] - D_h[tq]) * scale;
            }
            dS[r * sm.ld_p + j] = (floatX)ds;
            if (KEYS_OWN) { P[r * sm.ld_p + j] = (floatX)p; }
        }
        __syncwarp(0xffffffffu);
        // dQ += dS K (other[0] = k) or dK += dS^T Q (other[0] = q); dV += P^T dO (other[1] = dO)
        fs_warp_accumulate(sm.acc[0] + r0 * sm.ld_a, sm.ld_a, dS, sm.ld_p, sm.other[0], sm.ld_x, tile, HS);
        if (KEYS_OWN) {
            fs_warp_accumulate(sm.acc[1] + r0 * sm.ld_a, sm.ld_a, P, sm.ld_p, sm.other[1], sm.ld_x, tile, HS);
        }
    }
    // dQ into channels h*HS of dqkv, or dK and dV into C + h*HS and 2C + h*HS
    for (int i = 0; i < 1 + KEYS_OWN; i++) {
        floatX* dst = dqkv + (size_t)b * T * row_len + h * HS + (KEYS_OWN ? (i + 1) * C : 0);
        const float* acc = sm.acc[i] + r0 * sm.ld_a;
        for (int e = lane; e < FS_WARP_ROWS * HS; e += 32) {
            int r = e / HS, c = e % HS, t = o0 + r0 + r;
            if (t < T) { dst[(size_t)t * row_len + c] = (floatX)acc[r * sm.ld_a + c]; }
        }
    }
}

// Whether the flash kernels take this head size, and the tile they use (0 and a reason if not)
static int fs_attention_tile(int HS, char* why, size_t cap) {
    if (HS % 16 != 0 || HS > FS_MAX_HS) {
        snprintf(why, cap, "head size %d is not a multiple of 16 up to %d", HS, FS_MAX_HS);
        return 0;
    }
    int dev = 0, limit = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    for (int tile = 64; tile >= 16; tile /= 2) {
        FsSmem s;
        if (fs_smem_carve(&s, NULL, FS_BACKWARD_DKV, tile, HS) <= (size_t)limit) { return tile; }
    }
    snprintf(why, cap, "head size %d needs more shared memory than the %d bytes a block may have", HS, limit);
    return 0;
}

// launches one flash kernel with its shared memory (allowed above the default 48 KiB first)
template <typename... P, typename... A>
static void fs_launch(void (*kernel)(P...), int kind, int T, int BNH, int HS, int tile, A... args) {
    FsSmem s;
    size_t smem = fs_smem_carve(&s, NULL, kind, tile, HS);
    cudaCheck(cudaFuncSetAttribute((const void*)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(ceil_div(T, tile), BNH);
    kernel<<<grid, tile / FS_WARP_ROWS * 32, smem>>>(args...);
    cudaCheckLaunch();
}

static void fs_attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH, int tile) {
    int HS = C / NH;
    fs_launch(fs_forward_kernel, FS_FORWARD, T, B * NH, HS, tile, out, lse, qkv, T, NH, HS, tile,
                 1.0f / sqrtf((float)HS));
}

// dqkv (overwritten) from dout = dL/d(attention output rows); out is the forward output, D scratch (B, NH, T)
static void fs_attention_backward(floatX* dqkv, const floatX* dout, const floatX* qkv, const floatX* out,
                                     const float* lse, float* D, int B, int T, int C, int NH, int tile) {
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    fs_backward_dot_kernel<<<row_blocks(B * T * NH), ROW_WARPS * 32>>>(D, dout, out, B, T, NH, HS);
    cudaCheckLaunch();
    fs_launch(fs_backward_kernel<0>, FS_BACKWARD_DQ, T, B * NH, HS, tile, dqkv, lse, (const float*)D, qkv, dout,
                 T, NH, HS, tile, scale);
    fs_launch(fs_backward_kernel<1>, FS_BACKWARD_DKV, T, B * NH, HS, tile, dqkv, lse, (const float*)D, qkv, dout,
                 T, NH, HS, tile, scale);
}

#endif // DEV_CUDA_ATTENTION_FLASH_SMEM_H
