/*
dev/cuda/attention_bwd_wmma.h: version 3 of attention_backward.cu, a FlashAttention-2 backward on WMMA fragments
(attention_wmma.h) with the trainer's tiles and loaders (attention.cuh, included first). D = rowsum(dO O) is the
trainer's flash_backward_dot_kernel. wmma_backward_kv_kernel: a block owns 64 keys of one head (16 per warp) and walks
the query steps from the diagonal on with the five tile products S^T = K Q^T, dP^T = V dO^T, dV += P^T dO,
dK += dS^T Q, dQ += dS K; P^T and dS^T go through shared memory (WMMA fragments hide their layout, a row-index
fragment places each element); dK, dV stay in registers. dQ sums over key blocks: each block adds into its own fp32
slice of dq_acc (a split: the key tiles split, split + nsplits, ...), and wmma_backward_dq_kernel sums the slices in
split order (no atomics; the splits depend on B*NH and T only). Same outputs as the trainer's backward.
*/
#ifndef DEV_CUDA_ATTENTION_BWD_WMMA_H
#define DEV_CUDA_ATTENTION_BWD_WMMA_H

#include "attention_wmma.h"

#define WB_BACKWARD_BLOCKS 1024  // target blocks (heads x dQ splits), waves of 2 per SM on 100-150 SMs

// the dK/dV kernel's shared memory (byte offsets): keys, values; two buffers of a query step's (q, dO) and (lse, D);
// P^T and dS^T (keys x queries, floatX); the index tile
template <int HSP>
struct WbBwd {
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

// Block (b * NH + h, split): the key tiles split, split + nsplits, ... of one head, 16 keys per warp, dQ into its slice
template <int HSP>
__global__ void __launch_bounds__(FA_THREADS, 2)
    wmma_backward_kv_kernel(floatX* dqkv, float* dq_acc, const float* lse, const float* D, const floatX* qkv,
                             const floatX* dout, int T, int NH, int HS, int nsplits, float scale, bool wide) {
    typedef WbBwd<HSP> L;
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

    FaQueryStep<BQ, HSP, L::LDX> next;
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
__global__ void wmma_backward_dq_kernel(floatX* dqkv, const float* dq_acc, int B, int T, int NH, int HS, int nsplits,
                                         bool wide) {
    constexpr int per_row = HSP / FA_VEC, BQ = WbBwd<HSP>::BQ;
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

// the kernels and shared memory at head size HS (padded as the trainer pads it)
struct WbConfig {
    int hsp, bwd_queries;
    size_t smem;
    decltype(&wmma_backward_kv_kernel<16>) kv;
    decltype(&wmma_backward_dq_kernel<16>) dq;
};
template <int HSP>
static const WbConfig wb_config = {HSP, WbBwd<HSP>::BQ, WbBwd<HSP>::bytes, wmma_backward_kv_kernel<HSP>,
                                   wmma_backward_dq_kernel<HSP>};
static const WbConfig* wb_config_of(int HS) {
    switch (flash_config(HS)->hsp) {
    case 16: return &wb_config<16>;
    case 32: return &wb_config<32>;
    case 64: return &wb_config<64>;
    default: return &wb_config<FA_MAX_HS>;
    }
}

// the dQ splits: enough for WB_BACKWARD_BLOCKS, at most half the key tiles (two per block where there are)
static inline int wb_dq_splits(int BNH, int T) {
    return std::min(ceil_div(WB_BACKWARD_BLOCKS, BNH), (ceil_div(T, FA_KEYS) + 1) / 2);
}

// the floats of dq_acc (splits, B*NH, T padded to query steps, HSP) for nsplits
static inline size_t wb_dq_acc_floats(int B, int NH, int T, int HS, int nsplits) {
    const WbConfig* k = wb_config_of(HS);
    return (size_t)nsplits * B * NH * ((size_t)ceil_div(T, k->bwd_queries) * k->bwd_queries) * k->hsp;
}

// 1 where this GPU's shared memory per block takes the kv kernel at head size HS (1 to FA_MAX_HS), else 0 and why
static int wb_attention_supported(int HS, char* why, size_t cap) {
    int dev = 0, limit = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    size_t need = wb_config_of(HS)->smem;
    if (need <= (size_t)limit) { return 1; }
    snprintf(why, cap, "head size %d needs %zu bytes of shared memory per block; this GPU allows %d", HS, need, limit);
    return 0;
}

// as flash_attention_backward, with dq_acc (wb_dq_acc_floats) and nsplits; callers check flash_attention_supported
static void wmma_attention_backward(floatX* dqkv, float* dq_acc, float* D, const floatX* dout, const floatX* qkv,
                                    const floatX* out, const float* lse, int B, int T, int C, int NH, int nsplits) {
    int HS = C / NH;
    bool wide = flash_wide(HS, dqkv, dout, qkv, out);
    const WbConfig* k = wb_config_of(HS);
    static const WbConfig* allowed = NULL;  // the kernel whose shared memory allowance was set last
    if (allowed != k) {
        cudaCheck(cudaFuncSetAttribute((const void*)k->kv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)k->smem));
        allowed = k;
    }
    auto kv = k->kv;
    auto dq = k->dq;
    flash_backward_dot_kernel<<<ceil_div((long)B * T * NH, 256), 256>>>(D, dout, out, B, T, NH, HS, wide);
    cudaCheckLaunch();
    dim3 grid(B * NH, nsplits);
    float scale = 1.0f / sqrtf((float)HS);
    kv<<<grid, FA_THREADS, k->smem>>>(dqkv, dq_acc, lse, D, qkv, dout, T, NH, HS, nsplits, scale, wide);
    cudaCheckLaunch();
    dq<<<ceil_div((long)B * NH * T * k->hsp / FA_VEC, 256), 256>>>(dqkv, dq_acc, B, T, NH, HS, nsplits, wide);
    cudaCheckLaunch();
}

#endif  // DEV_CUDA_ATTENTION_BWD_WMMA_H
