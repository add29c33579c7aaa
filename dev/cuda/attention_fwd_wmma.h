/*
dev/cuda/attention_fwd_wmma.h: version 4 of attention_forward.cu, a FlashAttention-2 forward on WMMA fragments.
The WMMA layer is attention_wmma.h, the loaders the trainer's (attention.cuh, included first): a block takes 64
queries of one head, 16 rows per warp, key and value tiles double buffered in shared memory with the next tile's
16-byte loads in flight.
WMMA fragments hide their layout, so per key tile each warp stores S (fp32) to shared memory, reads it back for the
online softmax (two lanes per row), writes P (floatX) there, loads it as a fragment for P V, and rescales O per row
through a row-index fragment (fa_fill_index_tile). Same outputs as the trainer's kernel: out (B, T, C), lse (B, NH, T).
*/
#ifndef DEV_CUDA_ATTENTION_FWD_WMMA_H
#define DEV_CUDA_ATTENTION_FWD_WMMA_H

#include "attention_wmma.h"

// nvcc only: FA_ROLLED keeps a loop over shared-memory tiles rolled (unrolled, the compiler would
// hoist every tile's loads at once: registers); the loops over fragments or registers unroll fully
#ifdef __CUDACC__
#define FA_ROLLED _Pragma("unroll 1")
#else
#define FA_ROLLED
#endif

// each element of the warp's NF accumulators (16 rows x 16 NF columns) times its row's factor
template <int NF>
__device__ __forceinline__ void fa_scale_rows(FaAcc (&o)[NF], const FaAcc& idx, const float* rowf) {
    for (int i = 0; i < FaAcc::num_elements; i++) {
        float f = rowf[fa_row(idx, i)];
        for (int c = 0; c < NF; c++) { o[c].x[i] *= f; }
    }
}

// a forward block: head bh = b * NH + h (blockIdx.x), queries from q0 (counted from the last: the blocks with the most
// key tiles start first), key tiles of BC up to its last query, its q, k, v rows, its head's row 0 in out (B, T, C)
struct WfBlock {
    int bh = blockIdx.x, C, q0 = (gridDim.y - 1 - blockIdx.y) * FA_QUERIES, ntiles;
    size_t out0;
    FaRows qs, ks, vs;
    __device__ WfBlock(const floatX* qkv, int T, int NH, int HS, int BC, bool wide)
        : C(NH * HS), ntiles(((q0 + FA_QUERIES < T ? q0 + FA_QUERIES : T) - 1) / BC + 1),
          out0((size_t)(bh / NH) * T * C + bh % NH * HS),
          qs{qkv + (size_t)(bh / NH) * T * 3 * C + bh % NH * HS, 3 * (size_t)C, T, HS, wide},
          ks{qs.p + C, qs.stride, T, HS, wide}, vs{qs.p + 2 * C, qs.stride, T, HS, wide} {}
    // the block's queries to Qs, the first key and value tiles to KV (leading dimension ld)
    template <int BC, int HSP>
    __device__ void load_first(floatX* Qs, floatX* KV, int ld) const {
        FaTileRegs<FA_QUERIES, HSP> qr;
        qr.fetch(qs, q0);
        qr.put(Qs, ld, qs, q0);
        FaTilePair<BC, HSP> kv;
        kv.fetch(ks, vs, 0);
        kv.put(KV, ld, ks, vs, 0);
    }
};

// the forward's tile sizes and shared memory (byte offsets): the block's queries, two (keys, values)
// buffers, per warp its scores (fp32) and probabilities (floatX), a factor per row, the index tile
template <int HSP>
struct WfFwd {
    static_assert(HSP % 16 == 0 && HSP <= FA_MAX_HS, "padded head sizes: multiples of 16 up to FA_MAX_HS");
    static constexpr int BC = HSP <= 64 ? 64 : 32;         // keys per tile (fewer at 128, so that the tiles fit)
    static constexpr int min_blocks = HSP <= 64 ? 3 : 2;   // blocks per SM the registers must allow
    static constexpr int LDX = HSP + 8, LDS = BC + 8, LDP = BC + 8, LDO = HSP + 4;  // leading dimensions
    static constexpr size_t q = 0, kv = fa_round((size_t)FA_QUERIES * LDX * sizeof(floatX));  // kv: [buffer][k, v]
    static constexpr size_t s = kv + fa_round((size_t)4 * BC * LDX * sizeof(floatX));
    static constexpr size_t p = s + fa_round((size_t)FA_QUERIES * LDS * sizeof(float));
    static constexpr size_t rowf = p + fa_round((size_t)FA_QUERIES * LDP * sizeof(floatX));
    static constexpr size_t idx = rowf + fa_round((size_t)FA_QUERIES * sizeof(float));
    static constexpr size_t bytes = idx + fa_round(256 * sizeof(float)) + 128;
    static_assert((size_t)FA_QUERIES * LDO * sizeof(float) <= s - kv, "the output rows, staged in fp32, reuse (k, v)");
};

// Block (b * NH + h, query tile): see WfBlock
template <int HSP>
__global__ void __launch_bounds__(FA_THREADS, WfFwd<HSP>::min_blocks)
    wmma_forward_kernel(floatX* out, float* lse, const floatX* qkv, int T, int NH, int HS, float scale_log2, bool wide) {
    typedef WfFwd<HSP> L;
    constexpr int BC = L::BC, NF = HSP / 16;
    extern __shared__ float4 fa_dynamic_smem[];
    unsigned char* sm = fa_smem_base(fa_dynamic_smem);
    floatX* Qs = (floatX*)(sm + L::q);
    floatX* KV = (floatX*)(sm + L::kv);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * FA_ROWS;
    float* S = (float*)(sm + L::s) + r0 * L::LDS;    // this warp's 16 score rows
    floatX* P = (floatX*)(sm + L::p) + r0 * L::LDP;  // and probability rows
    float* rowf = (float*)(sm + L::rowf) + r0;       // a factor per row (rescale, then 1/l)
    float* idx_tile = (float*)(sm + L::idx);

    const WfBlock blk(qkv, T, NH, HS, BC, wide);
    const int bh = blk.bh, q0 = blk.q0, ntiles = blk.ntiles;
    const FaRows &ks = blk.ks, &vs = blk.vs;
    fa_fill_index_tile(idx_tile);
    blk.load_first<BC, HSP>(Qs, KV, L::LDX);
    FaTilePair<BC, HSP> kv;  // buffer u: keys at KV + 2u * BC * LDX, values after them
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
        if (kt + 1 < ntiles) { kv.fetch(ks, vs, k0 + BC); }  // in flight during this tile's math
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
            FaQuad<float> a = *(const FaQuad<float>*)(Srow + col);
            for (int e = 0; e < 4; e++) {
                if (k0 + col + e <= t) { mx = fmaxf(mx, a.v[e]); }
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)) * scale_log2;
        float m_new = fmaxf(m_run, mx);  // finite: key 0 is in the first tile of every row
        float corr = exp2f(m_run - m_new), sum = 0.0f;
        for (int i = 0; i < BC / 8; i++) {
            int col = 8 * i + 4 * half;
            FaQuad<float> a = *(const FaQuad<float>*)(Srow + col);
            FaQuad<floatX> pq;
            for (int e = 0; e < 4; e++) {
                float p = k0 + col + e <= t ? exp2f(a.v[e] * scale_log2 - m_new) : 0.0f;
                pq.v[e] = (floatX)p;
                sum += p;
            }
            *(FaQuad<floatX>*)(P + rr * L::LDP + col) = pq;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l_run = l_run * corr + sum;
        m_run = m_new;
        if (half == 0) { rowf[rr] = corr; }
        __syncwarp(0xffffffffu);
        // O = O * corr + P V
        fa_scale_rows(o, idx, rowf);
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
        if (kt + 1 < ntiles) { kv.put(KV + ((kt + 1) & 1) * 2 * BC * L::LDX, L::LDX, ks, vs, k0 + BC); }
        __syncthreads();  // the next tile is in place; this one's buffer is free
    }
    // out = O / l, lse = (m + log2 l) ln 2
    __syncwarp(0xffffffffu);
    if (half == 0) {
        rowf[rr] = 1.0f / l_run;
        if (t < T) { lse[(size_t)bh * T + t] = (m_run + log2f(l_run)) * FA_LN2; }
    }
    __syncwarp(0xffffffffu);
    fa_scale_rows(o, idx, rowf);
    float* stage = (float*)(sm + L::kv) + r0 * L::LDO;
    fa_store_rows<HSP>(out + blk.out0, blk.C, o, stage, L::LDO, q0 + r0, T, HS, wide);
}

// the kernel and its shared memory at head size HS (padded as the trainer pads it)
struct WfConfig { size_t smem; decltype(&wmma_forward_kernel<16>) kernel; };
template <int HSP>
static const WfConfig wf_config = {WfFwd<HSP>::bytes, wmma_forward_kernel<HSP>};
static const WfConfig* wf_config_of(int HS) {
    switch (flash_config(HS)->hsp) {
    case 16: return &wf_config<16>;
    case 32: return &wf_config<32>;
    case 64: return &wf_config<64>;
    default: return &wf_config<FA_MAX_HS>;
    }
}

// as flash_attention_forward; callers check flash_attention_supported once first (this kernel takes more shared memory)
static void wmma_attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH) {
    int HS = C / NH;
    const WfConfig* k = wf_config_of(HS);
    static const WfConfig* allowed = NULL;  // the kernel whose shared memory allowance was set last
    if (allowed != k) {
        cudaCheck(cudaFuncSetAttribute((const void*)k->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)k->smem));
        allowed = k;
    }
    dim3 grid(B * NH, ceil_div(T, FA_QUERIES));
    float scale_log2 = 1.0f / sqrtf((float)HS) * FA_LOG2E;
    auto kernel = k->kernel;
    kernel<<<grid, FA_THREADS, k->smem>>>(out, lse, qkv, T, NH, HS, scale_log2, flash_wide(HS, out, qkv));
    cudaCheckLaunch();
}

#endif  // DEV_CUDA_ATTENTION_FWD_WMMA_H
