/*
siamese.cuh: how SiameseNorm maps onto a GPU. A chapter of train_gpt2.cu, included by it after
its LayerNorm kernels, whose helpers it reuses.

What the includer must define before `#include "siamese.cuh"` (train_gpt2.cu does, in Part 0 and
the LayerNorm section of Part 1; tests/check_siamese_cuh.cu defines exactly this list and nothing
more, and `make check-cuda` compiles it, so a new dependency fails there until it is listed here):

    floatX                      type: float (FP32 build) or __nv_bfloat16, the storage of activations
    ROW_WARPS                   macro: warps per block of a row kernel (one warp per row)
    cudaCheckLaunch()           macro: checks the last kernel launch, fatal on error
    int ceil_div(long a, long b)                          host: blocks needed for a elements
    int row_blocks(int N)                                 host: blocks of a row kernel for N rows
    __device__ int warp_row()                             the row of the calling warp
    __device__ float warp_sum(float v)                    sum over the 32 lanes, every lane gets it
    __device__ float2 ln_row_stats(const floatX* x, int C, int lane)        (mean, rstd) of a row
    __device__ float2 ln_backward_means(const float* dout, const floatX* x, const floatX* w,
                                        float mean, float rstd, int C, int lane)
    __device__ float ln_backward_value(float dout, float x, float w, float mean, float rstd, float2 means)
    ColumnJob<float>, ColumnJobs<float>                   LayerNorm parameter-gradient jobs
    ColumnJob<float> ln_job(float* dw, float* db, const float* dout, const floatX* inp,
                            const float* mean, const float* rstd)
    void column_grads(const ColumnJobs<float>& jobs, int njobs, int N, int C)
                                                          deterministic column sums of up to 3 jobs
    VEC_X, struct VecX { floatX v[VEC_X]; }                16 bytes of floatX, 16-byte aligned
    int vec_fits(const void* p, size_t n)                 host: p aligned and n a multiple of VEC_X
    int new_kernel_on(int kernel), KERNEL_VEC             host: whether TRAIN_GPT2CU_KERNELS has "vec"

The CUDA runtime (float2, make_float2, rsqrtf, kernel launches) is included below.

The model (dev/MODEL.md). Two residual streams, X (post-norm-like) and Y (pre-norm-like),
share every block F (attention or MLP). Around each block, per row of C channels:

    input side      a = LN(x; lnx)              normalise X
                    r = a + LN(y; lny)          both streams meet
                    u = LN(r; ln)               the block input
    the block       z = F(u)                    matmuls, attention: the expensive part, run ONCE
    update side     x_next = a + z / c_l        X takes the update scaled by 1/c_l
                    y_next = y + z              Y takes it whole (the identity path)

and at the end the same input side merges the streams: h = LN(LN(x; lnfx) + LN(y; lnfy); lnf).

Why a fused kernel. The input side is three LayerNorms and an add: all memory-bound, each
touching a few numbers per element loaded. Done as separate kernels it would read and write
(N, C) tensors seven times. One warp per row does it all while the row is hot in L1/L2:
it reads x and y, computes the statistics of LN(x) and LN(y) in fp32 (two passes each: mean,
then the variance around it), writes a and r, computes the statistics of r from the values it
just wrote (so that the backward pass, which recomputes r-hat from the stored r, sees exactly
what the forward pass normalised) and writes u. It saves the six (mean, rstd) numbers per row.
The update side is a plain element-wise kernel (kept separate for clarity: it could be folded
into the next sublayer's input kernel, saving one write and one read of x_next and y_next).

Backward, per row, with dx and dy holding dL/dx_next and dL/dy_next on entry:

    dz = dx_next / c + dy_next                           (siamese_update_backward, before the block)
    ... the block's backward turns dz into du = dL/du ...
    dr = LN_back(du; r, ln)                              the block-input LN
    da = dr + dx_next                                    a feeds both r and x_next
    dy = dy_next + LN_back(dr; y, lny)                   Y: identity path plus its LN
    dx = LN_back(da; x, lnx)                             X: only through its LN

which is again one warp per row (siamese_input_backward_kernel): three LN backwards chained in
registers and L1. It writes dr and da to scratch because the LayerNorm PARAMETER gradients are
sums over all rows: those come from the deterministic column-sum kernel of train_gpt2.cu
(column_grads: fixed-order sums through shared memory, no atomics), run once for the three
LayerNorms of the sublayer together (three jobs, blockIdx.y picks one).

Precision: the streams and a, r, u are floatX (bf16 by default); the statistics and every
gradient here are fp32.
*/
#ifndef SIAMESE_CUH
#define SIAMESE_CUH

#include <stddef.h>
#include <cuda_runtime.h>

// the three LayerNorms of one siamese input side, as parameters (floatX) or gradients (float)
template <typename T>
struct SiameseNormsT {
    T *xw, *xb;  // LN of stream X (lnx1, lnx2 or lnfx)
    T *yw, *yb;  // LN of stream Y (lny1, lny2 or lnfy)
    T *w, *b;    // the LN that makes the block input (ln1, ln2 or lnf)
};
typedef SiameseNormsT<floatX> SiameseNorms;
typedef SiameseNormsT<float> SiameseNormGrads;

// the saved statistics, (N) floats each
typedef struct {
    float *x_mean, *x_rstd, *y_mean, *y_rstd, *mean, *rstd;
} SiameseStats;

// ----------------------------------------------------------------------------
// The input side, forward: a = LN(x), r = a + LN(y), u = LN(r). a_out may be NULL (the final merge
// does not need a).

__global__ void siamese_input_forward_kernel(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st,
                                             const floatX* x, const floatX* y, SiameseNorms p, int N, int C) {
    int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= N) { return; }
    size_t o = (size_t)row * C;
    float2 sx = ln_row_stats(x + o, C, lane);
    float2 sy = ln_row_stats(y + o, C, lane);
    // r = LN(x) + LN(y); its statistics are taken over the stored (rounded) values
    floatX* r = r_out + o;
    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float a = ((float)x[o + i] - sx.x) * sx.y * (float)p.xw[i] + (float)p.xb[i];
        float ly = ((float)y[o + i] - sy.x) * sy.y * (float)p.yw[i] + (float)p.yb[i];
        if (a_out) { a_out[o + i] = (floatX)a; }
        floatX rv = (floatX)(a + ly);
        r[i] = rv;
        sum += (float)rv;
    }
    float mean = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int i = lane; i < C; i += 32) { float d = (float)r[i] - mean; sq += d * d; }  // this lane's own writes
    float rstd = rsqrtf(warp_sum(sq) / C + 1e-5f);
    floatX* u = u_out + o;
    for (int i = lane; i < C; i += 32) { u[i] = (floatX)(((float)r[i] - mean) * rstd * (float)p.w[i] + (float)p.b[i]); }
    if (lane == 0) {
        st.x_mean[row] = sx.x;
        st.x_rstd[row] = sx.y;
        st.y_mean[row] = sy.x;
        st.y_rstd[row] = sy.y;
        st.mean[row] = mean;
        st.rstd[row] = rstd;
    }
}

static void siamese_input_forward(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st, const floatX* x,
                                  const floatX* y, SiameseNorms p, int N, int C) {
    siamese_input_forward_kernel<<<row_blocks(N), ROW_WARPS * 32>>>(a_out, r_out, u_out, st, x, y, p, N, C);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// The update side, forward: x_next = a + z / c and y_next = y + z, one thread per element

__global__ void siamese_update_forward_kernel(floatX* x_next, floatX* y_next, const floatX* a, const floatX* y,
                                              const floatX* z, float c, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float zi = (float)z[i];
    x_next[i] = (floatX)((float)a[i] + zi / c);
    y_next[i] = (floatX)((float)y[i] + zi);
}

// the same with one 16-byte vector per thread (TRAIN_GPT2CU_KERNELS=vec)
__global__ void siamese_update_forward_vec_kernel(floatX* x_next, floatX* y_next, const floatX* a, const floatX* y,
                                                  const floatX* z, float c, size_t nvec) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nvec) { return; }
    VecX av = ((const VecX*)a)[i], yv = ((const VecX*)y)[i], zv = ((const VecX*)z)[i], xo, yo;
    for (int e = 0; e < VEC_X; e++) {
        float zi = (float)zv.v[e];
        xo.v[e] = (floatX)((float)av.v[e] + zi / c);
        yo.v[e] = (floatX)((float)yv.v[e] + zi);
    }
    ((VecX*)x_next)[i] = xo;
    ((VecX*)y_next)[i] = yo;
}

static void siamese_update_forward(floatX* x_next, floatX* y_next, const floatX* a, const floatX* y, const floatX* z,
                                   float c, size_t n) {
    if (new_kernel_on(KERNEL_VEC) && vec_fits(x_next, n) && vec_fits(y_next, n) && vec_fits(a, n) && vec_fits(y, n) &&
        vec_fits(z, n)) {
        siamese_update_forward_vec_kernel<<<ceil_div((long)(n / VEC_X), 256), 256>>>(x_next, y_next, a, y, z, c, n / VEC_X);
    } else {
        siamese_update_forward_kernel<<<ceil_div((long)n, 256), 256>>>(x_next, y_next, a, y, z, c, n);
    }
    cudaCheckLaunch();
}

// its backward for the block output: dz = dx_next / c + dy_next (floatX: the block's matmuls read it).
// a's share of dx_next is taken in siamese_input_backward.
__global__ void siamese_update_backward_kernel(floatX* dz, const float* dx_next, const float* dy_next, float c, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { dz[i] = (floatX)(dx_next[i] / c + dy_next[i]); }
}

static void siamese_update_backward(floatX* dz, const float* dx_next, const float* dy_next, float c, size_t n) {
    siamese_update_backward_kernel<<<ceil_div((long)n, 256), 256>>>(dz, dx_next, dy_next, c, n);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// The input side, backward. On entry dx = dL/dx_next (0 at the final merge), dy = dL/dy_next (0 at
// the final merge), du = dL/du. On exit dx = dL/dx, dy = dL/dy; dr_buf and da_buf (N, C) hold dr
// and da for the parameter gradients.

__global__ void siamese_input_backward_kernel(float* dx, float* dy, float* dr_buf, float* da_buf, const float* du,
                                              SiameseNorms p, SiameseStats st, const floatX* x, const floatX* y,
                                              const floatX* r, int N, int C) {
    int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= N) { return; }
    size_t o = (size_t)row * C;
    // dr = LN_back(du; r, ln)
    float mu = st.mean[row], rs = st.rstd[row];
    float2 means = ln_backward_means(du + o, r + o, p.w, mu, rs, C, lane);
    for (int i = lane; i < C; i += 32) {
        dr_buf[o + i] = ln_backward_value(du[o + i], (float)r[o + i], (float)p.w[i], mu, rs, means);
    }
    // da = dr + dx_next, and the two reductions of LN_back(dr; y) and LN_back(da; x) in one pass
    float ymu = st.y_mean[row], yrs = st.y_rstd[row], xmu = st.x_mean[row], xrs = st.x_rstd[row];
    float y1 = 0.0f, y2 = 0.0f, x1 = 0.0f, x2 = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float dr = dr_buf[o + i];  // this lane's own write
        float da = dr + dx[o + i];
        da_buf[o + i] = da;
        float gy = (float)p.yw[i] * dr, gx = (float)p.xw[i] * da;
        y1 += gy;
        y2 += gy * ((float)y[o + i] - ymu) * yrs;
        x1 += gx;
        x2 += gx * ((float)x[o + i] - xmu) * xrs;
    }
    float2 ymeans = make_float2(warp_sum(y1) / C, warp_sum(y2) / C);
    float2 xmeans = make_float2(warp_sum(x1) / C, warp_sum(x2) / C);
    // dy += LN_back(dr; y), dx = LN_back(da; x)
    for (int i = lane; i < C; i += 32) {
        dy[o + i] += ln_backward_value(dr_buf[o + i], (float)y[o + i], (float)p.yw[i], ymu, yrs, ymeans);
        dx[o + i] = ln_backward_value(da_buf[o + i], (float)x[o + i], (float)p.xw[i], xmu, xrs, xmeans);
    }
}

// the row kernel, then the parameter gradients of the three LayerNorms (deterministic column sums)
static void siamese_input_backward(float* dx, float* dy, float* dr_buf, float* da_buf, const float* du,
                                   SiameseNormGrads g, SiameseNorms p, SiameseStats st, const floatX* x, const floatX* y,
                                   const floatX* r, int N, int C) {
    siamese_input_backward_kernel<<<row_blocks(N), ROW_WARPS * 32>>>(dx, dy, dr_buf, da_buf, du, p, st, x, y, r, N, C);
    cudaCheckLaunch();
    ColumnJobs<float> jobs = {};
    jobs.job[0] = ln_job(g.w, g.b, du, r, st.mean, st.rstd);
    jobs.job[1] = ln_job(g.yw, g.yb, dr_buf, y, st.y_mean, st.y_rstd);
    jobs.job[2] = ln_job(g.xw, g.xb, da_buf, x, st.x_mean, st.x_rstd);
    column_grads(jobs, 3, N, C);
}

#endif // SIAMESE_CUH
