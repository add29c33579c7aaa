/*
attention.cuh: causal self-attention without the (B, NH, T, T) matrix, forward and backward, at
FlashAttention-2's design. A chapter of train_gpt2.cu (its only attention), included by it in
Part 1; dev/cuda/attention_forward.cu and attention_backward.cu include it too, to check and time
it beside the designs it replaced.

What the includer must define before `#include "attention.cuh"` (train_gpt2.cu in Part 0,
dev/cuda/common.h in the experiments):

    floatX                      type: float (FP32 build, ENABLE_FP32 defined) or __nv_bfloat16
    cudaCheck(call), cudaCheckLaunch()     macros: fatal on a CUDA error
    int ceil_div(long a, long b)           host: blocks needed for a elements

The idea. Row t of one head needs only its log-sum-exp lse_t = log sum_{t2 <= t} exp(s(t, t2)),
s = q_t . k_t2 / sqrt(HS), to recompute every probability later, p(t, t2) = exp(s(t, t2) - lse_t),
so the forward pass saves (B, NH, T) floats instead of (B, NH, T, T) probabilities, and no kernel
ever holds more of the T x T matrix than a tile.

The tiles. A block has 4 warps; each warp owns 16 rows (the WMMA tile height) of one (b, head):
16 queries in the forward pass, 16 keys in the backward pass, and streams the other side through
shared memory in tiles. q, k and v come straight from the qkv rows (head h at channels h*HS,
C + h*HS, 2C + h*HS) and results go straight into the (B, T, C) output rows and the dqkv rows. The
head size is a template parameter HSP, padded to 16, 32, 64 or 128 (channels past the real HS are
zero on load and never stored; head sizes above 128 are refused at start-up), and so are the tile
sizes (FaTiles): no run-time division in a loop. Tiles move in 16-byte vectors where HS is a
multiple of 8 (bf16; 4 in fp32) and the rows are aligned, through registers: the next tile's loads
are issued before the current tile's math and written to the other of two shared buffers after
it (fa_fetch, fa_put); other head sizes copy one element at a time. The tile products
    S (16 x 16) = A (16 x HSP) . B^T  and  O (16 x HSP) += P (16 x n) . V
run on tensor cores through WMMA (bf16 inputs, fp32 accumulation) in the bf16 build, and as plain
fp32 loops behind the same small functions (fa_load, fa_mma, ...) in the FP32 build, whose job is
parity. Accumulators stay in fragments between tiles. Where an accumulator needs each element's
row (the online-softmax rescale) or column (the causal mask, lse and D per query), an index
fragment tells it: loaded once from a 16 x 16 tile holding r * 16 + c, its element i says where
element i of every accumulator fragment is, since load, mma and store of one fragment type agree
on the (unspecified) layout. No code depends on that layout.

Forward (flash_forward_kernel; block: 64 queries of one head, key tiles of 64, 32 at HSP 128).
Per key tile, each warp: S = Q K^T (Q fragments loaded once), stored to shared memory; then the
online softmax with two lanes per row, each reading its half of the row with 16-byte loads:
    m' = max(m, max_j s_j),  p_j = 2^(s_j - m'),  l = l 2^(m - m') + sum_j p_j   (log2 units: s
scaled by log2(e) / sqrt(HS), keys above the query masked), two shuffles per row; P rounded to
floatX into shared memory, the row factors 2^(m - m') beside it; O = O 2^(m - m') + P V on the
fragments. At the end out = O / l and lse = (m + log2 l) ln 2. The blocks with the most key tiles
(the last queries) start first.

Backward. D_t = sum_c dO[t][c] O[t][c] (flash_backward_dot_kernel), then FlashAttention-2's five
tile products per (query tile, key tile) pair in one kernel (flash_backward_kv_kernel; block: 64
keys of one head, query steps of 64, 16 at HSP 128), for each query tile from the diagonal on:
    S^T = K Q^T, dP^T = V dO^T                     (K, V fragments loaded once per key tile)
    P^T = 2^(S^T scale log2(e) - lse log2(e)),  dS^T = P^T (dP^T - D) scale    (in registers)
    dV += P^T dO,  dK += dS^T Q                    (accumulators in fragments over the query tiles)
    dQ(query tile) += dS K                         (all four warps' dS^T: one block barrier)
dK and dV go to dqkv once per key tile. dQ sums over key tiles, which other blocks own: instead of
atomics, each block adds its contributions into an fp32 slice of dq_acc that only it writes. The
block of split s owns the key tiles s, s + nsplits, ... of its head in turn; the first one stores
into the slice, the later ones add to it, each query tile in key-tile order. Then
flash_backward_dq_kernel sums the slices in split order into dqkv: row t holds the splits whose
first key tile is at or before it. nsplits (flash_dq_splits) depends on B*NH and T only, never on
the GPU, and every sum runs in a fixed order, so the gradients are bit-identical between runs
and GPUs of any size.

What each kernel costs, at d12 (C 768, NH 12, HS 64), B 64, T 1024, per layer; lower-bound time
at H100 SXM's 3.35 TB/s and 989 dense bf16 TFLOP/s (the larger of bytes / bandwidth and flops /
peak). Bytes are what must cross HBM (each tensor once); flops are the tensor-core work executed,
masked halves of diagonal tiles included (136 of 256 tile pairs per head):
    flash_forward_kernel        109.5 GFLOP (103.2 causal)    406 MB: q, k, v 302, out 101, lse 3
                                lower bound 0.121 ms (memory; flops alone 0.111 ms). The key and
                                value tiles are read by every query tile: 1711 MB from L2.
    flash_backward_dot_kernel     0.1 GFLOP                   205 MB: dO, out 201, D 3
                                lower bound 0.061 ms
    flash_backward_kv_kernel    273.8 GFLOP                   610 MB: q, k, v 302, dO 101, lse and D 6,
                                dK and dV 201; lower bound 0.277 ms (flops). The dQ slices (2
                                splits here) add 1711 MB of fp32 writes and 1321 MB of reads back:
                                3643 MB in all, 1.087 ms, where they miss L2 (the 264 blocks
                                resident at 2 per SM sweep up to 67 MB of slices; L2 holds 50 MB)
    flash_backward_dq_kernel      0 GFLOP                     491 MB: the slices 390, dQ 101
                                lower bound 0.146 ms
(The T x T path moved (B, NH, T, T) bf16 tensors several times: 1.6 GB per tensor here.)
*/
#ifndef ATTENTION_CUH
#define ATTENTION_CUH

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <type_traits>
#include <cuda_runtime.h>

// tensor cores for bf16 tiles where the GPU has them (sm_80 on); fp32 loops otherwise (the FP32
// build, and a device pass for an older architecture, which the bf16 build refuses to run on)
#if !defined(ENABLE_FP32) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800)
#define FA_WMMA 1
#include <mma.h>
#endif

// loop unrolling for nvcc (a host compiler would warn about the pragma): a loop over fragments or
// registers unrolls fully; FA_ROLLED keeps a loop over shared-memory tiles rolled, which costs
// nothing there and keeps the compiler from hoisting every tile's loads at once (registers)
#ifdef __CUDACC__
#define FA_UNROLLED _Pragma("unroll")
#define FA_ROLLED _Pragma("unroll 1")
#else
#define FA_UNROLLED
#define FA_ROLLED
#endif

// ----------------------------------------------------------------------------
// sizes

#define FA_WARPS 4                  // warps per block
#define FA_THREADS (FA_WARPS * 32)
#define FA_ROWS 16                  // rows of a tile per warp (the WMMA tile height)
#define FA_QUERIES (FA_WARPS * FA_ROWS)  // forward: queries per block (64)
#define FA_KEYS (FA_WARPS * FA_ROWS)     // backward: keys per block (64)
#define FA_MAX_HS 128                    // the largest head size (padded sizes 16, 32, 64, 128)
// the backward grid aims at this many blocks (B*NH heads times the dQ splits): several waves at two
// blocks per SM on a GPU of 100 to 150 SMs. A constant, so the splits depend on B*NH and T only.
#define FA_BACKWARD_BLOCKS 1024
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

// the tile sizes of a padded head size HSP (a multiple of 16): keys per forward tile, queries per
// backward step; smaller at 128 so that a tile's registers and shared memory still fit
template <int HSP>
struct FaTiles {
    static_assert(HSP % 16 == 0 && HSP <= FA_MAX_HS, "padded head sizes: multiples of 16 up to FA_MAX_HS");
    static constexpr int fwd_keys = HSP <= 64 ? 64 : 32;
    static constexpr int bwd_queries = HSP <= 64 ? 64 : 16;
    static constexpr bool kv_in_registers = HSP <= 64;  // backward: the block's K and V as fragments, else read from shared memory
    static constexpr int fwd_min_blocks = HSP <= 64 ? 3 : 2;  // forward blocks per SM the registers must allow
};

// 16 bytes of floatX (8 bf16 or 4 fp32): one load or store; 4 of them: a quarter of a P row chunk
#define FA_VEC ((int)(16 / sizeof(floatX)))
struct alignas(16) FaVec {
    floatX v[FA_VEC];
};
struct alignas(4 * sizeof(floatX)) FaQuad {
    floatX v[4];
};

// ----------------------------------------------------------------------------
// tile products: a 16 x 16 fp32 accumulator += A (16 x 16) . B (16 x 16), one warp

#ifdef FA_WMMA
typedef nvcuda::wmma::row_major FaRow;
typedef nvcuda::wmma::col_major FaCol;
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> FaAcc;
template <typename L>
using FaA = nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, L>;
template <typename L>
using FaB = nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, L>;

template <typename F>
__device__ __forceinline__ void fa_load(F& f, const floatX* p, int ld) { nvcuda::wmma::load_matrix_sync(f, p, ld); }
template <typename FA, typename FB>
__device__ __forceinline__ void fa_mma(FaAcc& d, const FA& a, const FB& b) { nvcuda::wmma::mma_sync(d, a, b, d); }
__device__ __forceinline__ void fa_zero(FaAcc& d) { nvcuda::wmma::fill_fragment(d, 0.0f); }
__device__ __forceinline__ void fa_load_acc(FaAcc& d, const float* p, int ld) {
    nvcuda::wmma::load_matrix_sync(d, p, ld, nvcuda::wmma::mem_row_major);
}
__device__ __forceinline__ void fa_store_acc(float* p, const FaAcc& d, int ld) {
    nvcuda::wmma::store_matrix_sync(p, d, ld, nvcuda::wmma::mem_row_major);
}
#else
// Without tensor cores the same calls run as plain fp32 loops. An accumulator holds 8 elements per
// lane (element e of lane l is tile element e * 32 + l, row-major); an A or B operand is only where
// its tile lies in shared memory, which the product reads (so the tile must stay put until then).
struct FaRow {};
struct FaCol {};
struct FaAcc {
    static constexpr int num_elements = 8;
    float x[8];
};
template <typename L>
struct FaOperand {
    const floatX* p;
    int ld;
    __device__ __forceinline__ float at(int r, int c) const {
        return (float)(std::is_same<L, FaCol>::value ? p[r + c * ld] : p[r * ld + c]);
    }
};
template <typename L>
using FaA = FaOperand<L>;
template <typename L>
using FaB = FaOperand<L>;

template <typename L>
__device__ __forceinline__ void fa_load(FaOperand<L>& f, const floatX* p, int ld) {
    f.p = p;
    f.ld = ld;
}
template <typename LA, typename LB>
__device__ __forceinline__ void fa_mma(FaAcc& d, const FaOperand<LA>& a, const FaOperand<LB>& b) {
    for (int e = 0; e < 8; e++) {
        int i = e * 32 + threadIdx.x % 32, r = i >> 4, c = i & 15;
        float sum = d.x[e];
        for (int k = 0; k < 16; k++) { sum += a.at(r, k) * b.at(k, c); }
        d.x[e] = sum;
    }
}
__device__ __forceinline__ void fa_zero(FaAcc& d) {
    for (int e = 0; e < 8; e++) { d.x[e] = 0.0f; }
}
__device__ __forceinline__ void fa_load_acc(FaAcc& d, const float* p, int ld) {
    for (int e = 0; e < 8; e++) {
        int i = e * 32 + threadIdx.x % 32;
        d.x[e] = p[(i >> 4) * ld + (i & 15)];
    }
}
__device__ __forceinline__ void fa_store_acc(float* p, const FaAcc& d, int ld) {
    for (int e = 0; e < 8; e++) {
        int i = e * 32 + threadIdx.x % 32;
        p[(i >> 4) * ld + (i & 15)] = d.x[e];
    }
}
#endif

// The row and column of each accumulator element. CUDA leaves the fragment layout unspecified, but
// load, mma and store of one fragment type agree on it: loaded from a 16 x 16 tile whose element
// (r, c) holds r * 16 + c, element i of this fragment tells where element i of every accumulator is.
__device__ __forceinline__ void fa_fill_index_tile(float* tile) {
    for (int e = threadIdx.x; e < 256; e += blockDim.x) { tile[e] = (float)e; }
}
__device__ __forceinline__ int fa_row(const FaAcc& idx, int i) { return (int)idx.x[i] >> 4; }
__device__ __forceinline__ int fa_col(const FaAcc& idx, int i) { return (int)idx.x[i] & 15; }

// ----------------------------------------------------------------------------
// tiles between global and shared memory. ROWS rows of HSP channels (HS real ones, the rest zero)
// of src (row stride `stride`) from row t0 on; rows at or past T are zero. With 16-byte vectors
// (wide: HS % FA_VEC == 0 and the rows 16-byte aligned) they pass through registers: fa_fetch
// issues the loads of this thread's vectors, fa_put writes them into shared memory, so a kernel
// fetches the next tile, computes on the current one, then puts it: the loads are in flight during
// the math. Other head sizes copy one element at a time in fa_put (no prefetch: it would cost the
// registers of both paths).

template <int ROWS, int HSP>
struct FaTileRegs {
    static constexpr int per_row = HSP / FA_VEC;  // vectors per row
    static constexpr int count = ROWS * per_row / FA_THREADS;
    static_assert(ROWS * per_row % FA_THREADS == 0, "whole vectors per thread");
    FaVec v[count];
};

template <int ROWS, int HSP>
__device__ __forceinline__ void fa_fetch(FaTileRegs<ROWS, HSP>& r, const floatX* src, size_t stride, int t0, int T,
                                         int HS, bool wide) {
    typedef FaTileRegs<ROWS, HSP> R;
    if (!wide) { return; }
    FA_UNROLLED
    for (int i = 0; i < R::count; i++) {
        int e = threadIdx.x + i * FA_THREADS, row = e / R::per_row, c = e % R::per_row * FA_VEC, t = t0 + row;
        if (t < T && c < HS) {
            r.v[i] = *(const FaVec*)(src + (size_t)t * stride + c);
        } else {
            for (int k = 0; k < FA_VEC; k++) { r.v[i].v[k] = (floatX)0.0f; }
        }
    }
}

// the tile into shared memory (leading dimension ld): the fetched vectors, or (not wide) the copy
template <int ROWS, int HSP>
__device__ __forceinline__ void fa_put(const FaTileRegs<ROWS, HSP>& r, floatX* dst, int ld, const floatX* src,
                                       size_t stride, int t0, int T, int HS, bool wide) {
    typedef FaTileRegs<ROWS, HSP> R;
    if (wide) {
        FA_UNROLLED
        for (int i = 0; i < R::count; i++) {
            int e = threadIdx.x + i * FA_THREADS, row = e / R::per_row, c = e % R::per_row * FA_VEC;
            *(FaVec*)(dst + row * ld + c) = r.v[i];
        }
        return;
    }
    for (int e = threadIdx.x; e < ROWS * HSP; e += FA_THREADS) {
        int row = e / HSP, c = e % HSP, t = t0 + row;
        dst[row * ld + c] = t < T && c < HS ? src[(size_t)t * stride + c] : (floatX)0.0f;
    }
}

// ROWS rows of fp32 accumulators in shared memory (row stride ld) -> floatX rows [t0, t0 + ROWS) of
// dst, channels below HS, rows below T; one warp
template <int ROWS, int HSP>
__device__ __forceinline__ void fa_write_rows(floatX* dst, size_t stride, const float* acc, int ld, int t0, int T,
                                              int HS, bool wide) {
    constexpr int per_row = HSP / FA_VEC;
    for (int e = threadIdx.x % 32; e < ROWS * per_row; e += 32) {
        int row = e / per_row, c = e % per_row * FA_VEC, t = t0 + row;
        if (t >= T) { continue; }
        const float* a = acc + row * ld + c;
        floatX* p = dst + (size_t)t * stride + c;
        if (wide) {
            if (c < HS) {
                FaVec v;
                for (int k = 0; k < FA_VEC; k++) { v.v[k] = (floatX)a[k]; }
                *(FaVec*)p = v;
            }
        } else {
            for (int k = 0; k < FA_VEC; k++) {
                if (c + k < HS) { p[k] = (floatX)a[k]; }
            }
        }
    }
}

// shared-memory regions, each 128-byte aligned; a kernel's layout is a list of region sizes
__host__ __device__ constexpr size_t fa_round(size_t bytes) { return (bytes + 127) / 128 * 128; }

// ----------------------------------------------------------------------------
// forward

// the forward kernel's shared memory (bytes): the block's queries, two buffers of (keys, values),
// per warp its scores (fp32) and probabilities (floatX), per-row factors, the index tile
template <int HSP>
struct FaForwardSmem {
    static constexpr int BC = FaTiles<HSP>::fwd_keys;
    static constexpr int LDX = HSP + 8, LDS = BC + 8, LDP = BC + 8, LDO = HSP + 4;  // leading dimensions
    static constexpr size_t q = 0;
    static constexpr size_t kv = q + fa_round((size_t)FA_QUERIES * LDX * sizeof(floatX));  // [buffer][k, v]
    static constexpr size_t s = kv + fa_round((size_t)4 * BC * LDX * sizeof(floatX));
    static constexpr size_t p = s + fa_round((size_t)FA_QUERIES * LDS * sizeof(float));
    static constexpr size_t rowf = p + fa_round((size_t)FA_QUERIES * LDP * sizeof(floatX));
    static constexpr size_t idx = rowf + fa_round((size_t)FA_QUERIES * sizeof(float));
    static constexpr size_t bytes = idx + fa_round(256 * sizeof(float)) + 128;  // + slack to align the base
    // the output rows (fp32, per warp 16 x LDO) are staged in the (k, v) buffers once the loop is over
    static_assert((size_t)FA_QUERIES * LDO * sizeof(float) <= s - kv, "output staging fits the (k, v) buffers");
};

__device__ __forceinline__ unsigned char* fa_smem_base(void* smem) {
    return (unsigned char*)smem + (128 - (uintptr_t)smem % 128) % 128;
}

// Block (b * NH + h, query tile counted from the last: the longest rows start first); 4 warps of 16
// query rows each. out (B, T, C) rows, lse (B, NH, T) in natural log.
template <int HSP>
__global__ void __launch_bounds__(FA_THREADS, FaTiles<HSP>::fwd_min_blocks)
    flash_forward_kernel(floatX* out, float* lse, const floatX* qkv, int T, int NH, int HS, float scale_log2, bool wide) {
    typedef FaForwardSmem<HSP> L;
    constexpr int BC = L::BC, NF = HSP / 16;
    extern __shared__ float4 fa_dynamic_smem[];
    unsigned char* sm = fa_smem_base(fa_dynamic_smem);
    floatX* Qs = (floatX*)(sm + L::q);
    floatX* KV = (floatX*)(sm + L::kv);  // buffer u: keys at KV + 2u * BC * LDX, values after them
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * FA_ROWS;
    float* S = (float*)(sm + L::s) + r0 * L::LDS;           // this warp's 16 score rows
    floatX* P = (floatX*)(sm + L::p) + r0 * L::LDP;         // and probability rows
    float* rowf = (float*)(sm + L::rowf) + r0;              // a factor per row (rescale, then 1/l)
    float* idx_tile = (float*)(sm + L::idx);

    int bh = blockIdx.x, b = bh / NH, h = bh % NH, C = NH * HS;
    int q0 = (gridDim.y - 1 - blockIdx.y) * FA_QUERIES;
    size_t stride = 3 * (size_t)C;
    const floatX* qrows = qkv + (size_t)b * T * stride + h * HS;
    int last = (q0 + FA_QUERIES < T ? q0 + FA_QUERIES : T) - 1;  // the block's last query: keys up to it
    int ntiles = last / BC + 1;

    fa_fill_index_tile(idx_tile);
    {
        FaTileRegs<FA_QUERIES, HSP> qr;
        fa_fetch(qr, qrows, stride, q0, T, HS, wide);
        fa_put(qr, Qs, L::LDX, qrows, stride, q0, T, HS, wide);
    }
    FaTileRegs<BC, HSP> kr, vr;
    fa_fetch(kr, qrows + C, stride, 0, T, HS, wide);
    fa_fetch(vr, qrows + 2 * C, stride, 0, T, HS, wide);
    fa_put(kr, KV, L::LDX, qrows + C, stride, 0, T, HS, wide);
    fa_put(vr, KV + BC * L::LDX, L::LDX, qrows + 2 * C, stride, 0, T, HS, wide);
    __syncthreads();

    FaAcc idx, o[NF];
    fa_load_acc(idx, idx_tile, 16);
    FaA<FaRow> qf[NF];
    for (int c = 0; c < NF; c++) {
        fa_load(qf[c], Qs + r0 * L::LDX + 16 * c, L::LDX);
        fa_zero(o[c]);
    }
    // the row statistics: lanes 2r and 2r + 1 share row r of the warp, each reducing the 4-column
    // chunks 8i + 4 * half of it; both keep the row's running max m (log2 units) and sum l
    const int rr = lane >> 1, half = lane & 1, t = q0 + r0 + rr;
    float m_run = -INFINITY, l_run = 0.0f;

    for (int kt = 0; kt < ntiles; kt++) {
        const int k0 = kt * BC;
        const floatX* Ks = KV + (kt & 1) * 2 * BC * L::LDX;
        const floatX* Vs = Ks + BC * L::LDX;
        if (kt + 1 < ntiles) {  // the next tile's loads, in flight during this tile's math
            fa_fetch(kr, qrows + C, stride, k0 + BC, T, HS, wide);
            fa_fetch(vr, qrows + 2 * C, stride, k0 + BC, T, HS, wide);
        }
        // S = Q K^T for the warp's 16 rows
        FA_ROLLED
        for (int j = 0; j < BC / 16; j++) {
            FaAcc s;
            fa_zero(s);
            for (int c = 0; c < NF; c++) {
                FaB<FaCol> kb;
                fa_load(kb, Ks + 16 * j * L::LDX + 16 * c, L::LDX);
                fa_mma(s, qf[c], kb);
            }
            fa_store_acc(S + 16 * j, s, L::LDS);
        }
        __syncwarp(0xffffffffu);
        // online softmax of row rr: scaled, masked (key > query: -inf), the new max, P, the sum
        float mx = -INFINITY;
        const float* Srow = S + rr * L::LDS;
        for (int i = 0; i < BC / 8; i++) {
            int col = 8 * i + 4 * half;
            float4 a = *(const float4*)(Srow + col);
            float a4[4] = {a.x, a.y, a.z, a.w};
            for (int e = 0; e < 4; e++) {
                if (k0 + col + e <= t) { mx = fmaxf(mx, a4[e]); }
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)) * scale_log2;
        float m_new = fmaxf(m_run, mx);  // finite: key 0 is in the first tile of every row
        float corr = exp2f(m_run - m_new), sum = 0.0f;
        for (int i = 0; i < BC / 8; i++) {
            int col = 8 * i + 4 * half;
            float4 a = *(const float4*)(Srow + col);
            float a4[4] = {a.x, a.y, a.z, a.w};
            FaQuad pq;
            for (int e = 0; e < 4; e++) {
                float p = k0 + col + e <= t ? exp2f(a4[e] * scale_log2 - m_new) : 0.0f;
                pq.v[e] = (floatX)p;
                sum += p;
            }
            *(FaQuad*)(P + rr * L::LDP + col) = pq;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l_run = l_run * corr + sum;
        m_run = m_new;
        if (half == 0) { rowf[rr] = corr; }
        __syncwarp(0xffffffffu);
        // O = O * corr + P V
        for (int i = 0; i < FaAcc::num_elements; i++) {
            float f = rowf[fa_row(idx, i)];
            for (int c = 0; c < NF; c++) { o[c].x[i] *= f; }
        }
        FA_ROLLED
        for (int kk = 0; kk < BC / 16; kk++) {
            FaA<FaRow> pa;
            fa_load(pa, P + 16 * kk, L::LDP);
            for (int c = 0; c < NF; c++) {
                FaB<FaRow> vb;
                fa_load(vb, Vs + 16 * kk * L::LDX + 16 * c, L::LDX);
                fa_mma(o[c], pa, vb);
            }
        }
        if (kt + 1 < ntiles) {
            floatX* next = KV + ((kt + 1) & 1) * 2 * BC * L::LDX;
            fa_put(kr, next, L::LDX, qrows + C, stride, k0 + BC, T, HS, wide);
            fa_put(vr, next + BC * L::LDX, L::LDX, qrows + 2 * C, stride, k0 + BC, T, HS, wide);
        }
        __syncthreads();  // the next tile is in place; this one's buffer is free
    }
    // out = O / l, lse = (m + log2 l) ln 2
    __syncwarp(0xffffffffu);
    if (half == 0) {
        rowf[rr] = 1.0f / l_run;
        if (t < T) { lse[(size_t)bh * T + t] = (m_run + log2f(l_run)) * FA_LN2; }
    }
    __syncwarp(0xffffffffu);
    float* stage = (float*)(sm + L::kv) + r0 * L::LDO;
    for (int i = 0; i < FaAcc::num_elements; i++) {
        float f = rowf[fa_row(idx, i)];
        for (int c = 0; c < NF; c++) { o[c].x[i] *= f; }
    }
    for (int c = 0; c < NF; c++) { fa_store_acc(stage + 16 * c, o[c], L::LDO); }
    __syncwarp(0xffffffffu);
    fa_write_rows<FA_ROWS, HSP>(out + (size_t)b * T * C + h * HS, C, stage, L::LDO, q0 + r0, T, HS, wide);
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

// the dK/dV kernel's shared memory (bytes): the block's keys and values; two buffers of the query
// step's (q, dO, lse, D); P^T and dS^T (keys x queries, floatX); the index tile
template <int HSP>
struct FaBackwardSmem {
    static constexpr int BQ = FaTiles<HSP>::bwd_queries;
    static constexpr int LDX = HSP + 8, LDP = BQ + 8, LDO = HSP + 4;
    static constexpr size_t kv = 0;  // keys, then values
    static constexpr size_t qdo = kv + fa_round((size_t)2 * FA_KEYS * LDX * sizeof(floatX));  // [buffer][q, dO]
    static constexpr size_t stats = qdo + fa_round((size_t)4 * BQ * LDX * sizeof(floatX));   // [buffer][lse log2, D]
    static constexpr size_t pt = stats + fa_round((size_t)4 * BQ * sizeof(float));           // P^T, then dS^T
    static constexpr size_t idx = pt + fa_round((size_t)2 * FA_KEYS * LDP * sizeof(floatX));
    static constexpr size_t bytes = idx + fa_round(256 * sizeof(float)) + 128;
    // dK and dV (fp32, per warp 16 x LDO) are staged where the keys and values were, after the query loop
    static_assert((size_t)FA_KEYS * LDO * sizeof(float) <= qdo - kv, "dK/dV staging fits the (k, v) tiles");
};

// the backward kernel's next query step: q and dO rows [q0, q0 + BQ) (fa_fetch), and for threads
// 0 .. 2BQ-1 the lse (log2 units; +infinity past T, so P = 0 there) or D of one query
template <int BQ, int HSP>
__device__ __forceinline__ void fa_fetch_queries(FaTileRegs<BQ, HSP>& qr, FaTileRegs<BQ, HSP>& dr, float& stat,
                                                 const floatX* qrows, const floatX* dorows, const float* lse_h,
                                                 const float* D_h, int q0, int T, int C, int HS, bool wide) {
    fa_fetch(qr, qrows, 3 * (size_t)C, q0, T, HS, wide);
    fa_fetch(dr, dorows, C, q0, T, HS, wide);
    int t = q0 + threadIdx.x % BQ;
    if (threadIdx.x < BQ) {
        stat = t < T ? lse_h[t] * FA_LOG2E : INFINITY;
    } else if (threadIdx.x < 2 * BQ) {
        stat = t < T ? D_h[t] : 0.0f;
    }
}

// ... into buffer u of the shared (q, dO) tiles and (lse, D) rows (fa_put)
template <int BQ, int HSP>
__device__ __forceinline__ void fa_put_queries(const FaTileRegs<BQ, HSP>& qr, const FaTileRegs<BQ, HSP>& dr, float stat,
                                               floatX* QD, float* ST, int ldx, int u, const floatX* qrows,
                                               const floatX* dorows, int q0, int T, int C, int HS, bool wide) {
    fa_put(qr, QD + 2 * u * BQ * ldx, ldx, qrows, 3 * (size_t)C, q0, T, HS, wide);
    fa_put(dr, QD + (2 * u + 1) * BQ * ldx, ldx, dorows, C, q0, T, HS, wide);
    if (threadIdx.x < 2 * BQ) { ST[2 * u * BQ + threadIdx.x] = stat; }
}

// The dK/dV kernel. Block (b * NH + h, split): it owns the key tiles split, split + nsplits, ... of
// one head in turn, and for each walks the query tiles from the diagonal to the end: per warp 16 keys,
//     S^T = K Q^T, dP^T = V dO^T (in registers), P^T = exp(S^T scale - lse), dS^T = P^T (dP^T - D) scale,
//     dV += P^T dO, dK += dS^T Q (accumulators in registers across the query tiles),
// then the block's dQ contribution dS K for the query tile goes into its own fp32 slice of dq_acc
// (stored at its first key tile, added at later ones), which flash_backward_dq_kernel sums.
template <int HSP>
__global__ void __launch_bounds__(FA_THREADS, 2)
    flash_backward_kv_kernel(floatX* dqkv, float* dq_acc, const float* lse, const float* D, const floatX* qkv,
                             const floatX* dout, int T, int NH, int HS, int nsplits, float scale, bool wide) {
    typedef FaBackwardSmem<HSP> L;
    constexpr int BQ = L::BQ, NF = HSP / 16, NQ = BQ / 16, NK = FA_KEYS / 16;
    constexpr bool KV_REGS = FaTiles<HSP>::kv_in_registers;
    // the dQ tile's BQ/16 x NF fragments over the warps: FPW each, all in one 16-query row block
    constexpr int FPW = NQ * NF / FA_WARPS;
    static_assert(NQ * NF % FA_WARPS == 0 && NF % FPW == 0, "dQ fragments per warp in one row block");
    extern __shared__ float4 fa_dynamic_smem[];
    unsigned char* sm = fa_smem_base(fa_dynamic_smem);
    floatX* Ks = (floatX*)(sm + L::kv);
    floatX* Vs = Ks + FA_KEYS * L::LDX;
    floatX* QD = (floatX*)(sm + L::qdo);    // buffer u: q at QD + 2u * BQ * LDX, dO after it
    float* ST = (float*)(sm + L::stats);    // buffer u: lse (log2 units) at ST + 2u * BQ, D after it
    floatX* PT = (floatX*)(sm + L::pt);     // P^T (FA_KEYS x BQ)
    floatX* dST = PT + FA_KEYS * L::LDP;    // dS^T
    float* idx_tile = (float*)(sm + L::idx);
    int warp = threadIdx.x / 32, r0 = warp * FA_ROWS;

    int bh = blockIdx.x, b = bh / NH, h = bh % NH, C = NH * HS, split = blockIdx.y;
    size_t stride = 3 * (size_t)C;
    const floatX* qrows = qkv + (size_t)b * T * stride + h * HS;
    const floatX* dorows = dout + (size_t)b * T * C + h * HS;
    const float* lse_h = lse + (size_t)bh * T;
    const float* D_h = D + (size_t)bh * T;
    int nkt = (T + FA_KEYS - 1) / FA_KEYS, Tp = (T + BQ - 1) / BQ * BQ;
    float* dqa = dq_acc + ((size_t)split * gridDim.x + bh) * Tp * HSP;  // this block's slice (Tp, HSP)
    const float scale_log2 = scale * FA_LOG2E;
    fa_fill_index_tile(idx_tile);

    FaTileRegs<BQ, HSP> qr, dr;
    float stat = 0.0f;  // threads 0 .. 2BQ-1: lse (log2 units) or D of one query
    for (int kt = split; kt < nkt; kt += nsplits) {
        const int k0 = kt * FA_KEYS;
        __syncthreads();  // the previous key tile's last reads of shared memory are done
        {
            FaTileRegs<FA_KEYS, HSP> kr, vr;
            fa_fetch(kr, qrows + C, stride, k0, T, HS, wide);
            fa_fetch(vr, qrows + 2 * C, stride, k0, T, HS, wide);
            fa_put(kr, Ks, L::LDX, qrows + C, stride, k0, T, HS, wide);
            fa_put(vr, Vs, L::LDX, qrows + 2 * C, stride, k0, T, HS, wide);
        }
        // the first query tile: the one holding the diagonal (BQ divides FA_KEYS)
        fa_fetch_queries(qr, dr, stat, qrows, dorows, lse_h, D_h, k0, T, C, HS, wide);
        fa_put_queries(qr, dr, stat, QD, ST, L::LDX, 0, qrows, dorows, k0, T, C, HS, wide);
        __syncthreads();
        FaAcc idx, dk[NF], dv[NF];
        fa_load_acc(idx, idx_tile, 16);
        FaA<FaRow> kf[KV_REGS ? NF : 1], vf[KV_REGS ? NF : 1];
        for (int c = 0; c < NF; c++) {
            if constexpr (KV_REGS) {
                fa_load(kf[c], Ks + r0 * L::LDX + 16 * c, L::LDX);
                fa_load(vf[c], Vs + r0 * L::LDX + 16 * c, L::LDX);
            }
            fa_zero(dk[c]);
            fa_zero(dv[c]);
        }
        for (int q0 = k0, u = 0; q0 < T; q0 += BQ, u ^= 1) {
            const bool more = q0 + BQ < T;
            if (more) { fa_fetch_queries(qr, dr, stat, qrows, dorows, lse_h, D_h, q0 + BQ, T, C, HS, wide); }
            const floatX* Qs = QD + 2 * u * BQ * L::LDX;
            const floatX* dOs = Qs + BQ * L::LDX;
            const float* lse2 = ST + 2 * u * BQ;
            const float* Dq = lse2 + BQ;
            // S^T and dP^T, 16 queries at a time; P^T and dS^T into shared memory (floatX)
            for (int j = 0; j < NQ; j++) {
                FaAcc s, dp;
                fa_zero(s);
                fa_zero(dp);
                for (int c = 0; c < NF; c++) {
                    FaA<FaRow> ka, va;
                    if constexpr (KV_REGS) {
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
            if (more) { fa_put_queries(qr, dr, stat, QD, ST, L::LDX, u ^ 1, qrows, dorows, q0 + BQ, T, C, HS, wide); }
            __syncthreads();  // every warp's dS^T rows are in place (and the next query tile)
            // dQ (+)= dS K: this warp's FPW fragments of the BQ x HSP tile, all in query rows 16 qb..
            {
                const int f0 = warp * FPW, qb = f0 / NF, c0 = f0 % NF;
                FaA<FaCol> dsa[NK];  // dS = (dS^T)^T
                for (int kk = 0; kk < NK; kk++) { fa_load(dsa[kk], dST + 16 * kk * L::LDP + 16 * qb, L::LDP); }
                for (int c = c0; c < c0 + FPW; c++) {
                    FaAcc acc;
                    float* dst = dqa + (size_t)(q0 + 16 * qb) * HSP + 16 * c;
                    if (kt == split) {
                        fa_zero(acc);
                    } else {
                        fa_load_acc(acc, dst, HSP);
                    }
                    for (int kk = 0; kk < NK; kk++) {
                        FaB<FaRow> kb;
                        fa_load(kb, Ks + 16 * kk * L::LDX + 16 * c, L::LDX);
                        fa_mma(acc, dsa[kk], kb);
                    }
                    fa_store_acc(dst, acc, HSP);
                }
            }
            __syncthreads();  // dS^T is read before the next step writes it
        }
        // dK and dV rows of this key tile into dqkv, staged in fp32 where the keys and values were
        float* stage = (float*)(sm + L::kv) + r0 * L::LDO;
        floatX* dkrows = dqkv + (size_t)b * T * stride + C + h * HS;
        for (int c = 0; c < NF; c++) { fa_store_acc(stage + 16 * c, dk[c], L::LDO); }
        __syncwarp(0xffffffffu);
        fa_write_rows<FA_ROWS, HSP>(dkrows, stride, stage, L::LDO, k0 + r0, T, HS, wide);
        __syncwarp(0xffffffffu);
        for (int c = 0; c < NF; c++) { fa_store_acc(stage + 16 * c, dv[c], L::LDO); }
        __syncwarp(0xffffffffu);
        fa_write_rows<FA_ROWS, HSP>(dkrows + C, stride, stage, L::LDO, k0 + r0, T, HS, wide);
    }
}

// dQ = the sum over the splits of dq_acc, in split order, into dqkv (channels h*HS): one thread per
// FA_VEC channels of a (b, h, t) row. Row t holds contributions of the splits whose first key tile
// is at or before it: splits 0 .. min(nsplits, t / FA_KEYS + 1) - 1.
template <int HSP>
__global__ void flash_backward_dq_kernel(floatX* dqkv, const float* dq_acc, int B, int T, int NH, int HS, int nsplits,
                                         bool wide) {
    constexpr int per_row = HSP / FA_VEC, BQ = FaTiles<HSP>::bwd_queries;
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)B * NH * T * per_row) { return; }
    int c = (int)(i % per_row) * FA_VEC;
    long row = i / per_row;
    int t = (int)(row % T), bh = (int)(row / T), b = bh / NH, h = bh % NH;
    if (c >= HS) { return; }
    int Tp = (T + BQ - 1) / BQ * BQ, splits = t / FA_KEYS + 1 < nsplits ? t / FA_KEYS + 1 : nsplits;
    float sum[FA_VEC];
    for (int k = 0; k < FA_VEC; k++) { sum[k] = 0.0f; }
    for (int s = 0; s < splits; s++) {
        const float4* a = (const float4*)(dq_acc + (((size_t)s * B * NH + bh) * Tp + t) * HSP + c);
        for (int k = 0; k < FA_VEC / 4; k++) {
            float4 v = a[k];
            sum[4 * k] += v.x;
            sum[4 * k + 1] += v.y;
            sum[4 * k + 2] += v.z;
            sum[4 * k + 3] += v.w;
        }
    }
    floatX* dst = dqkv + ((size_t)b * T + t) * 3 * NH * HS + h * HS + c;
    if (wide) {
        FaVec v;
        for (int k = 0; k < FA_VEC; k++) { v.v[k] = (floatX)sum[k]; }
        *(FaVec*)dst = v;
    } else {
        for (int k = 0; k < FA_VEC && c + k < HS; k++) { dst[k] = (floatX)sum[k]; }
    }
}

// ----------------------------------------------------------------------------
// host side

// the padded head size the kernels run HS at (16, 32, 64 or 128), 0 past FA_MAX_HS
static inline int flash_padded_hs(int HS) {
    for (int p = 16; p <= FA_MAX_HS; p *= 2) {
        if (HS >= 1 && HS <= p) { return p; }
    }
    return 0;
}

// f(FaHS<HSP>()) for a padded head size known at run time: the one place that lists them
template <int HSP>
struct FaHS {
    static constexpr int value = HSP;
};
template <typename F>
static inline auto flash_at_padded_hs(int HSP, F f) {
    switch (HSP) {
        case 16: return f(FaHS<16>());
        case 32: return f(FaHS<32>());
        case 64: return f(FaHS<64>());
        default: return f(FaHS<FA_MAX_HS>());  // 128: callers check flash_padded_hs first
    }
}

// the shared memory of the two tile kernels (bytes), and the queries per backward step
static inline size_t flash_forward_smem(int HSP) {
    return flash_at_padded_hs(HSP, [](auto hs) { return FaForwardSmem<decltype(hs)::value>::bytes; });
}
static inline size_t flash_backward_smem(int HSP) {
    return flash_at_padded_hs(HSP, [](auto hs) { return FaBackwardSmem<decltype(hs)::value>::bytes; });
}
static inline int flash_backward_queries(int HSP) {
    return flash_at_padded_hs(HSP, [](auto hs) { return FaTiles<decltype(hs)::value>::bwd_queries; });
}

// whether the kernels take head size HS (no GPU needed): 0 and a reason (one line) if not
static int flash_head_size_supported(int HS, char* why, size_t cap) {
    if (flash_padded_hs(HS) == 0) {
        snprintf(why, cap, "head size %d is not supported: attention runs head sizes 1 to %d", HS, FA_MAX_HS);
        return 0;
    }
    return 1;
}

// ... and on this GPU (their shared memory per block)
static int flash_attention_supported(int HS, char* why, size_t cap) {
    if (!flash_head_size_supported(HS, why, cap)) { return 0; }
    int HSP = flash_padded_hs(HS), dev = 0, limit = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    size_t need = flash_forward_smem(HSP) > flash_backward_smem(HSP) ? flash_forward_smem(HSP) : flash_backward_smem(HSP);
    if (need > (size_t)limit) {
        snprintf(why, cap, "head size %d needs %zu bytes of shared memory per block; this GPU allows %d", HS, need, limit);
        return 0;
    }
    return 1;
}

// the dQ splits of the backward pass: enough blocks for FA_BACKWARD_BLOCKS, at most half the key
// tiles (rounded up: every block gets two key tiles where there are two)
static inline int flash_dq_splits(int BNH, int T) {
    int nkt = ceil_div(T, FA_KEYS), most = (nkt + 1) / 2, want = ceil_div(FA_BACKWARD_BLOCKS, BNH);
    return want < most ? want : most;
}

// the fp32 floats of the dQ accumulator a backward pass at (B, T) with nsplits splits needs:
// (nsplits, B*NH, T padded to whole query steps, HS padded)
static inline size_t flash_dq_acc_floats(int B, int NH, int T, int HS, int nsplits) {
    int HSP = flash_padded_hs(HS), BQ = flash_backward_queries(HSP);
    return (size_t)nsplits * B * NH * ((size_t)ceil_div(T, BQ) * BQ) * HSP;
}

// ... enough for any backward pass at up to (B, T) with flash_dq_splits (fewer rows may take more
// splits; T at most T takes no more)
static inline size_t flash_dq_acc_floats_upto(int B, int NH, int T, int HS) {
    size_t most = 0;
    for (int b = 1; b <= B; b++) {
        size_t n = flash_dq_acc_floats(b, NH, T, HS, flash_dq_splits(b * NH, T));
        most = n > most ? n : most;
    }
    return most;
}

// whether the kernels may use 16-byte accesses: HS a whole number of vectors, the tensors aligned
static inline bool flash_wide(int HS, const void* const* p, int n) {
    if (HS % FA_VEC != 0) { return false; }
    for (int i = 0; i < n; i++) {
        if ((uintptr_t)p[i] % 16 != 0) { return false; }
    }
    return true;
}

// the dynamic shared memory a kernel needs above 48 KiB is allowed once per kernel
template <typename K>
static void flash_allow_smem(K kernel, size_t bytes) {
    cudaCheck(cudaFuncSetAttribute((const void*)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

template <int HSP>
static void flash_forward_launch(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int HS, bool wide) {
    static bool allowed = false;
    if (!allowed) {
        flash_allow_smem(flash_forward_kernel<HSP>, FaForwardSmem<HSP>::bytes);
        allowed = true;
    }
    dim3 grid(B * NH, ceil_div(T, FA_QUERIES));
    float scale_log2 = 1.0f / sqrtf((float)HS) * FA_LOG2E;  // as the backward kernel forms it
    flash_forward_kernel<HSP><<<grid, FA_THREADS, FaForwardSmem<HSP>::bytes>>>(out, lse, qkv, T, NH, HS, scale_log2, wide);
    cudaCheckLaunch();
}

template <int HSP>
static void flash_backward_launch(floatX* dqkv, float* dq_acc, const float* D, const floatX* dout, const floatX* qkv,
                                  const float* lse, int B, int T, int NH, int HS, int nsplits, bool wide) {
    static bool allowed = false;
    if (!allowed) {
        flash_allow_smem(flash_backward_kv_kernel<HSP>, FaBackwardSmem<HSP>::bytes);
        allowed = true;
    }
    dim3 grid(B * NH, nsplits);
    flash_backward_kv_kernel<HSP><<<grid, FA_THREADS, FaBackwardSmem<HSP>::bytes>>>(
        dqkv, dq_acc, lse, D, qkv, dout, T, NH, HS, nsplits, 1.0f / sqrtf((float)HS), wide);
    cudaCheckLaunch();
    long threads = (long)B * NH * T * (HSP / FA_VEC);
    flash_backward_dq_kernel<HSP><<<ceil_div(threads, 256), 256>>>(dqkv, dq_acc, B, T, NH, HS, nsplits, wide);
    cudaCheckLaunch();
}

// out (B, T, C) and lse (B, NH, T) from qkv (B, T, 3C). HS = C / NH must be supported
// (flash_attention_supported; callers check once at start-up).
static void flash_attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    int HS = C / NH;
    const void* ptrs[] = {out, qkv};
    bool wide = flash_wide(HS, ptrs, 2);
    flash_at_padded_hs(flash_padded_hs(HS), [&](auto hs) {
        flash_forward_launch<decltype(hs)::value>(out, lse, qkv, B, T, NH, HS, wide);
    });
}

// dqkv (B, T, 3C; every element overwritten) from dout = dL/d(attention output rows). out and lse are
// the forward's; D (B, NH, T) and dq_acc (flash_dq_acc_floats) are scratch; nsplits: flash_dq_splits.
static void flash_attention_backward(floatX* dqkv, float* dq_acc, float* D, const floatX* dout, const floatX* qkv,
                                     const floatX* out, const float* lse, int B, int T, int C, int NH, int nsplits) {
    int HS = C / NH;
    const void* ptrs[] = {dqkv, dout, qkv, out};
    bool wide = flash_wide(HS, ptrs, 4);
    flash_backward_dot_kernel<<<ceil_div((long)B * T * NH, 256), 256>>>(D, dout, out, B, T, NH, HS, wide);
    cudaCheckLaunch();
    flash_at_padded_hs(flash_padded_hs(HS), [&](auto hs) {
        flash_backward_launch<decltype(hs)::value>(dqkv, dq_acc, D, dout, qkv, lse, B, T, NH, HS, nsplits, wide);
    });
}

#endif  // ATTENTION_CUH
