/*
siamese.cuh: how SiameseNorm maps onto a GPU. A chapter of train_gpt2.cu, included by it after
its LayerNorm kernels, whose helpers it reuses.

What the includer must define before `#include "siamese.cuh"` (train_gpt2.cu does, in Part 0 and
the LayerNorm section of Part 1; tests/check_siamese_cuh.cu defines exactly this list and nothing
more, and `make check-cuda` compiles it, so a new dependency fails there until it is listed here):

    floatX                      type: float (FP32 build) or __nv_bfloat16, the storage of activations
    ROW_WARPS                   macro: warps per block of a row kernel (one warp per row)
    cudaCheckLaunch()           macro: checks the last kernel launch, fatal on error
    int row_blocks(int N)                                 host: blocks of a row kernel for N rows
    __device__ int warp_row()                             the row of the calling warp
    __device__ float warp_sum(float v)                    sum over the 32 lanes, every lane gets it
    template <typename T, int W> struct Pack { T v[W]; }  W elements read or written as one access
    template <int W, typename T> __device__ Pack<T, W> load_pack(const T* p), and
                                 __device__ void store_pack(T* p, const Pack<T, W>& v)
    int row_width(size_t C, const void* const* p, int n) host: VEC_X or 1, the width of a row kernel
    template <int W> __device__ float2 ln_row_stats(const floatX* x, int C, int lane)   (mean, rstd) of a row
    template <int W> __device__ float2 ln_backward_means(const float* dout, const floatX* x,
                                        const floatX* w, float mean, float rstd, int C, int lane)
    __device__ float ln_backward_value(float dout, float x, float w, float mean, float rstd, float2 means)
    ColumnJob<float>, ColumnJobs<float>                   LayerNorm parameter-gradient jobs
    ColumnJob<float> ln_job(float* dw, float* db, const float* dout, const floatX* inp,
                            const float* mean, const float* rstd)
    void column_grads(const ColumnJobs<float>& jobs, int njobs, int N, int C)
                                                          deterministic column sums of up to 3 jobs
    VEC_X                                                 floatX elements in 16 bytes

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
The update side is element-wise; it runs inside the next sublayer's input kernel (or the final
merge's: siamese_update_input_forward_kernel), which forms x_next and y_next in registers, writes
them once and normalises them, with no launch and no second read of its own. The update formula
itself is written once, in siamese_update_value.

Backward, per row, with dx and dy holding dL/dx_next and dL/dy_next on entry:

    dz = dx_next / c + dy_next                           (written by the input backward of the
                                                          sublayer after, or of the final merge)
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

// Every row kernel here takes a width W (train_gpt2.cu, Pack): W = 1 walks the columns lane,
// lane + 32, ... one element at a time; W = VEC_X (where C % VEC_X == 0 and the tensors are
// 16-byte aligned: row_width) moves 16 bytes of floatX per load and store, lane owning the vectors
// lane, lane + 32, ... The arithmetic is the same code for both.

// the input side of one row: the statistics of x and y, then a, r, u and the six statistics.
// x and y point at the row.
template <int W>
__device__ void siamese_input_row(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st, const floatX* x,
                                  const floatX* y, SiameseNorms p, int row, int C, int lane) {
    size_t o = (size_t)row * C;
    float2 sx = ln_row_stats<W>(x, C, lane);
    float2 sy = ln_row_stats<W>(y, C, lane);
    // r = LN(x) + LN(y); its statistics are taken over the stored (rounded) values
    floatX* r = r_out + o;
    float sum = 0.0f;
    for (int i = lane * W; i < C; i += 32 * W) {
        Pack<floatX, W> xv = load_pack<W>(x + i), xw = load_pack<W>(p.xw + i), xb = load_pack<W>(p.xb + i);
        Pack<floatX, W> yv = load_pack<W>(y + i), yw = load_pack<W>(p.yw + i), yb = load_pack<W>(p.yb + i), av, rv;
        for (int e = 0; e < W; e++) {
            float a = ((float)xv.v[e] - sx.x) * sx.y * (float)xw.v[e] + (float)xb.v[e];
            float ly = ((float)yv.v[e] - sy.x) * sy.y * (float)yw.v[e] + (float)yb.v[e];
            av.v[e] = (floatX)a;
            rv.v[e] = (floatX)(a + ly);
            sum += (float)rv.v[e];
        }
        if (a_out) { store_pack<W>(a_out + o + i, av); }
        store_pack<W>(r + i, rv);
    }
    float mean = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int i = lane * W; i < C; i += 32 * W) {  // this lane's own writes
        Pack<floatX, W> rv = load_pack<W>(r + i);
        for (int e = 0; e < W; e++) { float d = (float)rv.v[e] - mean; sq += d * d; }
    }
    float rstd = rsqrtf(warp_sum(sq) / C + 1e-5f);
    floatX* u = u_out + o;
    for (int i = lane * W; i < C; i += 32 * W) {
        Pack<floatX, W> rv = load_pack<W>(r + i), w = load_pack<W>(p.w + i), b = load_pack<W>(p.b + i), uv;
        for (int e = 0; e < W; e++) { uv.v[e] = (floatX)(((float)rv.v[e] - mean) * rstd * (float)w.v[e] + (float)b.v[e]); }
        store_pack<W>(u + i, uv);
    }
    if (lane == 0) {
        st.x_mean[row] = sx.x;
        st.x_rstd[row] = sx.y;
        st.y_mean[row] = sy.x;
        st.y_rstd[row] = sy.y;
        st.mean[row] = mean;
        st.rstd[row] = rstd;
    }
}

template <int W>
__global__ void siamese_input_forward_kernel(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st,
                                             const floatX* x, const floatX* y, SiameseNorms p, int N, int C) {
    int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= N) { return; }
    size_t o = (size_t)row * C;
    siamese_input_row<W>(a_out, r_out, u_out, st, x + o, y + o, p, row, C, lane);
}

// the width of an input side's row kernel (row_width) over its n row tensors and the six norm
// vectors of p: VEC_X only where both allow it
static int siamese_row_width(int C, const void* const* rows, int n, SiameseNorms p) {
    const void* norms[] = {p.xw, p.xb, p.yw, p.yb, p.w, p.b};
    return row_width(C, rows, n) == VEC_X ? row_width(C, norms, 6) : 1;
}

static void siamese_input_forward(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st, const floatX* x,
                                  const floatX* y, SiameseNorms p, int N, int C) {
    const void* rows[] = {a_out, r_out, u_out, x, y};
    auto kernel = siamese_row_width(C, rows, 5, p) == VEC_X ? siamese_input_forward_kernel<VEC_X> : siamese_input_forward_kernel<1>;
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(a_out, r_out, u_out, st, x, y, p, N, C);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// The update side, forward: x_next = a + z / c and y_next = y + z. The formula lives in
// siamese_update_value and nowhere else (its backward in siamese_update_dz); the kernels that run
// it are the next input side's, forward and backward.

// one element of the update, rounded to floatX as stored
__device__ __forceinline__ void siamese_update_value(float a, float y, float z, float c, floatX* x_next, floatX* y_next) {
    *x_next = (floatX)(a + z / c);
    *y_next = (floatX)(y + z);
}

// its backward for the block output: dz = dx_next / c + dy_next (a's share of dx_next is taken in
// siamese_input_backward)
__device__ __forceinline__ float siamese_update_dz(float dx_next, float dy_next, float c) { return dx_next / c + dy_next; }

// The update folded into the next input side: one warp per row forms x = a_prev + z / c and
// y = y_prev + z in registers (siamese_update_value) and writes each once (the backward pass reads
// them); the input side of the row (siamese_input_row) then reads back the lane's own writes.
// Against an element-wise update kernel followed by siamese_input_forward_kernel: one launch
// fewer per sublayer, x and y (two (N, C) tensors) read back by the warp that has just written
// them instead of by a second kernel, and the same code on the same values, so the results are
// bit-identical to the two kernels (dev/cuda/siamese_input_forward.cu checks that).
template <int W>
__global__ void siamese_update_input_forward_kernel(floatX* x, floatX* y, const floatX* a_prev, const floatX* y_prev,
                                                    const floatX* z, float c, floatX* a_out, floatX* r_out,
                                                    floatX* u_out, SiameseStats st, SiameseNorms p, int N, int C) {
    int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= N) { return; }
    size_t o = (size_t)row * C;
    for (int i = lane * W; i < C; i += 32 * W) {
        Pack<floatX, W> av = load_pack<W>(a_prev + o + i), yv = load_pack<W>(y_prev + o + i), zv = load_pack<W>(z + o + i);
        Pack<floatX, W> xn, yn;
        for (int e = 0; e < W; e++) { siamese_update_value((float)av.v[e], (float)yv.v[e], (float)zv.v[e], c, &xn.v[e], &yn.v[e]); }
        store_pack<W>(x + o + i, xn);
        store_pack<W>(y + o + i, yn);
    }
    siamese_input_row<W>(a_out, r_out, u_out, st, x + o, y + o, p, row, C, lane);
}

// x, y = the update of the sublayer before (a_prev, y_prev, its output z, its scale c), then the
// input side of the next sublayer (or of the final merge) on them, in one kernel
static void siamese_update_input_forward(floatX* x, floatX* y, const floatX* a_prev, const floatX* y_prev,
                                         const floatX* z, float c, floatX* a_out, floatX* r_out, floatX* u_out,
                                         SiameseStats st, SiameseNorms p, int N, int C) {
    const void* rows[] = {x, y, a_prev, y_prev, z, a_out, r_out, u_out};
    auto kernel = siamese_row_width(C, rows, 8, p) == VEC_X ? siamese_update_input_forward_kernel<VEC_X> : siamese_update_input_forward_kernel<1>;
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(x, y, a_prev, y_prev, z, c, a_out, r_out, u_out, st, p, N, C);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// The input side, backward. On entry dx = dL/dx_next (0 at the final merge), dy = dL/dy_next (0 at
// the final merge), du = dL/du. On exit dx = dL/dx, dy = dL/dy; dr_buf and da_buf (N, C) hold dr
// and da for the parameter gradients.
//
// The update's backward folded in: dx and dy on exit are dx_next and dy_next of the sublayer
// before, whose update backward needs them to form its dz. Given dz_prev (and that sublayer's scale
// c_prev), the last loop writes dz_prev = siamese_update_dz(dx, dy, c_prev) from the values in
// registers: no launch and no read of dx and dy (fp32) of its own, the same numbers as an
// element-wise kernel over dx and dy (dev/cuda/siamese_input_backward.cu checks that).

template <int W>
__global__ void siamese_input_backward_kernel(float* dx, float* dy, float* dr_buf, float* da_buf, floatX* dz_prev,
                                              float c_prev, const float* du, SiameseNorms p, SiameseStats st,
                                              const floatX* x, const floatX* y, const floatX* r, int N, int C) {
    int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= N) { return; }
    size_t o = (size_t)row * C;
    // dr = LN_back(du; r, ln)
    float mu = st.mean[row], rs = st.rstd[row];
    float2 means = ln_backward_means<W>(du + o, r + o, p.w, mu, rs, C, lane);
    for (int i = lane * W; i < C; i += 32 * W) {
        Pack<float, W> duv = load_pack<W>(du + o + i), dr;
        Pack<floatX, W> rv = load_pack<W>(r + o + i), wv = load_pack<W>(p.w + i);
        for (int e = 0; e < W; e++) { dr.v[e] = ln_backward_value(duv.v[e], (float)rv.v[e], (float)wv.v[e], mu, rs, means); }
        store_pack<W>(dr_buf + o + i, dr);
    }
    // da = dr + dx_next, and the two reductions of LN_back(dr; y) and LN_back(da; x) in one pass
    float ymu = st.y_mean[row], yrs = st.y_rstd[row], xmu = st.x_mean[row], xrs = st.x_rstd[row];
    float y1 = 0.0f, y2 = 0.0f, x1 = 0.0f, x2 = 0.0f;
    for (int i = lane * W; i < C; i += 32 * W) {
        Pack<float, W> dr = load_pack<W>(dr_buf + o + i), dxn = load_pack<W>(dx + o + i), da;  // dr: this lane's own write
        Pack<floatX, W> xv = load_pack<W>(x + o + i), xw = load_pack<W>(p.xw + i);
        Pack<floatX, W> yv = load_pack<W>(y + o + i), yw = load_pack<W>(p.yw + i);
        for (int e = 0; e < W; e++) {
            da.v[e] = dr.v[e] + dxn.v[e];
            float gy = (float)yw.v[e] * dr.v[e], gx = (float)xw.v[e] * da.v[e];
            y1 += gy;
            y2 += gy * ((float)yv.v[e] - ymu) * yrs;
            x1 += gx;
            x2 += gx * ((float)xv.v[e] - xmu) * xrs;
        }
        store_pack<W>(da_buf + o + i, da);
    }
    float2 ymeans = make_float2(warp_sum(y1) / C, warp_sum(y2) / C);
    float2 xmeans = make_float2(warp_sum(x1) / C, warp_sum(x2) / C);
    // dy += LN_back(dr; y), dx = LN_back(da; x), and dz of the sublayer before
    for (int i = lane * W; i < C; i += 32 * W) {
        Pack<float, W> dr = load_pack<W>(dr_buf + o + i), da = load_pack<W>(da_buf + o + i), dyv = load_pack<W>(dy + o + i), dxv;
        Pack<floatX, W> xv = load_pack<W>(x + o + i), xw = load_pack<W>(p.xw + i);
        Pack<floatX, W> yv = load_pack<W>(y + o + i), yw = load_pack<W>(p.yw + i), dz;
        for (int e = 0; e < W; e++) {
            dyv.v[e] += ln_backward_value(dr.v[e], (float)yv.v[e], (float)yw.v[e], ymu, yrs, ymeans);
            dxv.v[e] = ln_backward_value(da.v[e], (float)xv.v[e], (float)xw.v[e], xmu, xrs, xmeans);
        }
        store_pack<W>(dy + o + i, dyv);
        store_pack<W>(dx + o + i, dxv);
        if (dz_prev) {
            for (int e = 0; e < W; e++) { dz.v[e] = (floatX)siamese_update_dz(dxv.v[e], dyv.v[e], c_prev); }
            store_pack<W>(dz_prev + o + i, dz);
        }
    }
}

// the row kernel, then the parameter gradients of the three LayerNorms (deterministic column sums).
// dz_prev: where the folded update backward writes dz of the sublayer before (scale c_prev); NULL
// for the first sublayer
static void siamese_input_backward(float* dx, float* dy, float* dr_buf, float* da_buf, floatX* dz_prev, float c_prev,
                                   const float* du, SiameseNormGrads g, SiameseNorms p, SiameseStats st,
                                   const floatX* x, const floatX* y, const floatX* r, int N, int C) {
    const void* rows[] = {dx, dy, dr_buf, da_buf, dz_prev, du, x, y, r};
    auto kernel = siamese_row_width(C, rows, 9, p) == VEC_X ? siamese_input_backward_kernel<VEC_X> : siamese_input_backward_kernel<1>;
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(dx, dy, dr_buf, da_buf, dz_prev, c_prev, du, p, st, x, y, r, N, C);
    cudaCheckLaunch();
    ColumnJobs<float> jobs = {};
    jobs.job[0] = ln_job(g.w, g.b, du, r, st.mean, st.rstd);
    jobs.job[1] = ln_job(g.yw, g.yb, dr_buf, y, st.y_mean, st.y_rstd);
    jobs.job[2] = ln_job(g.xw, g.xb, da_buf, x, st.x_mean, st.x_rstd);
    column_grads(jobs, 3, N, C);
}

#endif // SIAMESE_CUH
