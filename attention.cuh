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

Backward. D_t = dO_t . O_t (flash_backward_dot_kernel); then a block takes 64 keys of one head and walks the query
tiles from the diagonal on with FlashAttention-2's five tile products on WMMA (flash_backward_kv_kernel):
    S^T = K Q^T,  dP^T = V dO^T,  P^T = exp(S^T / sqrt(HS) - lse),  dS^T = P^T (dP^T - D) / sqrt(HS),
    dV += P^T dO,  dK += dS^T Q,  dQ += dS K.
dK, dV stay in registers. dQ sums over key blocks: each adds into its own fp32 slice of dq_acc; flash_backward_dq_kernel
sums the slices in split order (no atomics; splits depend on B*NH and T only, so results are bit-identical on any GPU).

Tile sizes are compile-time constants of HSP, the head size padded to 16, 32, 64 or 128 (channels past HS zero on
load, never stored); tiles double buffered in shared memory; bf16 products, fp32 sums. Costs: dev/cuda/README.md.
*/
#ifndef ATTENTION_CUH
#define ATTENTION_CUH

#include <algorithm>
#include <math.h>
#include <type_traits>  // stdint.h, stdio.h, string.h and cuda_runtime.h: the includer's, with cudaCheck

// tensor cores for bf16 tiles from sm_80 on; fp32 loops otherwise (the FP32 build; an older device pass, never run)
#if !defined(ENABLE_FP32) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800)
#define FA_WMMA 1
#include <mma.h>
#endif

#define FA_WARPS 4                       // warps per block
#define FA_THREADS (FA_WARPS * 32)
#define FA_ROWS 16                       // rows of a tile per warp (the WMMA tile height)
#define FA_QUERIES (FA_WARPS * FA_ROWS)  // forward: queries per block (64)
#define FA_KEYS (FA_WARPS * FA_ROWS)     // backward: keys per block (64)
#define FA_MAX_HS 128                    // the largest head size (padded sizes 16, 32, 64, 128)
#define FA_BACKWARD_BLOCKS 1024          // backward: target blocks (heads x dQ splits), waves of 2 per SM, 100-150 SMs
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

// 16 bytes of floatX (8 bf16 or 4 fp32): one load or store; FaQuad: 4 values, one aligned load
#define FA_VEC ((int)(16 / sizeof(floatX)))
struct alignas(16) FaVec { floatX v[FA_VEC]; };
template <typename F> struct alignas(4 * sizeof(F)) FaQuad { F v[4]; };

// ----------------------------------------------------------------------------
// tile products: a 16 x 16 fp32 accumulator += A (16 x 16) . B (16 x 16), one warp

#ifdef FA_WMMA
namespace fa_wmma = nvcuda::wmma;
typedef fa_wmma::row_major FaRow;
typedef fa_wmma::col_major FaCol;
typedef fa_wmma::fragment<fa_wmma::accumulator, 16, 16, 16, float> FaAcc;
template <typename L> using FaA = fa_wmma::fragment<fa_wmma::matrix_a, 16, 16, 16, __nv_bfloat16, L>;
template <typename L> using FaB = fa_wmma::fragment<fa_wmma::matrix_b, 16, 16, 16, __nv_bfloat16, L>;

template <typename F>
__device__ __forceinline__ void fa_load(F& f, const floatX* p, int ld) { fa_wmma::load_matrix_sync(f, p, ld); }
template <typename FA, typename FB>
__device__ __forceinline__ void fa_mma(FaAcc& d, const FA& a, const FB& b) { fa_wmma::mma_sync(d, a, b, d); }
__device__ __forceinline__ void fa_zero(FaAcc& d) { fa_wmma::fill_fragment(d, 0.0f); }
__device__ __forceinline__ void fa_load_acc(FaAcc& d, const float* p, int ld) {
    fa_wmma::load_matrix_sync(d, p, ld, fa_wmma::mem_row_major);
}
__device__ __forceinline__ void fa_store_acc(float* p, const FaAcc& d, int ld) {
    fa_wmma::store_matrix_sync(p, d, ld, fa_wmma::mem_row_major);
}
#else
// The same calls as plain fp32 loops. Accumulator element e of lane l is tile element e * 32 + l
// (row-major); an A or B operand is only where its tile lies in shared memory, read by the product.
struct FaRow { static constexpr bool col = false; };
struct FaCol { static constexpr bool col = true; };
struct FaAcc { static constexpr int num_elements = 8; float x[8]; };
template <typename L>
struct FaA {
    const floatX* p;
    int ld;
    __device__ __forceinline__ float at(int r, int c) const { return (float)(L::col ? p[r + c * ld] : p[r * ld + c]); }
};
template <typename L> using FaB = FaA<L>;

template <typename L>
__device__ __forceinline__ void fa_load(FaA<L>& f, const floatX* p, int ld) { f = {p, ld}; }
template <typename LA, typename LB>
__device__ __forceinline__ void fa_mma(FaAcc& d, const FaA<LA>& a, const FaA<LB>& b) {
    for (int e = 0; e < 8; e++) {
        int i = e * 32 + threadIdx.x % 32, r = i >> 4, c = i & 15;
        for (int k = 0; k < 16; k++) { d.x[e] += a.at(r, k) * b.at(k, c); }
    }
}
// where accumulator element e of this lane lies in a row-major tile of leading dimension ld
__device__ __forceinline__ int fa_acc_at(int e, int ld) {
    return (e * 2 + threadIdx.x % 32 / 16) * ld + threadIdx.x % 16;
}
__device__ __forceinline__ void fa_zero(FaAcc& d) { for (int e = 0; e < 8; e++) { d.x[e] = 0.0f; } }
__device__ __forceinline__ void fa_load_acc(FaAcc& d, const float* p, int ld) {
    for (int e = 0; e < 8; e++) { d.x[e] = p[fa_acc_at(e, ld)]; }
}
__device__ __forceinline__ void fa_store_acc(float* p, const FaAcc& d, int ld) {
    for (int e = 0; e < 8; e++) { p[fa_acc_at(e, ld)] = d.x[e]; }
}
#endif

// A fragment's layout is unspecified, but load, mma and store agree on it: the fragment loaded from a tile
// holding r * 16 + c at (r, c) tells in its element i where element i of every accumulator lies.
__device__ __forceinline__ void fa_fill_index_tile(float* tile) {
    for (int e = threadIdx.x; e < 256; e += blockDim.x) { tile[e] = (float)e; }
}
__device__ __forceinline__ int fa_row(const FaAcc& idx, int i) { return (int)idx.x[i] >> 4; }
__device__ __forceinline__ int fa_col(const FaAcc& idx, int i) { return (int)idx.x[i] & 15; }

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

// a warp's 16 x HSP accumulators (HSP / 16 fragments) -> rows of dst as fa_copy_rows, staged in fp32
template <int HSP>
__device__ __forceinline__ void fa_store_rows(floatX* dst, size_t stride, const FaAcc* acc, float* stage, int ld,
                                              int t0, int T, int HS, bool wide) {
    for (int c = 0; c < HSP / 16; c++) { fa_store_acc(stage + 16 * c, acc[c], ld); }
    fa_copy_rows<HSP>(dst, stride, stage, ld, t0, T, HS, wide);
}

// shared memory: regions 128-byte aligned from a 128-byte aligned base (the layouts add 128 of slack)
__host__ __device__ constexpr size_t fa_round(size_t bytes) { return (bytes + 127) / 128 * 128; }
__device__ __forceinline__ unsigned char* fa_smem_base(void* smem) {
    return (unsigned char*)smem + (128 - (uintptr_t)smem % 128) % 128;
}

// ----------------------------------------------------------------------------
// forward: the register layouts of warp-level mma.m16n8k16 (bf16) and ldmatrix (PTX ISA), g = lane / 4, j = lane % 4:
//   A (16 x 16): a[0] = (g, 2j..2j+1), a[1] = (g + 8, 2j..), a[2] = (g, 2j + 8..), a[3] = (g + 8, 2j + 8..)
//   B (16 x 8):  b[0] = (2j..2j+1, g), b[1] = (2j + 8.., g)        C, D (16 x 8, fp32): (g, 2j..2j+1), (g + 8, 2j..)
// ldmatrix x4: lanes 8i..8i+7 point at the 8 rows of 8 x 8 matrix i; register i of a lane holds (row g, columns 2j..)
// of matrix i, or with .trans (rows 2j.., column g). nvcc's bf16 device code (FA_WMMA on a GPU) runs the instructions;
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
#if defined(FA_WMMA) && defined(__CUDA_ARCH__)
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
#if defined(FA_WMMA) && defined(__CUDA_ARCH__)
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
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, j = lane % 4, r0 = warp * FA_ROWS;
    // this lane's row of an ldmatrix matrix: the 8 x 8 matrix lane / 8 at (8 * (lane / 8 % 2), 8 * (lane / 16))
    // (A: rows 0-7, 8-15 of columns 0-7, then of 8-15) or, swapped, at (8 * (lane / 16), 8 * (lane / 8 % 2))
    const int mrow = lane % 8 + 8 * (lane / 8 % 2), mcol = 8 * (lane / 16);
    const int srow = lane % 8 + 8 * (lane / 16), scol = 8 * (lane / 8 % 2);

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
    for (int c = 0; c < NK; c++) { fa_ldmatrix_x4<false>(qa[c], Qs + (r0 + mrow) * L::LDX + 16 * c + mcol); }
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
                FaPair kb[4];
                fa_ldmatrix_x4<false>(kb, Ks + (16 * n + srow) * L::LDX + 16 * c + scol);
                fa_mma_16816(s[2 * n], qa[c], {kb[0], kb[1]});
                fa_mma_16816(s[2 * n + 1], qa[c], {kb[2], kb[3]});
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
            for (int n = 0; n < NO / 2; n++) {
                FaPair vb[4];
                fa_ldmatrix_x4<true>(vb, Vs + (16 * kk + mrow) * L::LDX + 16 * n + mcol);
                fa_mma_16816(o[2 * n], pa, {vb[0], vb[1]});
                fa_mma_16816(o[2 * n + 1], pa, {vb[2], vb[3]});
            }
        }
        if (kt + 1 < ntiles) { kv.put(KV + ((kt + 1) & 1) * 2 * BC * L::LDX, L::LDX, ks, vs, k0 + BC); }
        __syncthreads();  // the next tile is in place; this one's buffer is free
    }
    // out = O / l, lse = (m + log2 l) ln 2; the rows staged as floatX where the warp's queries were
    floatX* stage = Qs + r0 * L::LDX;
    for (int r = 0; r < 2; r++) {
        for (int x = 1; x < 4; x *= 2) { l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], x); }
        if (j == 0 && t + 8 * r < T) { lse[(size_t)bh * T + t + 8 * r] = (m_run[r] + log2f(l_run[r])) * FA_LN2; }
        const float inv = 1.0f / l_run[r];
        for (int n = 0; n < NO; n++) {
            FaPair v = {{(floatX)(o[n][2 * r] * inv), (floatX)(o[n][2 * r + 1] * inv)}};
            *(FaPair*)(stage + (g + 8 * r) * L::LDX + 8 * n + 2 * j) = v;
        }
    }
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

// the dK/dV kernel's shared memory (byte offsets): keys, values; two buffers of a query step's (q, dO) and (lse, D);
// P^T and dS^T (keys x queries, floatX); the index tile
template <int HSP>
struct FaBwd {
    static constexpr int BQ = HSP <= 64 ? 64 : 16;      // queries per step
    static constexpr bool kv_in_registers = HSP <= 64;  // the warp's K and V rows as fragments
    static constexpr int LDX = HSP + 8, LDP = BQ + 8, LDO = HSP + 4;
    static constexpr size_t kv = 0, qdo = fa_round((size_t)2 * FA_KEYS * LDX * sizeof(floatX));  // [buffer][q, dO]
    static constexpr size_t stats = qdo + fa_round((size_t)4 * BQ * LDX * sizeof(floatX));   // [buffer][lse log2, D]
    static constexpr size_t pt = stats + fa_round((size_t)4 * BQ * sizeof(float));           // P^T, then dS^T
    static constexpr size_t idx = pt + fa_round((size_t)2 * FA_KEYS * LDP * sizeof(floatX));
    static constexpr size_t bytes = idx + fa_round(256 * sizeof(float)) + 128;
    static_assert((size_t)FA_KEYS * LDO * sizeof(float) <= qdo - kv, "dK/dV staging (fp32) fits the (k, v) tiles");
};

// a query step into buffer u of QD and ST: q, dO rows [q0, q0 + BQ); threads < 2BQ: lse (log2; +inf past T) or D
template <int BQ, int HSP>
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
        qdo.put(QD + 2 * u * BQ * FaBwd<HSP>::LDX, FaBwd<HSP>::LDX, q, dO, q0);
        if (threadIdx.x < 2 * BQ) { ST[2 * u * BQ + threadIdx.x] = stat; }
    }
};

// Block (b * NH + h, split): the key tiles split, split + nsplits, ... of one head, 16 keys per warp, dQ into its slice
template <int HSP>
__global__ void __launch_bounds__(FA_THREADS, 2)
    flash_backward_kv_kernel(floatX* dqkv, float* dq_acc, const float* lse, const float* D, const floatX* qkv,
                             const floatX* dout, int T, int NH, int HS, int nsplits, float scale, bool wide) {
    typedef FaBwd<HSP> L;
    constexpr int BQ = L::BQ, NF = HSP / 16, NQ = BQ / 16, NK = FA_KEYS / 16;
    constexpr int FPW = NQ * NF / FA_WARPS;  // the dQ tile's NQ x NF fragments over the warps: FPW each
    static_assert(NQ * NF % FA_WARPS == 0 && NF % FPW == 0, "dQ fragments per warp in one row block");
    extern __shared__ float4 fa_dynamic_smem[];
    unsigned char* sm = fa_smem_base(fa_dynamic_smem);
    floatX *Ks = (floatX*)(sm + L::kv), *Vs = Ks + FA_KEYS * L::LDX;
    floatX* QD = (floatX*)(sm + L::qdo);  // buffer u: q at QD + 2u * BQ * LDX, dO after it
    float* ST = (float*)(sm + L::stats);  // buffer u: lse (log2 units) at ST + 2u * BQ, D after it
    floatX *PT = (floatX*)(sm + L::pt), *dST = PT + FA_KEYS * L::LDP;  // P^T (FA_KEYS x BQ), then dS^T
    float* idx_tile = (float*)(sm + L::idx);
    int warp = threadIdx.x / 32, r0 = warp * FA_ROWS;

    int bh = blockIdx.x, b = bh / NH, h = bh % NH, C = NH * HS, split = blockIdx.y;
    size_t stride = 3 * (size_t)C;
    const floatX* qrows = qkv + (size_t)b * T * stride + h * HS;
    const FaRows qs = {qrows, stride, T, HS, wide}, ks = {qrows + C, stride, T, HS, wide},
                 vs = {qrows + 2 * C, stride, T, HS, wide},
                 dos = {dout + (size_t)b * T * C + h * HS, (size_t)C, T, HS, wide};
    const float *lse_h = lse + (size_t)bh * T, *D_h = D + (size_t)bh * T;  // this head's rows
    int nkt = (T + FA_KEYS - 1) / FA_KEYS, Tp = (T + BQ - 1) / BQ * BQ;
    float* dqa = dq_acc + ((size_t)split * gridDim.x + bh) * Tp * HSP;  // this block's slice (Tp, HSP)
    const float scale_log2 = scale * FA_LOG2E;
    fa_fill_index_tile(idx_tile);

    FaQueryStep<BQ, HSP> next;
    for (int kt = split; kt < nkt; kt += nsplits) {
        const int k0 = kt * FA_KEYS;
        __syncthreads();  // the previous key tile's last reads of shared memory are done
        FaTilePair<FA_KEYS, HSP> kv;
        kv.fetch(ks, vs, k0);
        kv.put(Ks, L::LDX, ks, vs, k0);  // the values at Vs
        // the first query step: the one holding the diagonal (BQ divides FA_KEYS)
        next.fetch(qs, dos, lse_h, D_h, k0);
        next.put(QD, ST, 0, qs, dos, k0);
        __syncthreads();
        FaAcc idx, dk[NF], dv[NF];
        fa_load_acc(idx, idx_tile, 16);
        FaA<FaRow> kf[L::kv_in_registers ? NF : 1], vf[L::kv_in_registers ? NF : 1];
        for (int c = 0; c < NF; c++) {
            if constexpr (L::kv_in_registers) {
                fa_load(kf[c], Ks + r0 * L::LDX + 16 * c, L::LDX);
                fa_load(vf[c], Vs + r0 * L::LDX + 16 * c, L::LDX);
            }
            fa_zero(dk[c]);
            fa_zero(dv[c]);
        }
        for (int q0 = k0, u = 0; q0 < T; q0 += BQ, u ^= 1) {
            const bool more = q0 + BQ < T;
            if (more) { next.fetch(qs, dos, lse_h, D_h, q0 + BQ); }
            const floatX *Qs = QD + 2 * u * BQ * L::LDX, *dOs = Qs + BQ * L::LDX;
            const float *lse2 = ST + 2 * u * BQ, *Dq = lse2 + BQ;
            // S^T and dP^T, 16 queries at a time; P^T and dS^T into shared memory (floatX)
            for (int j = 0; j < NQ; j++) {
                FaAcc s, dp;
                fa_zero(s);
                fa_zero(dp);
                for (int c = 0; c < NF; c++) {
                    FaA<FaRow> ka, va;
                    if constexpr (L::kv_in_registers) {
                        ka = kf[c];
                        va = vf[c];
                    } else {
                        fa_load(ka, Ks + r0 * L::LDX + 16 * c, L::LDX);
                        fa_load(va, Vs + r0 * L::LDX + 16 * c, L::LDX);
                    }
                    FaB<FaCol> qb, ob;  // Q^T, dO^T
                    fa_load(qb, Qs + 16 * j * L::LDX + 16 * c, L::LDX);
                    fa_load(ob, dOs + 16 * j * L::LDX + 16 * c, L::LDX);
                    fa_mma(s, ka, qb);
                    fa_mma(dp, va, ob);
                }
                for (int i = 0; i < FaAcc::num_elements; i++) {
                    int row = fa_row(idx, i), col = 16 * j + fa_col(idx, i);
                    float p = k0 + r0 + row <= q0 + col ? exp2f(s.x[i] * scale_log2 - lse2[col]) : 0.0f;
                    float ds = p * (dp.x[i] - Dq[col]) * scale;
                    PT[(r0 + row) * L::LDP + col] = (floatX)p;
                    dST[(r0 + row) * L::LDP + col] = (floatX)ds;
                }
            }
            __syncwarp(0xffffffffu);
            // dV += P^T dO, dK += dS^T Q (the warp's own 16 key rows of P^T and dS^T)
            for (int kk = 0; kk < NQ; kk++) {
                FaA<FaRow> pa, da;
                fa_load(pa, PT + r0 * L::LDP + 16 * kk, L::LDP);
                fa_load(da, dST + r0 * L::LDP + 16 * kk, L::LDP);
                for (int c = 0; c < NF; c++) {
                    FaB<FaRow> ob, qb;
                    fa_load(ob, dOs + 16 * kk * L::LDX + 16 * c, L::LDX);
                    fa_load(qb, Qs + 16 * kk * L::LDX + 16 * c, L::LDX);
                    fa_mma(dv[c], pa, ob);
                    fa_mma(dk[c], da, qb);
                }
            }
            if (more) { next.put(QD, ST, u ^ 1, qs, dos, q0 + BQ); }
            __syncthreads();  // every warp's dS^T rows are in place (and the next query step)
            // dQ (+)= dS K: this warp's FPW fragments of the BQ x HSP tile, all in query rows 16 qb..
            const int f0 = warp * FPW, qb = f0 / NF, c0 = f0 % NF;
            FaA<FaCol> dsa[NK];  // dS = (dS^T)^T
            for (int kk = 0; kk < NK; kk++) { fa_load(dsa[kk], dST + 16 * kk * L::LDP + 16 * qb, L::LDP); }
            for (int c = c0; c < c0 + FPW; c++) {
                FaAcc acc;  // zero on the split's first key tile, else the slice's sum so far
                float* dst = dqa + (size_t)(q0 + 16 * qb) * HSP + 16 * c;
                fa_zero(acc);
                if (kt != split) { fa_load_acc(acc, dst, HSP); }
                for (int kk = 0; kk < NK; kk++) {
                    FaB<FaRow> kb;
                    fa_load(kb, Ks + 16 * kk * L::LDX + 16 * c, L::LDX);
                    fa_mma(acc, dsa[kk], kb);
                }
                fa_store_acc(dst, acc, HSP);
            }
            __syncthreads();  // dS^T is read before the next step writes it
        }
        // dK and dV rows of this key tile into dqkv, staged in fp32 where the keys and values were
        float* stage = (float*)(sm + L::kv) + r0 * L::LDO;
        floatX* dkrows = dqkv + (size_t)b * T * stride + C + h * HS;
        fa_store_rows<HSP>(dkrows, stride, dk, stage, L::LDO, k0 + r0, T, HS, wide);
        __syncwarp(0xffffffffu);
        fa_store_rows<HSP>(dkrows + C, stride, dv, stage, L::LDO, k0 + r0, T, HS, wide);
    }
}

// dQ = the slices whose first key tile is at or before t, summed in split order; a thread per FA_VEC channels of a row
template <int HSP>
__global__ void flash_backward_dq_kernel(floatX* dqkv, const float* dq_acc, int B, int T, int NH, int HS, int nsplits,
                                         bool wide) {
    constexpr int per_row = HSP / FA_VEC, BQ = FaBwd<HSP>::BQ;
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x, row = i / per_row;
    int c = (int)(i % per_row) * FA_VEC, t = (int)(row % T), bh = (int)(row / T), b = bh / NH, h = bh % NH;
    if (i >= (long)B * NH * T * per_row || c >= HS) { return; }
    int Tp = (T + BQ - 1) / BQ * BQ, splits = t / FA_KEYS + 1 < nsplits ? t / FA_KEYS + 1 : nsplits;
    float sum[FA_VEC] = {};
    for (int s = 0; s < splits; s++) {
        const float* a = dq_acc + (((size_t)s * B * NH + bh) * Tp + t) * HSP + c;
        for (int k = 0; k < FA_VEC; k += 4) {
            FaQuad<float> v = *(const FaQuad<float>*)(a + k);
            for (int e = 0; e < 4; e++) { sum[k + e] += v.v[e]; }
        }
    }
    fa_store_vec(dqkv + ((size_t)b * T + t) * 3 * NH * HS + h * HS + c, sum, HS - c, wide);
}

// ----------------------------------------------------------------------------
// host side

// the kernels and sizes of one padded head size: the one table of the four instantiations
struct FaConfig {
    int hsp, bwd_queries;  // padded head size, queries per backward step
    size_t fwd_smem, bwd_smem;
    decltype(&flash_forward_kernel<16>) forward;
    decltype(&flash_backward_kv_kernel<16>) backward_kv;
    decltype(&flash_backward_dq_kernel<16>) backward_dq;
};
template <int HSP>
static const FaConfig fa_config = {HSP, FaBwd<HSP>::BQ, FaFwd<HSP>::bytes, FaBwd<HSP>::bytes, flash_forward_kernel<HSP>,
                                   flash_backward_kv_kernel<HSP>, flash_backward_dq_kernel<HSP>};

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
    size_t need = std::max(k->fwd_smem, k->bwd_smem);
    if (need <= (size_t)limit) {
        const cudaFuncAttribute smem = cudaFuncAttributeMaxDynamicSharedMemorySize;
        cudaCheck(cudaFuncSetAttribute((const void*)k->forward, smem, (int)k->fwd_smem));
        cudaCheck(cudaFuncSetAttribute((const void*)k->backward_kv, smem, (int)k->bwd_smem));
        return 1;
    }
    snprintf(why, cap, "head size %d needs %zu bytes of shared memory per block; this GPU allows %d", HS, need, limit);
    return 0;
}

// the backward's dQ splits: enough for FA_BACKWARD_BLOCKS, at most half the key tiles (two per block where there are)
static inline int flash_dq_splits(int BNH, int T) {
    return std::min(ceil_div(FA_BACKWARD_BLOCKS, BNH), (ceil_div(T, FA_KEYS) + 1) / 2);
}

// the floats of dq_acc (splits, B*NH, T padded to query steps, HSP) for flash_dq_splits at every batch up to B
// (fewer rows may take more splits; a shorter T no more) and for forced_splits at B (0: none)
static inline size_t flash_dq_acc_floats(int B, int NH, int T, int HS, int forced_splits) {
    const FaConfig* k = flash_config(HS);
    size_t slices = (size_t)forced_splits * B;  // batch size times splits, the most of it
    for (int b = 1; b <= B; b++) { slices = std::max(slices, (size_t)b * flash_dq_splits(b * NH, T)); }
    return k ? slices * NH * ((size_t)ceil_div(T, k->bwd_queries) * k->bwd_queries) * k->hsp : 0;
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

// dqkv (B, T, 3C; all overwritten) from dout = dL/d(attention output rows); out, lse: the forward's; D, dq_acc: scratch
static void flash_attention_backward(floatX* dqkv, float* dq_acc, float* D, const floatX* dout, const floatX* qkv,
                                     const floatX* out, const float* lse, int B, int T, int C, int NH, int nsplits) {
    int HS = C / NH;
    bool wide = flash_wide(HS, dqkv, dout, qkv, out);
    const FaConfig* k = flash_config(HS);
    auto backward_kv = k->backward_kv;
    auto backward_dq = k->backward_dq;
    flash_backward_dot_kernel<<<ceil_div((long)B * T * NH, 256), 256>>>(D, dout, out, B, T, NH, HS, wide);
    cudaCheckLaunch();
    dim3 grid(B * NH, nsplits);
    float scale = 1.0f / sqrtf((float)HS);
    backward_kv<<<grid, FA_THREADS, k->bwd_smem>>>(dqkv, dq_acc, lse, D, qkv, dout, T, NH, HS, nsplits, scale, wide);
    cudaCheckLaunch();
    backward_dq<<<ceil_div((long)B * NH * T * k->hsp / FA_VEC, 256), 256>>>(dqkv, dq_acc, B, T, NH, HS, nsplits, wide);
    cudaCheckLaunch();
}

#endif  // ATTENTION_CUH
