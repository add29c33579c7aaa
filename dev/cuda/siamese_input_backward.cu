/*
siamese_input_backward: the backward pass of one SiameseNorm input side (siamese.cuh):

    ds = LN_back(du; s, ln)            the block-input LN
    da = ds + dx_next                  a feeds both s and x_next
    dy = dy_next + LN_back(ds; y, lny) Y: identity path plus its LN
    dx = LN_back(da; x, lnx)           X: only through its LN

with, per LN, LN_back(g; v) = rstd * (w g - mean(w g) - vhat * mean(w g vhat)), vhat = (v - mean) * rstd,
and the parameter gradients of the three LNs summed over all rows:
    dw += sum_r g * vhat,  db += sum_r g      for (g, v) = (du, s), (ds, y), (da, x).
x, y, s are bf16 (as stored by the forward pass); du, dx, dy and every gradient are fp32. dx holds
dx_next on entry and dx on exit; dy holds dy_next on entry and dy on exit. dx and dy on exit are
what the update of the sublayer before needs for its backward, the block-output gradient

    dz_prev = dx / c_prev + dy         (bf16: the block's matmuls read it)

which versions 1, 3, 4 and 5 also write (version 2 does not).

version 1: two kernels and the column sums (layernorm_v1.h siamese_input_backward_v1 without
           dz_prev: one warp per row, W elements per access as row_width picks, dr and da written
           to two (N, C) fp32 scratch tensors and read back, then two-stage column sums for the
           three LNs, which read du, s, dr, y, da, x again), then the element-wise update backward
           (written here) reading dx and dy back for dz_prev.
version 2: one warp per row with the row in registers (128-bit loads: 8 bf16 or 2 x 4 fp32), every
           tensor read once and dx, dy written once, no scratch tensors. The parameter gradients
           are summed on the way: each warp adds its rows into its own slice of shared memory,
           a block adds its warps' slices in a fixed order into one partial row per block, and a
           second small kernel adds the partials of all blocks in a fixed order. The grid depends
           only on N (ROWS_PER_WARP rows per warp), so results are bitwise repeatable and do not
           depend on the GPU model. No dz_prev yet.
version 3: version 1 with the update's backward folded into the row kernel's last loop
           (layernorm_v1.h siamese_input_backward_v1 with dz_prev), dz_prev written from dx and dy
           in registers. The same code on the same values as version 1, so every output must be
           bit-identical to version 1's (checked: version 1 runs again beside it).
version 4: the trainer's kernel in ln_backward_cols.h's rounds (siamese_input_backward<LnRoundsCols>):
           no scratch tensors; blocks of rows, 8 at a time: one warp per row takes the three LN
           backwards' means (du and s held in registers), then the block, each thread owning
           columns (96 of 256 threads at C 768), recomputes dr and da, writes dy, dx, dz_prev and
           adds the six parameter-gradient terms to sums only that thread touches (bank conflicts:
           a thread's 8 columns are 8 words apart from the next thread's); the trainer's column
           sums then add the blocks' sums (at most 512).
version 5: the trainer's (siamese_input_backward; trainer.h includes train_gpt2.cu): version 4
           with the block's threads in groups over the round's rows in step 2 (2 groups of 96 at C
           768, each taking 4 of the 8 rows), each group with its own conflict-free sums, added in
           group order at the end; at most LN_GRAD_BLOCKS = 256 blocks.
           Versions 4 and 5 compute dx, dy and dz_prev exactly as version 1 and must be
           bit-identical to it (checked); the parameter gradients, summed in another order, are
           checked against the reference. Both run a second time as the final merge (streams_in
           0: dx and dy are outputs only, filled with NaN before the run), against the reference
           with dx_next = dy_next = 0.

Checked against a CPU fp32 reference written from the formulas (train_gpt2.c's
layernorm_backward_row; parameter gradients summed in double). GB/s against the bytes the job must
move at the least: read du, dx_next, dy_next (fp32), x, y, s (bf16), the statistics; write dx, dy
(and dz_prev, bf16, for versions 1, 3 and 4).

Build and run (needs a GPU):  nvcc -O3 -arch=sm_90 -I. dev/cuda/siamese_input_backward.cu -o siamese_input_backward -lcublasLt -lcublas
                              ./siamese_input_backward [version] [N=rows] [C=channels]
Status: verified through the CPU execution layer at small sizes (make test-dev-cuda); never run on
a GPU yet, so no timing.
*/
#include "trainer.h"
#include "layernorm_v1.h"
#include "ln_backward_cols.h"

#define N_ROWS (8 * 1024)  // B * T (default; N= on the command line)
#define CH 768             // C (C=)
#define LN_EPS 1e-5f

// parameters (bf16) and their gradients (fp32): (6, C) arrays in this order; statistics: (3, N) (mean, rstd) pairs
enum { P_XW, P_XB, P_YW, P_YB, P_W, P_B, NUM_P };
enum { S_X, S_Y, S_LN, NUM_S };

// ----------------------------------------------------------------------------
// CPU reference

static void row_stats_ref(LnStats* st_out, const float* x, int C) {
    float sum = 0.0f, sq = 0.0f;
    for (int i = 0; i < C; i++) { sum += x[i]; }
    float mean = sum / C;
    for (int i = 0; i < C; i++) { sq += (x[i] - mean) * (x[i] - mean); }
    *st_out = LnStats{mean, 1.0f / sqrtf(sq / C + LN_EPS)};
}

static void input_backward_ref(float* dx, float* dy, double* g, const float* du, const float* x, const float* y,
                               const float* s, const float* p, const LnStats* st, int N, int C) {
    float* ds = (float*)host_alloc(C * sizeof(float));
    float* da = (float*)host_alloc(C * sizeof(float));
    for (int r = 0; r < N; r++) {
        size_t o = (size_t)r * C;
        for (int i = 0; i < C; i++) { ds[i] = 0.0f; }
        LnStats ls = st[S_LN * N + r], ys = st[S_Y * N + r], xs = st[S_X * N + r];
        ln_backward_ref(ds, g + P_W * C, g + P_B * C, du + o, s + o, p + P_W * C, ls.mean, ls.rstd, C);
        for (int i = 0; i < C; i++) { da[i] = ds[i] + dx[o + i]; dx[o + i] = 0.0f; }
        ln_backward_ref(dy + o, g + P_YW * C, g + P_YB * C, ds, y + o, p + P_YW * C, ys.mean, ys.rstd, C);
        ln_backward_ref(dx + o, g + P_XW * C, g + P_XB * C, da, x + o, p + P_XW * C, xs.mean, xs.rstd, C);
    }
    free(ds);
    free(da);
}

// `./siamese_input_backward ref`: checks the reference itself on the CPU (no GPU needed) against
// central finite differences of the scalar L = sum du.u + dx_next.a + dy_next.y, whose gradients
// are exactly what the reference returns (dL/dx, dL/dy, dL/dparams), with the forward in double.

static void layernorm_d(double* out, const float* x, const float* w, const float* b, int C) {
    double mean = 0.0, var = 0.0;
    for (int i = 0; i < C; i++) { mean += x[i]; }
    mean /= C;
    for (int i = 0; i < C; i++) { var += (x[i] - mean) * (x[i] - mean); }
    double rstd = 1.0 / sqrt(var / C + LN_EPS);
    for (int i = 0; i < C; i++) { out[i] = (x[i] - mean) * rstd * w[i] + b[i]; }
}

static double fd_loss(const float* x, const float* y, const float* p, const float* du, const float* dxn,
                      const float* dyn, int N, int C) {
    double a[64], ly[64], u[64];
    float s[64];
    double L = 0.0;
    for (int r = 0; r < N; r++) {
        size_t o = (size_t)r * C;
        layernorm_d(a, x + o, p + P_XW * C, p + P_XB * C, C);
        layernorm_d(ly, y + o, p + P_YW * C, p + P_YB * C, C);
        for (int i = 0; i < C; i++) { s[i] = (float)(a[i] + ly[i]); }
        layernorm_d(u, s, p + P_W * C, p + P_B * C, C);
        for (int i = 0; i < C; i++) { L += du[o + i] * u[i] + dxn[o + i] * a[i] + dyn[o + i] * (double)y[o + i]; }
    }
    return L;
}

// numeric dL/dv[i] for every i < n, by central differences of step h (the step actually taken in float)
static void fd_grad(float* num, float* v, size_t n, const float* x, const float* y, const float* p, const float* du,
                    const float* dxn, const float* dyn, int N, int C) {
    for (size_t i = 0; i < n; i++) {
        float v0 = v[i], h = 1e-2f;
        v[i] = v0 + h;
        float vp = v[i];
        double Lp = fd_loss(x, y, p, du, dxn, dyn, N, C);
        v[i] = v0 - h;
        float vm = v[i];
        double Lm = fd_loss(x, y, p, du, dxn, dyn, N, C);
        v[i] = v0;
        num[i] = (float)((Lp - Lm) / ((double)vp - vm));
    }
}

static int check_reference(void) {
    const int N = 3, C = 48;  // fd_loss holds a row on the stack: C <= 64
    size_t n = (size_t)N * C;
    uint64_t seed = 99;
    float x[N * C], y[N * C], s[N * C], du[N * C], dxn[N * C], dyn[N * C], p[NUM_P * C];
    LnStats st[NUM_S * N];
    fill_uniform(x, n, -2.0f, 3.0f, &seed);
    fill_uniform(y, n, -5.0f, 4.0f, &seed);
    fill_uniform(du, n, -1.0f, 1.0f, &seed);
    fill_uniform(dxn, n, -1.0f, 1.0f, &seed);
    fill_uniform(dyn, n, -1.0f, 1.0f, &seed);
    fill_ln_params(p, NUM_P / 2, C, &seed);
    for (int r = 0; r < N; r++) {  // s as the forward pass makes it, and the three statistics
        size_t o = (size_t)r * C;
        double a[64], ly[64];
        layernorm_d(a, x + o, p + P_XW * C, p + P_XB * C, C);
        layernorm_d(ly, y + o, p + P_YW * C, p + P_YB * C, C);
        for (int i = 0; i < C; i++) { s[o + i] = (float)(a[i] + ly[i]); }
        row_stats_ref(st + S_X * N + r, x + o, C);
        row_stats_ref(st + S_Y * N + r, y + o, C);
        row_stats_ref(st + S_LN * N + r, s + o, C);
    }
    float dx[N * C], dy[N * C], g[NUM_P * C], num[NUM_P * C];
    double gd[NUM_P * C] = {0};
    memcpy(dx, dxn, sizeof dx);
    memcpy(dy, dyn, sizeof dy);
    input_backward_ref(dx, dy, gd, du, x, y, s, p, st, N, C);
    for (int i = 0; i < NUM_P * C; i++) { g[i] = (float)gd[i]; }
    printf("reference vs finite differences (N = %d, C = %d)\n", N, C);
    fd_grad(num, x, n, x, y, p, du, dxn, dyn, N, C);
    check_close("dx", num, dx, n, 1e-3f, 1e-2f);
    fd_grad(num, y, n, x, y, p, du, dxn, dyn, N, C);
    check_close("dy", num, dy, n, 1e-3f, 1e-2f);
    fd_grad(num, p, NUM_P * C, x, y, p, du, dxn, dyn, N, C);
    check_close("dparams", num, g, NUM_P * C, 1e-3f, 1e-2f);
    printf("the CPU reference matches finite differences\n");
    return 0;
}

// ----------------------------------------------------------------------------
// version 1: the update's backward for the block output of the sublayer before, one thread per
// element (the trainer's siamese_update_dz), after the trainer's input backward

__global__ void update_backward(bf16* dz, const float* dx_next, const float* dy_next, float c, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { dz[i] = (bf16)siamese_update_dz(dx_next[i], dy_next[i], c); }
}

// ----------------------------------------------------------------------------
// version 2: the row in registers, parameter gradients summed per warp in shared memory

#define BW_WARPS 4        // warps per block
#define ROWS_PER_WARP 8   // rows each warp handles (the grid is N / (BW_WARPS * ROWS_PER_WARP) blocks)
#define REDUCE_SLICES 8   // the partial-sum kernel: thread rows per block

// 8 fp32 values at f + 8 j (two 128-bit loads); f 16-byte aligned
__device__ __forceinline__ void load8f(float* dst, const float* f, int j) {
    float4 lo = ((const float4*)f)[2 * j], hi = ((const float4*)f)[2 * j + 1];
    dst[0] = lo.x; dst[1] = lo.y; dst[2] = lo.z; dst[3] = lo.w;
    dst[4] = hi.x; dst[5] = hi.y; dst[6] = hi.z; dst[7] = hi.w;
}

__device__ __forceinline__ void store8f(float* f, int j, const float* src) {
    ((float4*)f)[2 * j] = make_float4(src[0], src[1], src[2], src[3]);
    ((float4*)f)[2 * j + 1] = make_float4(src[4], src[5], src[6], src[7]);
}

// the vectors of 8 per lane, VPL = ceil(C / 256), are a template parameter (the register arrays)
#define VPL_MAX 4  // C up to 1024
static int vectors_per_lane(int C) { return ceil_div(C / 8, 32); }

// One LN backward over a row in registers. g: dout in, LN_back(dout) out; v: the LN input;
// acc: this warp's gradient slice, (weight, then bias) at element (e, j) = column 8 j + e.
template <int VPL>
__device__ __forceinline__ void ln_back_regs(float (*g)[8], const float (*v)[8], const bf16* w, float mean,
                                             float rstd, float* acc_w, float* acc_b, int C, int lane) {
    const int V = C / 8;
    const int4* w4 = (const int4*)w;
    float wv[VPL][8] = {};  // zero where a lane owns no vector (never read there)
    float m1 = 0.0f, m2 = 0.0f;
#pragma unroll
    for (int k = 0; k < VPL; k++) {
        int j = lane + 32 * k;
        if (j >= V) { continue; }
        unpack8(wv[k], __ldg(w4 + j));
        for (int e = 0; e < 8; e++) {
            float vhat = (v[k][e] - mean) * rstd, wg = wv[k][e] * g[k][e];
            m1 += wg;
            m2 += wg * vhat;
            acc_w[e * V + j] += g[k][e] * vhat;  // conflict-free: consecutive lanes, consecutive j
            acc_b[e * V + j] += g[k][e];
        }
    }
    m1 = warp_sum(m1) / C;
    m2 = warp_sum(m2) / C;
#pragma unroll
    for (int k = 0; k < VPL; k++) {
        if (lane + 32 * k >= V) { continue; }
        for (int e = 0; e < 8; e++) {
            float vhat = (v[k][e] - mean) * rstd;
            g[k][e] = (wv[k][e] * g[k][e] - m1 - vhat * m2) * rstd;
        }
    }
}

template <int VPL>
__global__ void __launch_bounds__(BW_WARPS * 32)
    input_backward_v2(float* dx, float* dy, float* partials, const float* du, const bf16* x, const bf16* y,
                      const bf16* s, const bf16* p, const LnStats* st, int N, int C) {
    const int V = C / 8;
    extern __shared__ float acc[];  // (BW_WARPS, NUM_P, 8, V): each warp's column sums
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* my = acc + (size_t)warp * NUM_P * C;
    for (int i = lane; i < NUM_P * C; i += 32) { my[i] = 0.0f; }
    __syncwarp(0xffffffffu);
    int r0 = (blockIdx.x * BW_WARPS + warp) * ROWS_PER_WARP;
    for (int r = r0; r < r0 + ROWS_PER_WARP && r < N; r++) {
        size_t o = (size_t)r * C, o4 = (size_t)r * V;
        // the row's loads first (dy_next is read at the end, where it is added)
        float g[VPL][8] = {}, h[VPL][8] = {}, sv[VPL][8] = {}, yv[VPL][8] = {}, xv[VPL][8] = {};
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            int j = lane + 32 * k;
            if (j >= V) { continue; }
            load8f(g[k], du + o, j);
            load8f(h[k], dx + o, j);
            unpack8(sv[k], ((const int4*)s)[o4 + j]);
            unpack8(yv[k], ((const int4*)y)[o4 + j]);
            unpack8(xv[k], ((const int4*)x)[o4 + j]);
        }
        // g: du -> ds; h: dx_next -> da = ds + dx_next -> dx
        LnStats ls = st[S_LN * N + r], ys = st[S_Y * N + r], xs = st[S_X * N + r];
        ln_back_regs<VPL>(g, sv, p + P_W * C, ls.mean, ls.rstd, my + P_W * C, my + P_B * C, C, lane);
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            for (int e = 0; e < 8; e++) { h[k][e] += g[k][e]; }
        }
        ln_back_regs<VPL>(g, yv, p + P_YW * C, ys.mean, ys.rstd, my + P_YW * C, my + P_YB * C, C, lane);
        ln_back_regs<VPL>(h, xv, p + P_XW * C, xs.mean, xs.rstd, my + P_XW * C, my + P_XB * C, C, lane);
#pragma unroll
        for (int k = 0; k < VPL; k++) {
            int j = lane + 32 * k;
            if (j >= V) { continue; }
            float dyv[8];
            load8f(dyv, dy + o, j);
            for (int e = 0; e < 8; e++) { dyv[e] += g[k][e]; }
            store8f(dy + o, j, dyv);
            store8f(dx + o, j, h[k]);
        }
    }
    __syncthreads();
    // the block's partial row: warps added in a fixed order, written in column order
    float* out = partials + (size_t)blockIdx.x * NUM_P * C;
    for (int q = threadIdx.x; q < NUM_P * C; q += blockDim.x) {
        int pk = q / C, col = q % C;
        int idx = pk * C + (col % 8) * V + col / 8;
        float sum = 0.0f;
        for (int w = 0; w < BW_WARPS; w++) { sum += acc[(size_t)w * NUM_P * C + idx]; }
        out[q] = sum;
    }
}

// grads[q] += sum over blocks b of partials[b][q], in a fixed order: 32 columns per block,
// REDUCE_SLICES thread rows each summing every REDUCE_SLICES-th block, then the slices in order
__global__ void reduce_partials_v2(float* grads, const float* partials, int nblocks, int n) {
    int q = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (q < n) {
        for (int b = threadIdx.y; b < nblocks; b += REDUCE_SLICES) { sum += partials[(size_t)b * n + q]; }
    }
    __shared__ float part[REDUCE_SLICES][32];
    part[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && q < n) {
        float t = 0.0f;
        for (int k = 0; k < REDUCE_SLICES; k++) { t += part[k][threadIdx.x]; }
        grads[q] += t;
    }
}

// ----------------------------------------------------------------------------

typedef struct {
    float *dx, *dy, *du, *dx0, *dy0, *grads, *grads0;
    LnStats* st;
    bf16 *x, *y, *s, *p, *dz;
    float *ds_buf, *da_buf, *partials;  // scratch: versions 1 and 3, version 2
} Buffers;

static int v2_blocks(int N) { return ceil_div(N, BW_WARPS * ROWS_PER_WARP); }
static size_t v2_smem(int C) { return (size_t)BW_WARPS * NUM_P * C * sizeof(float); }
typedef void (*BackwardV2)(float*, float*, float*, const float*, const bf16*, const bf16*, const bf16*, const bf16*,
                           const LnStats*, int, int);
static const BackwardV2 backward_v2[VPL_MAX] = {input_backward_v2<1>, input_backward_v2<2>, input_backward_v2<3>,
                                                input_backward_v2<4>};

// the trainer's views of the parameters, their gradients and the statistics (SiameseNorms, SiameseStats)
static SiameseNormGrads grad_views(const Buffers* b, int C) {
    float* g = b->grads;
    SiameseNormGrads q = {g + P_XW * C, g + P_XB * C, g + P_YW * C, g + P_YB * C, g + P_W * C, g + P_B * C};
    return q;
}
static SiameseNorms norm_views(const Buffers* b, int C) {
    bf16* p = b->p;
    SiameseNorms q = {p + P_XW * C, p + P_XB * C, p + P_YW * C, p + P_YB * C, p + P_W * C, p + P_B * C};
    return q;
}
static SiameseStats stat_views(const Buffers* b, int N) {
    SiameseStats q = {b->st + S_X * N, b->st + S_Y * N, b->st + S_LN * N};
    return q;
}

// version 1's row kernel and column sums on these buffers; dz NULL: without the update's backward
static void input_backward_v1(const Buffers* b, bf16* dz, float c_prev, int N, int C) {
    siamese_input_backward_v1(b->dx, b->dy, b->ds_buf, b->da_buf, dz, c_prev, b->du, grad_views(b, C), norm_views(b, C),
                              stat_views(b, N), b->x, b->y, b->s, N, C);
}

// streams_in: 1 for a sublayer's input side, 0 for the final merge (versions 4 and 5)
static void run_version(int version, const Buffers* b, float c_prev, int N, int C, int streams_in = 1) {
    if (version == 1) {
        input_backward_v1(b, NULL, c_prev, N, C);
        size_t n = (size_t)N * C;
        update_backward<<<ceil_div((long)n, 256), 256>>>(b->dz, b->dx, b->dy, c_prev, n);
        cudaCheckLaunch();
    } else if (version == 3) {
        input_backward_v1(b, b->dz, c_prev, N, C);
    } else if (version == 4) {
        siamese_input_backward<LnRoundsCols>(b->dx, b->dy, b->dz, c_prev, streams_in, b->du, grad_views(b, C),
                                             norm_views(b, C), stat_views(b, N), b->x, b->y, b->s, N, C);
    } else if (version == 5) {
        siamese_input_backward(b->dx, b->dy, b->dz, c_prev, streams_in, b->du, grad_views(b, C), norm_views(b, C),
                               stat_views(b, N), b->x, b->y, b->s, N, C);
    } else {
        int nb = v2_blocks(N);
        BackwardV2 kernel = backward_v2[vectors_per_lane(C) - 1];
        kernel<<<nb, BW_WARPS * 32, v2_smem(C)>>>(b->dx, b->dy, b->partials, b->du, b->x, b->y, b->s, b->p, b->st, N, C);
        cudaCheckLaunch();
        reduce_partials_v2<<<ceil_div(NUM_P * C, 32), dim3(32, REDUCE_SLICES)>>>(b->grads, b->partials, nb, NUM_P * C);
        cudaCheckLaunch();
    }
}

// dx and dy are updated in place: restore them, and the gradients' starting values (the kernels
// add to them), before every run
static void reset(const Buffers* b, int N, int C) {
    size_t n = (size_t)N * C;
    cudaCheck(cudaMemcpy(b->dx, b->dx0, n * sizeof(float), cudaMemcpyDeviceToDevice));
    cudaCheck(cudaMemcpy(b->dy, b->dy0, n * sizeof(float), cudaMemcpyDeviceToDevice));
    cudaCheck(cudaMemcpy(b->grads, b->grads0, NUM_P * C * sizeof(float), cudaMemcpyDeviceToDevice));
}

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "ref") == 0) { return check_reference(); }
    int N = N_ROWS, C = CH;
    const SizeArg sizes[] = {{"N", &N}, {"C", &C}};
    int only = parse_args(argc, argv, 5, sizes, 2);
    if ((only == 0 || only == 2) && (C % 8 != 0 || C > 256 * VPL_MAX)) {
        size_error(argv[0], "version 2 needs C a multiple of 8 up to 1024 (versions 1, 3, 4 and 5 take any C)");
    }
    size_t n = (size_t)N * C;
    const float c_prev = sqrtf(2.0f * 3);  // the scale of the sublayer before: layer 2's c_l
    print_device();
    printf("siamese_input_backward: N = %d rows, C = %d, c_prev = %.4f\n", N, C, c_prev);

    // inputs: x, y, s with non-zero means, their statistics, LN parameters near (1, 0), gradients
    uint64_t seed = 7;
    float *x = (float*)host_alloc(n * sizeof(float)), *y = (float*)host_alloc(n * sizeof(float));
    float *s = (float*)host_alloc(n * sizeof(float)), *du = (float*)host_alloc(n * sizeof(float));
    float *dx = (float*)host_alloc(n * sizeof(float)), *dy = (float*)host_alloc(n * sizeof(float));
    float* p = (float*)host_alloc(NUM_P * C * sizeof(float));
    float* g0 = (float*)host_alloc(NUM_P * C * sizeof(float));
    LnStats* st = (LnStats*)host_alloc(NUM_S * N * sizeof(LnStats));
    fill_uniform(x, n, -2.0f, 3.0f, &seed);
    fill_uniform(y, n, -5.0f, 4.0f, &seed);
    fill_uniform(s, n, -3.0f, 3.0f, &seed);
    fill_uniform(du, n, -1.0f, 1.0f, &seed);
    fill_uniform(dx, n, -1.0f, 1.0f, &seed);
    fill_uniform(dy, n, -1.0f, 1.0f, &seed);
    fill_ln_params(p, NUM_P / 2, C, &seed);  // (xw, xb), (yw, yb), (w, b)
    fill_uniform(g0, NUM_P * C, -1.0f, 1.0f, &seed);
    Buffers b;
    b.x = to_device_bf16(x, n);  // rounds the host copies too
    b.y = to_device_bf16(y, n);
    b.s = to_device_bf16(s, n);
    b.p = to_device_bf16(p, NUM_P * C);
    for (int r = 0; r < N; r++) {
        size_t o = (size_t)r * C;
        row_stats_ref(st + S_X * N + r, x + o, C);
        row_stats_ref(st + S_Y * N + r, y + o, C);
        row_stats_ref(st + S_LN * N + r, s + o, C);
    }
    b.st = (LnStats*)to_device_f32((const float*)st, 2 * NUM_S * N);
    b.du = to_device_f32(du, n);
    b.dx0 = to_device_f32(dx, n);
    b.dy0 = to_device_f32(dy, n);
    b.dx = (float*)device_alloc(n * sizeof(float));
    b.dy = (float*)device_alloc(n * sizeof(float));
    b.grads = (float*)device_alloc(NUM_P * C * sizeof(float));
    b.grads0 = to_device_f32(g0, NUM_P * C);
    b.ds_buf = (float*)device_alloc(n * sizeof(float));
    b.da_buf = (float*)device_alloc(n * sizeof(float));
    b.partials = (float*)device_alloc((size_t)v2_blocks(N) * NUM_P * C * sizeof(float));
    b.dz = (bf16*)device_alloc(n * sizeof(bf16));
    trainer_partials(C);
    cols_partials(C);
    Buffers b1 = b;  // the same inputs, outputs and scratch of their own: version 1 beside versions 3 to 5
    b1.dx = (float*)device_alloc(n * sizeof(float));
    b1.dy = (float*)device_alloc(n * sizeof(float));
    b1.grads = (float*)device_alloc(NUM_P * C * sizeof(float));
    b1.ds_buf = (float*)device_alloc(n * sizeof(float));
    b1.da_buf = (float*)device_alloc(n * sizeof(float));
    b1.dz = (bf16*)device_alloc(n * sizeof(bf16));
    if (only == 0 || only == 2) {
        cudaCheck(cudaFuncSetAttribute((const void*)backward_v2[vectors_per_lane(C) - 1], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)v2_smem(C)));
    }

    // the CPU reference (dx, dy in place, gradients in double from their starting values); and as
    // the final merge, with dx_next = dy_next = 0 (versions 4 and 5)
    float* ref_g = (float*)host_alloc(NUM_P * C * sizeof(float));
    float* ref_dz = (float*)host_alloc(n * sizeof(float));
    float *mdx = (float*)calloc(n, sizeof(float)), *mdy = (float*)calloc(n, sizeof(float));
    float* ref_mg = (float*)host_alloc(NUM_P * C * sizeof(float));
    float* ref_mdz = (float*)host_alloc(n * sizeof(float));
    double* gd = (double*)host_alloc(NUM_P * C * sizeof(double));
    for (int merge = 0; merge < 2; merge++) {
        float *rdx = merge ? mdx : dx, *rdy = merge ? mdy : dy;
        for (int i = 0; i < NUM_P * C; i++) { gd[i] = g0[i]; }
        input_backward_ref(rdx, rdy, gd, du, x, y, s, p, st, N, C);
        for (int i = 0; i < NUM_P * C; i++) { (merge ? ref_mg : ref_g)[i] = (float)gd[i]; }
        for (size_t i = 0; i < n; i++) { (merge ? ref_mdz : ref_dz)[i] = bf16_round(rdx[i] / c_prev + rdy[i]); }
    }
    float* got = (float*)host_alloc((n > NUM_P * (size_t)C ? n : NUM_P * (size_t)C) * sizeof(float));  // dx, dy or dparams

    // the parameter gradients sum N rows: the absolute tolerance (1e-2 at 8192 rows) scales with N
    const float dparams_atol = fmaxf(1e-2f * N / N_ROWS, 1e-5f);
    // every output of one run against the reference (dz_prev: one bf16 rounding of a sum of the two)
    auto check_run = [&](const Buffers* r, const float* rdx, const float* rdy, const float* rg, const float* rdz) {
        from_device_f32(got, r->dx, n);
        check_close("dx", rdx, got, n, 1e-4f, 1e-3f);
        from_device_f32(got, r->dy, n);
        check_close("dy", rdy, got, n, 1e-4f, 1e-3f);
        from_device_f32(got, r->grads, NUM_P * C);
        check_close("dparams", rg, got, NUM_P * C, dparams_atol, 1e-3f);
        if (rdz) {
            from_device_bf16(got, r->dz, n);
            check_close("dz_prev", rdz, got, n, 1e-4f, 8e-3f);
        }
    };
    double bytes = (5 * sizeof(float) + 3 * sizeof(bf16)) * (double)n + NUM_S * (double)N * sizeof(LnStats);
    for (int v = 1; v <= 5; v++) {
        if (only && v != only) { continue; }
        printf("version %d\n", v);
        reset(&b, N, C);
        cudaCheck(cudaMemset(b.dz, 0, n * sizeof(bf16)));
        run_version(v, &b, c_prev, N, C);
        cudaCheck(cudaDeviceSynchronize());
        check_run(&b, dx, dy, ref_g, v != 2 ? ref_dz : NULL);
        if (v >= 3) {  // against the row kernel plus update kernel, bit for bit
            reset(&b1, N, C);
            cudaCheck(cudaMemset(b1.dz, 0, n * sizeof(bf16)));
            run_version(1, &b1, c_prev, N, C);
            cudaCheck(cudaDeviceSynchronize());
            printf("  against version 1:\n");
            check_identical("dx", b1.dx, b.dx, n, sizeof(float));
            check_identical("dy", b1.dy, b.dy, n, sizeof(float));
            if (v == 3) { check_identical("dparams", b1.grads, b.grads, NUM_P * C, sizeof(float)); }  // the same sums
            check_identical("dz_prev", b1.dz, b.dz, n, sizeof(bf16));
        }
        if (v >= 4) {  // the final merge: dx, dy are outputs only (NaN before the run: never read)
            reset(&b, N, C);
            cudaCheck(cudaMemset(b.dx, 0xff, n * sizeof(float)));
            cudaCheck(cudaMemset(b.dy, 0xff, n * sizeof(float)));
            cudaCheck(cudaMemset(b.dz, 0, n * sizeof(bf16)));
            run_version(v, &b, c_prev, N, C, 0);
            cudaCheck(cudaDeviceSynchronize());
            printf("  as the final merge (no incoming dx, dy):\n");
            check_run(&b, mdx, mdy, ref_mg, ref_mdz);
        }
        char label[64];
        snprintf(label, sizeof label, "  v%d backward + LN param grads", v);
        if (!timing_skipped(label)) {
            print_timing(label, time_ms([&] { run_version(v, &b, c_prev, N, C); }, [&] { reset(&b, N, C); }),
                         bytes + (v != 2 ? n * sizeof(bf16) : 0));
        }
    }
    printf("all checked versions match the CPU reference\n");
    return 0;
}
