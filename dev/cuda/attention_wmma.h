/*
dev/cuda/attention_wmma.h: the WMMA layer of attention_forward.cu's version 4 (attention_fwd_wmma.h) and
attention_backward.cu's version 3 (attention_bwd_wmma.h): 16 x 16 x 16 tile products on nvcuda::wmma fragments (bf16
operands, fp32 accumulators) where the trainer's attention.cuh (included first) runs tensor cores (FA_MMA), and the
same calls as plain fp32 loops otherwise (the FP32 build). WMMA hides its fragments' layout: a row-index fragment
(fa_fill_index_tile, fa_row, fa_col) tells where each accumulator element lies.
*/
#ifndef DEV_CUDA_ATTENTION_WMMA_H
#define DEV_CUDA_ATTENTION_WMMA_H

#ifdef FA_MMA
#include <mma.h>
#endif

// 4 values of F, one aligned load or store
template <typename F> struct alignas(4 * sizeof(F)) FaQuad { F v[4]; };

// ----------------------------------------------------------------------------
// tile products: a 16 x 16 fp32 accumulator += A (16 x 16) . B (16 x 16), one warp

#ifdef FA_MMA
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
// a warp's 16 x HSP accumulators (HSP / 16 fragments) -> rows of dst as fa_copy_rows, staged in fp32
template <int HSP>
__device__ __forceinline__ void fa_store_rows(floatX* dst, size_t stride, const FaAcc* acc, float* stage, int ld,
                                              int t0, int T, int HS, bool wide) {
    for (int c = 0; c < HSP / 16; c++) { fa_store_acc(stage + 16 * c, acc[c], ld); }
    fa_copy_rows<HSP>(dst, stride, stage, ld, t0, T, HS, wide);
}
#endif  // DEV_CUDA_ATTENTION_WMMA_H
