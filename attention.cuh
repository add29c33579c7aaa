/*
attention.cuh: train_gpt2.cu's causal self-attention, forward and backward, at FlashAttention-2's design: no (B, NH,
T, T) matrix. dev/cuda/attention_forward.cu and attention_backward.cu check it against CPU references. The includer
defines floatX (float with ENABLE_FP32, else __nv_bfloat16), cudaCheck(call), cudaCheckLaunch(), ceil_div(a, b).

The idea. Row t of one head needs only its log-sum-exp lse_t = log sum_{t2 <= t} exp(s(t, t2)), s = q_t . k_t2 /
sqrt(HS), to recompute every probability p(t, t2) = exp(s(t, t2) - lse_t) later: the forward saves (B, NH, T) floats.

Forward (flash_forward_kernel). A block takes 64 queries of one head, 16 rows per warp, streaming key and value tiles
through shared memory; per tile each warp forms S = Q K^T, then the online softmax (log2 units: s log2(e) / sqrt(HS)):
    m' = max(m, max_j s_j),  p_j = 2^(s_j - m'),  l = l 2^(m - m') + sum_j p_j,  O = O 2^(m - m') + P V
and at the end out = O / l, lse = (m + log2 l) ln 2. The tile products are PTX's mma.m16n8k16 on ldmatrix operands,
whose register layouts are documented: S, P and O never leave registers; the causal mask only on diagonal tiles.

Backward. D_t = dO_t . O_t (flash_backward_dot_kernel), then two kernels on the same mma/ldmatrix products, each
recomputing P from lse (log2 units) and dS = P (dP - D) / sqrt(HS) where it needs them, with fixed summation orders:
    flash_backward_kv_kernel: 64 keys of one head per block, walking the query steps from the diagonal on:
        S^T = K Q^T,  dP^T = V dO^T,  dV += P^T dO,  dK += dS^T Q      (4 products)
    flash_backward_dq_kernel: 64 queries per block, streaming key tiles up to the diagonal:
        S = Q K^T,  dP = dO V^T,  dQ += dS K                             (3 products)
P, dS and every accumulator stay in registers (a C fragment is the A operand of the next product, as P in the
forward) until the rows are written once. S and dP are formed twice (7 products, not FlashAttention-2's 5) so that
no kernel sums dQ over key blocks in memory: no atomics, no fp32 partial sums, results bit-identical on any GPU.

Tile sizes are compile-time constants of HSP, the head size padded to 16, 32, 64 or 128 (channels past HS zero on
load, never stored); tiles double buffered in shared memory; bf16 products, fp32 sums. Costs: dev/cuda/README.md.
*/
#ifndef ATTENTION_CUH
#define ATTENTION_CUH

#include <algorithm>
#include <math.h>
#include <type_traits>  // stdint.h, stdio.h, string.h and cuda_runtime.h: the includer's, with cudaCheck

// tensor cores for bf16 tiles from sm_80 on; their register semantics in shuffles otherwise (the FP32 build, the layer;
// an older device pass, never run)
#if !defined(ENABLE_FP32) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800)
#define FA_MMA 1
#endif

#define FA_WARPS 4                       // warps per block
#define FA_THREADS (FA_WARPS * 32)
#define FA_ROWS 16                       // rows of a tile per warp (the mma tile height)
#define FA_QUERIES (FA_WARPS * FA_ROWS)  // forward: queries per block (64)
#define FA_KEYS (FA_WARPS * FA_ROWS)     // backward: keys per block (64)
#define FA_MAX_HS 128                    // the largest head size (padded sizes 16, 32, 64, 128)
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

// 16 bytes of floatX (8 bf16 or 4 fp32): one load or store
#define FA_VEC ((int)(16 / sizeof(floatX)))
struct alignas(16) FaVec { floatX v[FA_VEC]; };

// ----------------------------------------------------------------------------
// tiles between global and shared memory

// one head's rows in global memory: row t < T at p + t * stride, HS channels; wide: see flash_wide
struct FaRows { const floatX* p; size_t stride; int T, HS; bool wide; };

// FA_VEC floats as floatX at p: one 16-byte store where wide, else the first n of them one by one
template <typename S>
__device__ __forceinline__ void fa_store_vec(floatX* p, const S* a, int n, bool wide) {
    if (wide) {
        FaVec v;
        for (int k = 0; k < FA_VEC; k++) { v.v[k] = (floatX)a[k]; }
        *(FaVec*)p = v;
    } else {
        for (int k = 0; k < FA_VEC; k++) {
            if (k < n) { p[k] = (floatX)a[k]; }
        }
    }
}

// ROWS rows of HSP channels from row t0 (zero past HS and T) to shared memory: fetch issues the vector loads before the
// tile's math, put stores them at dst (leading dimension ld) after; not wide, put copies (prefetching costs registers).
template <int ROWS, int HSP>
struct FaTileRegs {
    static constexpr int per_row = HSP / FA_VEC, count = ROWS * per_row / FA_THREADS;  // vectors per row, per thread
    static_assert(ROWS * per_row % FA_THREADS == 0, "whole vectors per thread");
    FaVec v[count];
    __device__ __forceinline__ void fetch(const FaRows& g, int t0) {
        if (!g.wide) { return; }
        for (int i = 0; i < count; i++) {
            int e = threadIdx.x + i * FA_THREADS, row = e / per_row, c = e % per_row * FA_VEC, t = t0 + row;
            v[i] = t < g.T && c < g.HS ? *(const FaVec*)(g.p + (size_t)t * g.stride + c) : FaVec{};  // {}: zeros
        }
    }
    __device__ __forceinline__ void put(floatX* dst, int ld, const FaRows& g, int t0) const {
        if (g.wide) {
            for (int i = 0; i < count; i++) {
                int e = threadIdx.x + i * FA_THREADS, row = e / per_row, c = e % per_row * FA_VEC;
                *(FaVec*)(dst + row * ld + c) = v[i];
            }
            return;
        }
        for (int e = threadIdx.x; e < ROWS * HSP; e += FA_THREADS) {
            int row = e / HSP, c = e % HSP, t = t0 + row;
            dst[row * ld + c] = t < g.T && c < g.HS ? g.p[(size_t)t * g.stride + c] : (floatX)0.0f;
        }
    }
};

// two tiles of the same rows (keys and values, or queries and dO), the second ROWS rows after the first
template <int ROWS, int HSP>
struct FaTilePair {
    FaTileRegs<ROWS, HSP> a, b;
    __device__ __forceinline__ void fetch(const FaRows& ga, const FaRows& gb, int t0) {
        a.fetch(ga, t0);
        b.fetch(gb, t0);
    }
    __device__ __forceinline__ void put(floatX* dst, int ld, const FaRows& ga, const FaRows& gb, int t0) const {
        a.put(dst, ld, ga, t0);
        b.put(dst + ROWS * ld, ld, gb, t0);
    }
};

// a warp's 16 rows at stage (float or floatX, leading dimension ld) -> rows t0.. of dst (those below T, HS channels)
template <int HSP, typename S>
__device__ __forceinline__ void fa_copy_rows(floatX* dst, size_t stride, const S* stage, int ld, int t0, int T, int HS,
                                             bool wide) {
    constexpr int per_row = HSP / FA_VEC;
    __syncwarp(0xffffffffu);
    for (int e = threadIdx.x % 32; e < FA_ROWS * per_row; e += 32) {
        int row = e / per_row, c = e % per_row * FA_VEC, t = t0 + row;
        if (t < T && c < HS) { fa_store_vec(dst + (size_t)t * stride + c, stage + row * ld + c, HS - c, wide); }
    }
}

// shared memory: regions 128-byte aligned from a 128-byte aligned base (the layouts add 128 of slack)
__host__ __device__ constexpr size_t fa_round(size_t bytes) { return (bytes + 127) / 128 * 128; }
__device__ __forceinline__ unsigned char* fa_smem_base(void* smem) {
    return (unsigned char*)smem + (128 - (uintptr_t)smem % 128) % 128;
}

// ----------------------------------------------------------------------------
// tile products: register layouts of mma.m16n8k16 (bf16, one warp) and ldmatrix (PTX ISA), g = lane / 4, j = lane % 4:
//   A (16 x 16): a[0] = (g, 2j..2j+1), a[1] = (g + 8, 2j..), a[2] = (g, 2j + 8..), a[3] = (g + 8, 2j + 8..)
//   B (16 x 8):  b[0] = (2j..2j+1, g), b[1] = (2j + 8.., g)        C, D (16 x 8, fp32): (g, 2j..2j+1), (g + 8, 2j..)
// ldmatrix x4: lanes 8i..8i+7 point at the 8 rows of 8 x 8 matrix i; register i of a lane holds (row g, columns 2j..)
// of matrix i, or with .trans (rows 2j.., column g). nvcc's bf16 device code (FA_MMA on a GPU) runs the instructions;
// the layer and the FP32 build run the same register semantics from shuffles (fa_mma_16816, fa_ldmatrix_x4).
struct FaPair { floatX x[2]; };  // two adjacent elements of an operand row or column (bf16: one 32-bit register)

// v of lane src (FaPair or pointer) through one 32- or 64-bit shuffle
template <typename T>
__device__ __forceinline__ T fa_shfl(T v, int src) {
    typename std::conditional<sizeof(T) == 4, unsigned, unsigned long long>::type u;
    static_assert(sizeof u == sizeof v, "a 32- or 64-bit value");
    memcpy(&u, &v, sizeof u);
    u = __shfl_sync(0xffffffffu, u, src);
    memcpy(&v, &u, sizeof u);
    return v;
}

// d (16 x 8, fp32) += a (16 x 16) . b (16 x 8), one warp
__device__ __forceinline__ void fa_mma_16816(float (&d)[4], const FaPair (&a)[4], const FaPair (&b)[2]) {
#if defined(FA_MMA) && defined(__CUDA_ARCH__)
    uint32_t ar[4], br[2];
    memcpy(ar, a, sizeof ar);
    memcpy(br, b, sizeof br);
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));
#else
    // row g and g + 8 of a lie with the lanes of this row group, columns 2j and 2j + 1 of b with row groups 2j, 2j + 1
    const int lane = threadIdx.x % 32, j = lane % 4;
    for (int s = 0; s < 4; s++) {  // k = 2s, 2s + 1 (i = 0, 1), 2s + 8, 2s + 9 (i = 2, 3)
        FaPair as[4], bs[4];         // as: a's registers of lane s of the group; bs[2n + r]: b[r] of column 2j + n
        for (int i = 0; i < 4; i++) {
            as[i] = fa_shfl(a[i], (lane & ~3) | s);
            bs[i] = fa_shfl(b[i % 2], (2 * j + i / 2) * 4 + s);
        }
        for (int e = 0; e < 4; e++) {  // row g + 8 (e / 2), column 2j + e % 2
            for (int i = 0; i < 4; i++) {
                const FaPair &x = as[e / 2 + 2 * (i / 2)], &y = bs[2 * (e % 2) + i / 2];
                d[e] += (float)x.x[i % 2] * (float)y.x[i % 2];
            }
        }
    }
#endif
}

// r = four 8 x 8 matrices from shared memory, row addresses from lanes 8i..8i+7 (16-byte aligned), one warp
template <bool TRANS>
__device__ __forceinline__ void fa_ldmatrix_x4(FaPair (&r)[4], const floatX* row) {
#if defined(FA_MMA) && defined(__CUDA_ARCH__)
    uint32_t u[4], addr = (uint32_t)__cvta_generic_to_shared(row);
    if (TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "r"(addr));
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "r"(addr));
    }
    memcpy(r, u, sizeof u);
#else
    const int lane = threadIdx.x % 32, g = lane / 4, j = lane % 4;
    for (int i = 0; i < 4; i++) {
        for (int k = 0; k < 2; k++) {
            const floatX* p = fa_shfl(row, 8 * i + (TRANS ? 2 * j + k : g));
            r[i].x[k] = TRANS ? p[g] : p[2 * j + k];
        }
    }
#endif
}

// a lane's place in those layouts, and its row of an ldmatrix matrix: the 8 x 8 matrix lane / 8 at (8 * (lane / 8 % 2),
// 8 * (lane / 16)) (m: A, rows 0-7, 8-15 of columns 0-7 then of 8-15; or B read transposed) or, swapped, at
// (8 * (lane / 16), 8 * (lane / 8 % 2)) (s: the B operands of two n-tiles from 16 rows read as stored)
struct FaLane {
    int lane = threadIdx.x % 32, g = lane / 4, j = lane % 4;
    int mrow = lane % 8 + 8 * (lane / 8 % 2), mcol = 8 * (lane / 16);
    int srow = lane % 8 + 8 * (lane / 16), scol = 8 * (lane / 8 % 2);
};

// a = the 16 x 16 tile at r (rows of leading dimension ld in shared memory) as an A operand
__device__ __forceinline__ void fa_load_a(FaPair (&a)[4], const floatX* r, int ld, const FaLane& l) {
    fa_ldmatrix_x4<false>(a, r + l.mrow * ld + l.mcol);
}

// n-tiles d[0], d[1] (16 x 16) += a . R^T, R the 16 x 16 tile at r: B (k x n) is R's rows n, read as stored
__device__ __forceinline__ void fa_mma_rows(float (*d)[4], const FaPair (&a)[4], const floatX* r, int ld,
                                            const FaLane& l) {
    FaPair b[4];
    fa_ldmatrix_x4<false>(b, r + l.srow * ld + l.scol);
    fa_mma_16816(d[0], a, {b[0], b[1]});
    fa_mma_16816(d[1], a, {b[2], b[3]});
}

// n-tiles d[0], d[1] (16 x 16) += a . R: B (k x n) is R's rows k, read transposed
__device__ __forceinline__ void fa_mma_cols(float (*d)[4], const FaPair (&a)[4], const floatX* r, int ld,
                                            const FaLane& l) {
    FaPair b[4];
    fa_ldmatrix_x4<true>(b, r + l.mrow * ld + l.mcol);
    fa_mma_16816(d[0], a, {b[0], b[1]});
    fa_mma_16816(d[1], a, {b[2], b[3]});
}

// NT n-tiles of C fragments (16 x 8 NT), row g + 8r times f[r], as floatX rows of stage (leading dimension ld)
template <int NT>
__device__ __forceinline__ void fa_stage_rows(floatX* stage, int ld, const float (&c)[NT][4], const float (&f)[2],
                                              const FaLane& l) {
    for (int r = 0; r < 2; r++) {
        for (int n = 0; n < NT; n++) {
            FaPair v = {{(floatX)(c[n][2 * r] * f[r]), (floatX)(c[n][2 * r + 1] * f[r])}};
            *(FaPair*)(stage + (l.g + 8 * r) * ld + 8 * n + 2 * l.j) = v;
        }
    }
}

// the forward's tile sizes and shared memory (byte offsets): the block's queries (then the output rows staged), two
// (keys, values) buffers; rows padded by 16 bytes, so the 8 rows of an ldmatrix matrix hit 8 different bank groups
template <int HSP>
struct FaFwd {
    static_assert(HSP % 16 == 0 && HSP <= FA_MAX_HS, "padded head sizes: multiples of 16 up to FA_MAX_HS");
    static constexpr int BC = HSP <= 64 ? 64 : 32;        // keys per tile (fewer at 128: the O fragments' registers)
    static constexpr int min_blocks = HSP <= 64 ? 3 : 2;  // blocks per SM the registers must allow
    static constexpr int LDX = HSP + 16 / (int)sizeof(floatX);
    static constexpr size_t q = 0, kv = fa_round((size_t)FA_QUERIES * LDX * sizeof(floatX));  // kv: [buffer][k, v]
    static constexpr size_t bytes = kv + fa_round((size_t)4 * BC * LDX * sizeof(floatX)) + 128;
};

// Block (b * NH + h, query tile), warp w: query rows 16w.. of 64 (B 8, T 1024, NH 12: 1536 blocks, 4 waves of 3 on 132
// SMs). Per key tile: S = Q K^T in C fragments; the online softmax on them (a row's max and sum over the 4 lanes of its
// group, two xor shuffles; l summed per lane until the end); O rescaled; P, rounded to floatX, is the A operand of P V
// where it lies (the C fragments of n-tiles 2kk and 2kk + 1 are A's layout for keys 16kk..).
template <int HSP>
__global__ void __launch_bounds__(FA_THREADS, FaFwd<HSP>::min_blocks)
    flash_forward_kernel(floatX* out, float* lse, const floatX* qkv, int T, int NH, int HS, float scale_log2, bool wide) {
    typedef FaFwd<HSP> L;
    constexpr int BC = L::BC, NK = HSP / 16, NS = BC / 8, NO = HSP / 8;  // k-steps of Q K^T, n-tiles of S and of O
    extern __shared__ float4 fa_dynamic_smem[];
    unsigned char* sm = fa_smem_base(fa_dynamic_smem);
    floatX *Qs = (floatX*)(sm + L::q), *KV = (floatX*)(sm + L::kv);
    const FaLane l;
    const int warp = threadIdx.x / 32, g = l.g, j = l.j, r0 = warp * FA_ROWS;

    // head bh = b * NH + h, queries from q0 (counted from the last: the blocks with the most key tiles start first)
    const int bh = blockIdx.x, C = NH * HS, q0 = (gridDim.y - 1 - blockIdx.y) * FA_QUERIES;
    const int ntiles = ((q0 + FA_QUERIES < T ? q0 + FA_QUERIES : T) - 1) / BC + 1;  // key tiles up to the last query
    const floatX* qrows = qkv + (size_t)(bh / NH) * T * 3 * C + (size_t)(bh % NH) * HS;
    const FaRows qs = {qrows, 3 * (size_t)C, T, HS, wide}, ks = {qrows + C, qs.stride, T, HS, wide},
                 vs = {qrows + 2 * C, qs.stride, T, HS, wide};
    FaTileRegs<FA_QUERIES, HSP> qr;
    qr.fetch(qs, q0);
    qr.put(Qs, L::LDX, qs, q0);
    FaTilePair<BC, HSP> kv0;  // the first key and value tiles
    kv0.fetch(ks, vs, 0);
    kv0.put(KV, L::LDX, ks, vs, 0);
    FaTilePair<BC, HSP> kv;  // buffer u: keys at KV + 2u * BC * LDX, values after them
    __syncthreads();
    FaPair qa[NK][4];  // the warp's 16 query rows as A operands
    for (int c = 0; c < NK; c++) { fa_load_a(qa[c], Qs + r0 * L::LDX + 16 * c, L::LDX, l); }
    float o[NO][4] = {};
    // rows t and t + 8 (r = 0, 1): running max m (log2 units) of the row, this lane's part of the sum l
    const int t = q0 + r0 + g;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

    for (int kt = 0; kt < ntiles; kt++) {
        const int k0 = kt * BC;
        const floatX *Ks = KV + (kt & 1) * 2 * BC * L::LDX, *Vs = Ks + BC * L::LDX;
        if (kt + 1 < ntiles) { kv.fetch(ks, vs, k0 + BC); }  // in flight during this tile's math
        // S = Q K^T: B (channels x keys) of n-tiles 2n and 2n + 1 are key rows 16n.. read as stored
        float s[NS][4] = {};
        for (int c = 0; c < NK; c++) {
            for (int n = 0; n < NS / 2; n++) {
                fa_mma_rows(s + 2 * n, qa[c], Ks + 16 * n * L::LDX + 16 * c, L::LDX, l);
            }
        }
        if (k0 + BC - 1 > q0 + r0) {  // the tile crosses the warp's diagonal: keys past the row's query -inf
            for (int n = 0; n < NS; n++) {
                for (int e = 0; e < 4; e++) {
                    if (k0 + 8 * n + 2 * j + e % 2 > t + 8 * (e / 2)) { s[n][e] = -INFINITY; }
                }
            }
        }
        float mx[2] = {-INFINITY, -INFINITY};
        for (int n = 0; n < NS; n++) {
            for (int e = 0; e < 4; e++) { mx[e / 2] = fmaxf(mx[e / 2], s[n][e]); }
        }
        for (int r = 0; r < 2; r++) {  // the row max in log2 units, finite: key 0 is in the first tile of every row
            for (int x = 1; x < 4; x *= 2) { mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], x)); }
            const float m_new = fmaxf(m_run[r], mx[r] * scale_log2), corr = exp2f(m_run[r] - m_new);
            m_run[r] = m_new;
            l_run[r] *= corr;
            for (int n = 0; n < NO; n++) { o[n][2 * r] *= corr; o[n][2 * r + 1] *= corr; }
        }
        // O += P V, 16 keys at a time; B (keys x channels) of n-tiles 2n and 2n + 1 read transposed
        for (int kk = 0; kk < BC / 16; kk++) {
            FaPair pa[4];
            for (int i = 0; i < 4; i++) {
                for (int k = 0; k < 2; k++) {
                    float p = exp2f(fmaf(s[2 * kk + i / 2][2 * (i % 2) + k], scale_log2, -m_run[i % 2]));
                    pa[i].x[k] = (floatX)p;
                    l_run[i % 2] += p;
                }
            }
            for (int n = 0; n < NO / 2; n++) { fa_mma_cols(o + 2 * n, pa, Vs + 16 * kk * L::LDX + 16 * n, L::LDX, l); }
        }
        if (kt + 1 < ntiles) { kv.put(KV + ((kt + 1) & 1) * 2 * BC * L::LDX, L::LDX, ks, vs, k0 + BC); }
        __syncthreads();  // the next tile is in place; this one's buffer is free
    }
    // out = O / l, lse = (m + log2 l) ln 2; the rows staged as floatX where the warp's queries were
    floatX* stage = Qs + r0 * L::LDX;
    float inv[2];
    for (int r = 0; r < 2; r++) {
        for (int x = 1; x < 4; x *= 2) { l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], x); }
        if (j == 0 && t + 8 * r < T) { lse[(size_t)bh * T + t + 8 * r] = (m_run[r] + log2f(l_run[r])) * FA_LN2; }
        inv[r] = 1.0f / l_run[r];
    }
    fa_stage_rows(stage, L::LDX, o, inv, l);
    fa_copy_rows<HSP>(out + (size_t)(bh / NH) * T * C + bh % NH * HS, C, stage, L::LDX, q0 + r0, T, HS, wide);
}

// ----------------------------------------------------------------------------
// backward

// D[b, h, t] = sum_c dO[b, t, h*HS + c] O[b, t, h*HS + c]: one thread per (b, t, h)
__global__ void flash_backward_dot_kernel(float* D, const floatX* dout, const floatX* out, int B, int T, int NH, int HS,
                                          bool wide) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * T * NH) { return; }
    int h = i % NH, bt = i / NH, b = bt / T, t = bt % T;
    size_t o = (size_t)i * HS;  // (b, t, h) rows of HS channels are consecutive
    float sum = 0.0f;
    if (wide) {
        for (int c = 0; c < HS; c += FA_VEC) {
            FaVec x = *(const FaVec*)(dout + o + c), y = *(const FaVec*)(out + o + c);
            for (int k = 0; k < FA_VEC; k++) { sum += (float)x.v[k] * (float)y.v[k]; }
        }
    } else {
        for (int c = 0; c < HS; c++) { sum += (float)dout[o + c] * (float)out[o + c]; }
    }
    D[((size_t)b * NH + h) * T + t] = sum;
}

// the backward's tiles and shared memory (byte offsets; rows padded as the forward's, LDX). The dK/dV kernel: keys,
// values, two buffers of a query step's (q, dO) rows and (lse, D); the dQ kernel: the block's q, then dO rows, two
// buffers of (k, v) tiles. At HSP 128 the warp's A operands (K and V, or Q and dO) stay in shared memory and a query
// step is 16 rows: the 128 registers of the dK, dV accumulators leave no room for more.
template <int HSP>
struct FaBwd {
    static constexpr int BQ = HSP <= 64 ? 64 : 16;      // dK/dV kernel: queries per step
    static constexpr int BC = FaFwd<HSP>::BC;           // dQ kernel: keys per tile
    static constexpr bool a_in_registers = HSP <= 64;  // the warp's 16 rows of K and V (or Q and dO) as A fragments
    static constexpr int LDX = FaFwd<HSP>::LDX;
    static constexpr size_t kv = 0, qdo = fa_round((size_t)2 * FA_KEYS * LDX * sizeof(floatX));  // [buffer][q, dO]
    static constexpr size_t stats = qdo + fa_round((size_t)4 * BQ * LDX * sizeof(floatX));   // [buffer][lse log2, D]
    static constexpr size_t kv_bytes = stats + fa_round((size_t)4 * BQ * sizeof(float)) + 128;
    static constexpr size_t tiles = fa_round((size_t)2 * FA_QUERIES * LDX * sizeof(floatX));  // [buffer][k, v]
    static constexpr size_t dq_bytes = tiles + fa_round((size_t)4 * BC * LDX * sizeof(floatX)) + 128;
};

// a query step into buffer u of QD (leading dimension LDX) and ST: q, dO rows [q0, q0 + BQ); threads < 2BQ: lse (log2
// units; +inf past T, so P = 0 there) or D
template <int BQ, int HSP, int LDX>
struct FaQueryStep {
    FaTilePair<BQ, HSP> qdo;
    float stat = 0.0f;
    __device__ __forceinline__ void fetch(const FaRows& q, const FaRows& dO, const float* lse, const float* D, int q0) {
        qdo.fetch(q, dO, q0);
        int t = q0 + threadIdx.x % BQ;
        if (threadIdx.x < BQ) {
            stat = t < q.T ? lse[t] * FA_LOG2E : INFINITY;
        } else if (threadIdx.x < 2 * BQ) {
            stat = t < q.T ? D[t] : 0.0f;
        }
    }
    __device__ __forceinline__ void put(floatX* QD, float* ST, int u, const FaRows& q, const FaRows& dO, int q0) {
        qdo.put(QD + 2 * u * BQ * LDX, LDX, q, dO, q0);
        if (threadIdx.x < 2 * BQ) { ST[2 * u * BQ + threadIdx.x] = stat; }
    }
};

// a backward block's head: its q, k, v and dO rows, its lse and D rows
struct FaHead {
    FaRows qs, ks, vs, dos;
    const float *lse, *D;
    __device__ FaHead(const floatX* qkv, const floatX* dout, const float* lse_all, const float* D_all, int T, int NH,
                      int HS, bool wide)
        : qs{qkv + (size_t)(blockIdx.x / NH) * T * 3 * NH * HS + blockIdx.x % NH * HS, 3 * (size_t)NH * HS, T, HS,
             wide},
          ks{qs.p + NH * HS, qs.stride, T, HS, wide}, vs{qs.p + 2 * NH * HS, qs.stride, T, HS, wide},
          dos{dout + (size_t)(blockIdx.x / NH) * T * NH * HS + blockIdx.x % NH * HS, (size_t)NH * HS, T, HS, wide},
          lse(lse_all + (size_t)blockIdx.x * T), D(D_all + (size_t)blockIdx.x * T) {}
};

// S and dP (n-tiles s[0], s[1] and dp[0], dp[1]) += the warp's 16 rows as A (fragments a[c], b[c] where REG, else
// loaded per k-step from ar, br) against 16 rows of x and y as B read as stored: S = A X^T, dP = B Y^T
template <int NK, bool REG>
__device__ __forceinline__ void fa_s_dp(float (&s)[2][4], float (&dp)[2][4], FaPair (*a)[4], FaPair (*b)[4],
                                        const floatX* ar, const floatX* br, const floatX* x, const floatX* y, int ld,
                                        const FaLane& l) {
    for (int c = 0; c < NK; c++) {
        if constexpr (!REG) {
            fa_load_a(a[0], ar + 16 * c, ld, l);
            fa_load_a(b[0], br + 16 * c, ld, l);
        }
        fa_mma_rows(s, a[REG ? c : 0], x + 16 * c, ld, l);
        fa_mma_rows(dp, b[REG ? c : 0], y + 16 * c, ld, l);
    }
}

// P = 2^(s scale_log2 - lse2) (0 where masked) and dS = P (dP - D) scale as A operands, rounded to floatX: half k of
// register i is C element (row g + 8r, column col = 8 (i / 2) + 2j + k), r = i % 2 (the forward's P layout);
// stat(r, col, lse2, D) sets that element's lse2 and D and returns whether it is masked
template <typename Stat>
__device__ __forceinline__ void fa_p_ds(FaPair (&pa)[4], FaPair (&da)[4], const float (&s)[2][4],
                                        const float (&dp)[2][4], float scale_log2, float scale, const FaLane& l,
                                        Stat stat) {
    for (int i = 0; i < 4; i++) {
        for (int k = 0; k < 2; k++) {
            const int n = i / 2, e = 2 * (i % 2) + k;
            float lse2, D;
            const bool masked = stat(i % 2, 8 * n + 2 * l.j + k, lse2, D);
            const float p = masked ? 0.0f : exp2f(fmaf(s[n][e], scale_log2, -lse2));
            pa[i].x[k] = (floatX)p;
            da[i].x[k] = (floatX)(p * (dp[n][e] - D) * scale);
        }
    }
}

// Block (b * NH + h, key tile): keys k0.. of one head, warp w keys k0 + 16w.. (the A rows of every product), walking
// the query steps from the diagonal on, the next step's 16-byte loads in flight during this one's math. Per 16 queries:
// S^T = K Q^T and dP^T = V dO^T (B: q, dO rows as stored), P^T and dS^T in C fragments (the mask only where the
// 16 queries cross the warp's diagonal), then dV += P^T dO and dK += dS^T Q with P^T, dS^T as A operands where they
// lie and dO, Q read transposed. A warp reads only its own K, V rows and the shared q, dO tiles: one barrier per step.
// Registers: dK, dV 64 a thread at HSP 64 (128 at 128), K, V fragments 32 (0), the next step's loads 32 (16),
// S^T, dP^T 16; nvcc 13 gives 250 (255) without spills. 2 blocks (8 warps) per SM allow 256 a thread (3 would cap
// them at 168, the accumulators and fragments alone 96); shared memory 56448 bytes (52608) a block.
template <int HSP>
__global__ void __launch_bounds__(FA_THREADS, 2)
    flash_backward_kv_kernel(floatX* dqkv, const float* lse, const float* D, const floatX* qkv, const floatX* dout,
                             int T, int NH, int HS, float scale, bool wide) {
    typedef FaBwd<HSP> L;
    constexpr int BQ = L::BQ, NK = HSP / 16, NO = HSP / 8, RA = L::a_in_registers ? NK : 1;
    extern __shared__ float4 fa_dynamic_smem[];
    unsigned char* sm = fa_smem_base(fa_dynamic_smem);
    const FaLane l;
    const int r0 = threadIdx.x / 32 * FA_ROWS, k0 = blockIdx.y * FA_KEYS, key = k0 + r0 + l.g;  // key: C row g
    floatX *Ks = (floatX*)(sm + L::kv) + r0 * L::LDX, *Vs = Ks + FA_KEYS * L::LDX;  // the warp's 16 rows
    floatX* QD = (floatX*)(sm + L::qdo);  // buffer u: q at QD + 2u * BQ * LDX, dO after it
    float* ST = (float*)(sm + L::stats);  // buffer u: lse (log2 units) at ST + 2u * BQ, D after it
    const FaHead hd(qkv, dout, lse, D, T, NH, HS, wide);
    const float scale_log2 = scale * FA_LOG2E;
    FaTilePair<FA_KEYS, HSP> kv;
    kv.fetch(hd.ks, hd.vs, k0);
    kv.put((floatX*)(sm + L::kv), L::LDX, hd.ks, hd.vs, k0);  // the values at Vs
    FaQueryStep<BQ, HSP, L::LDX> next;  // the first query step: the one holding the diagonal (BQ divides FA_KEYS)
    next.fetch(hd.qs, hd.dos, hd.lse, hd.D, k0);
    next.put(QD, ST, 0, hd.qs, hd.dos, k0);
    __syncthreads();
    FaPair ka[RA][4], va[RA][4];
    for (int c = 0; c < RA; c++) {
        fa_load_a(ka[c], Ks + 16 * c, L::LDX, l);
        fa_load_a(va[c], Vs + 16 * c, L::LDX, l);
    }
    float dk[NO][4] = {}, dv[NO][4] = {};
    for (int q0 = k0, u = 0; q0 < T; q0 += BQ, u ^= 1) {
        const bool more = q0 + BQ < T;
        if (more) { next.fetch(hd.qs, hd.dos, hd.lse, hd.D, q0 + BQ); }
        const floatX *Qs = QD + 2 * u * BQ * L::LDX, *dOs = Qs + BQ * L::LDX;
        const float *lse2 = ST + 2 * u * BQ, *Dq = lse2 + BQ;
        for (int jq = 0; jq < BQ && q0 + jq < T; jq += 16) {  // queries q0 + jq..
            if (q0 + jq + 15 < k0 + r0) { continue; }           // all before the warp's first key
            float s[2][4] = {}, dp[2][4] = {};
            fa_s_dp<NK, L::a_in_registers>(s, dp, ka, va, Ks, Vs, Qs + jq * L::LDX, dOs + jq * L::LDX, L::LDX, l);
            const bool diag = k0 + r0 + 15 > q0 + jq;
            FaPair pa[4], da[4];
            fa_p_ds(pa, da, s, dp, scale_log2, scale, l, [&](int r, int col, float& lse2_q, float& D_q) {
                lse2_q = lse2[jq + col];  // key + 8r, query q0 + jq + col
                D_q = Dq[jq + col];
                return diag && key + 8 * r > q0 + jq + col;
            });
            for (int n = 0; n < NK; n++) {
                fa_mma_cols(dv + 2 * n, pa, dOs + jq * L::LDX + 16 * n, L::LDX, l);
                fa_mma_cols(dk + 2 * n, da, Qs + jq * L::LDX + 16 * n, L::LDX, l);
            }
        }
        if (more) { next.put(QD, ST, u ^ 1, hd.qs, hd.dos, q0 + BQ); }
        __syncthreads();  // the next step is in place; this one's buffer is free
    }
    // dK and dV rows staged as floatX in the warp's own key and value rows
    const float one[2] = {1.0f, 1.0f};
    fa_stage_rows(Ks, L::LDX, dk, one, l);
    fa_stage_rows(Vs, L::LDX, dv, one, l);
    floatX* dkrows = dqkv + (hd.ks.p - qkv);  // dqkv's k columns of this head
    fa_copy_rows<HSP>(dkrows, hd.ks.stride, Ks, L::LDX, k0 + r0, T, HS, wide);
    fa_copy_rows<HSP>(dkrows + NH * HS, hd.ks.stride, Vs, L::LDX, k0 + r0, T, HS, wide);
}

// Block (b * NH + h, query tile, counted from the last as the forward's), warp w: queries q0 + 16w.., their Q and dO
// rows the A operands; key and value tiles of BC double buffered up to the block's last query. Per 16 keys:
// S = Q K^T, dP = dO V^T, P and dS (rows t, t + 8: lse and D in registers), dQ += dS K (dS's C fragments as A, K rows
// read transposed); dQ in fp32 registers until its rows are written once. Registers: dQ 32 a thread at HSP 64 (64 at
// 128), Q and dO fragments 32 (0), the next tile's loads 32 (32), S, dP 16; nvcc 13 gives 158 (168) without spills.
// 3 blocks (12 warps) per SM allow 168 a thread, enough without spills (2 would allow 255 but hold a third fewer warps
// to cover the loads); shared memory 55424 bytes (69760) a block, 3 x 70 KB fit an SM's 228 KB.
template <int HSP>
__global__ void __launch_bounds__(FA_THREADS, 3)
    flash_backward_dq_kernel(floatX* dqkv, const float* lse, const float* D, const floatX* qkv, const floatX* dout,
                             int T, int NH, int HS, float scale, bool wide) {
    typedef FaBwd<HSP> L;
    constexpr int BC = L::BC, NK = HSP / 16, NO = HSP / 8, RA = L::a_in_registers ? NK : 1;
    extern __shared__ float4 fa_dynamic_smem[];
    unsigned char* sm = fa_smem_base(fa_dynamic_smem);
    const FaLane l;
    const int r0 = threadIdx.x / 32 * FA_ROWS, q0 = (gridDim.y - 1 - blockIdx.y) * FA_QUERIES, t = q0 + r0 + l.g;
    floatX *QO = (floatX*)sm, *Qs = QO + r0 * L::LDX, *dOs = Qs + FA_QUERIES * L::LDX;  // the warp's 16 rows
    floatX* KV = (floatX*)(sm + L::tiles);  // buffer u: keys at KV + 2u * BC * LDX, values after them
    const FaHead hd(qkv, dout, lse, D, T, NH, HS, wide);
    const float scale_log2 = scale * FA_LOG2E;
    const int ntiles = ((q0 + FA_QUERIES < T ? q0 + FA_QUERIES : T) - 1) / BC + 1;  // key tiles up to the last query
    FaTilePair<FA_QUERIES, HSP> qdo;
    qdo.fetch(hd.qs, hd.dos, q0);
    qdo.put(QO, L::LDX, hd.qs, hd.dos, q0);
    FaTilePair<BC, HSP> kv;
    kv.fetch(hd.ks, hd.vs, 0);
    kv.put(KV, L::LDX, hd.ks, hd.vs, 0);
    float lse2[2], Dr[2];  // rows t and t + 8: lse in log2 units (+inf past T: P = 0) and D
    for (int r = 0; r < 2; r++) {
        lse2[r] = t + 8 * r < T ? hd.lse[t + 8 * r] * FA_LOG2E : INFINITY;
        Dr[r] = t + 8 * r < T ? hd.D[t + 8 * r] : 0.0f;
    }
    __syncthreads();
    FaPair qa[RA][4], oa[RA][4];
    for (int c = 0; c < RA; c++) {
        fa_load_a(qa[c], Qs + 16 * c, L::LDX, l);
        fa_load_a(oa[c], dOs + 16 * c, L::LDX, l);
    }
    float dq[NO][4] = {};
    for (int kt = 0; kt < ntiles; kt++) {
        const int k0 = kt * BC;
        const floatX *Ks = KV + (kt & 1) * 2 * BC * L::LDX, *Vs = Ks + BC * L::LDX;
        if (kt + 1 < ntiles) { kv.fetch(hd.ks, hd.vs, k0 + BC); }  // in flight during this tile's math
        for (int kk = 0; kk < BC && k0 + kk <= q0 + r0 + 15; kk += 16) {  // keys k0 + kk.., up to the warp's last query
            float s[2][4] = {}, dp[2][4] = {};
            fa_s_dp<NK, L::a_in_registers>(s, dp, qa, oa, Qs, dOs, Ks + kk * L::LDX, Vs + kk * L::LDX, L::LDX, l);
            const bool diag = k0 + kk + 15 > q0 + r0;
            FaPair pa[4], da[4];
            fa_p_ds(pa, da, s, dp, scale_log2, scale, l, [&](int r, int col, float& lse2_t, float& D_t) {
                lse2_t = lse2[r];  // query t + 8r, key k0 + kk + col
                D_t = Dr[r];
                return diag && k0 + kk + col > t + 8 * r;
            });
            for (int n = 0; n < NK; n++) { fa_mma_cols(dq + 2 * n, da, Ks + kk * L::LDX + 16 * n, L::LDX, l); }
        }
        if (kt + 1 < ntiles) { kv.put(KV + ((kt + 1) & 1) * 2 * BC * L::LDX, L::LDX, hd.ks, hd.vs, k0 + BC); }
        __syncthreads();  // the next (k, v) tiles are in place; this tile's buffer is free
    }
    // dQ rows staged as floatX in the warp's own query rows
    const float one[2] = {1.0f, 1.0f};
    fa_stage_rows(Qs, L::LDX, dq, one, l);
    fa_copy_rows<HSP>(dqkv + (hd.qs.p - qkv), hd.qs.stride, Qs, L::LDX, q0 + r0, T, HS, wide);
}

// ----------------------------------------------------------------------------
// host side

// the kernels and sizes of one padded head size: the one table of the four instantiations
struct FaConfig {
    int hsp;  // padded head size
    size_t fwd_smem, kv_smem, dq_smem;
    decltype(&flash_forward_kernel<16>) forward;
    decltype(&flash_backward_kv_kernel<16>) backward_kv, backward_dq;
};
template <int HSP>
static const FaConfig fa_config = {HSP, FaFwd<HSP>::bytes, FaBwd<HSP>::kv_bytes, FaBwd<HSP>::dq_bytes,
                                   flash_forward_kernel<HSP>, flash_backward_kv_kernel<HSP>,
                                   flash_backward_dq_kernel<HSP>};

// the configuration for head size HS (the smallest padded size >= HS), or past FA_MAX_HS NULL and a reason in why
static const FaConfig* flash_config(int HS, char* why = NULL, size_t cap = 0) {
    static const FaConfig table[] = {fa_config<16>, fa_config<32>, fa_config<64>, fa_config<FA_MAX_HS>};
    for (const FaConfig& k : table) {
        if (HS >= 1 && HS <= k.hsp) { return &k; }
    }
    snprintf(why, cap, "head size %d is not supported: attention runs head sizes 1 to %d", HS, FA_MAX_HS);
    return NULL;
}

// 1 where this GPU's shared memory per block takes head size HS (the kernels then allowed that much), else 0 and why
static int flash_attention_supported(int HS, char* why, size_t cap) {
    const FaConfig* k = flash_config(HS, why, cap);
    if (k == NULL) { return 0; }
    int dev = 0, limit = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    size_t need = std::max({k->fwd_smem, k->kv_smem, k->dq_smem});
    if (need <= (size_t)limit) {
        const cudaFuncAttribute smem = cudaFuncAttributeMaxDynamicSharedMemorySize;
        cudaCheck(cudaFuncSetAttribute((const void*)k->forward, smem, (int)k->fwd_smem));
        cudaCheck(cudaFuncSetAttribute((const void*)k->backward_kv, smem, (int)k->kv_smem));
        cudaCheck(cudaFuncSetAttribute((const void*)k->backward_dq, smem, (int)k->dq_smem));
        return 1;
    }
    snprintf(why, cap, "head size %d needs %zu bytes of shared memory per block; this GPU allows %d", HS, need, limit);
    return 0;
}

// whether the kernels may use 16-byte accesses: HS a whole number of vectors, every tensor p aligned
template <typename... P>
static bool flash_wide(int HS, const P*... p) { return HS % FA_VEC == 0 && (((uintptr_t)p % 16 == 0) && ...); }

// out (B, T, C) and lse (B, NH, T) from qkv (B, T, 3C); callers check flash_attention_supported once first
static void flash_attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    int HS = C / NH;
    const FaConfig* k = flash_config(HS);
    auto forward = k->forward;
    dim3 grid(B * NH, ceil_div(T, FA_QUERIES));
    float scale_log2 = 1.0f / sqrtf((float)HS) * FA_LOG2E;  // as the backward kernel forms it
    forward<<<grid, FA_THREADS, k->fwd_smem>>>(out, lse, qkv, T, NH, HS, scale_log2, flash_wide(HS, out, qkv));
    cudaCheckLaunch();
}

// dqkv (B, T, 3C; all overwritten) from dout = dL/d(attention output rows); out, lse: the forward's; D: (B, NH, T)
// scratch
static void flash_attention_backward(floatX* dqkv, float* D, const floatX* dout, const floatX* qkv, const floatX* out,
                                     const float* lse, int B, int T, int C, int NH) {
    int HS = C / NH;
    bool wide = flash_wide(HS, dqkv, dout, qkv, out);
    const FaConfig* k = flash_config(HS);
    auto backward_kv = k->backward_kv;
    auto backward_dq = k->backward_dq;
    flash_backward_dot_kernel<<<ceil_div((long)B * T * NH, 256), 256>>>(D, dout, out, B, T, NH, HS, wide);
    cudaCheckLaunch();
    float scale = 1.0f / sqrtf((float)HS);
    dim3 kv_grid(B * NH, ceil_div(T, FA_KEYS)), dq_grid(B * NH, ceil_div(T, FA_QUERIES));
    backward_kv<<<kv_grid, FA_THREADS, k->kv_smem>>>(dqkv, lse, D, qkv, dout, T, NH, HS, scale, wide);
    cudaCheckLaunch();
    backward_dq<<<dq_grid, FA_THREADS, k->dq_smem>>>(dqkv, lse, D, qkv, dout, T, NH, HS, scale, wide);
    cudaCheckLaunch();
}

#endif  // ATTENTION_CUH
