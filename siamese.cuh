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
    VEC_X                                                 floatX elements in 16 bytes
  the held rows (a row's share per lane in registers):
    template <typename T, int W> struct HeldRow { Pack<T, W> v[K]; const T* row; }
    template <int W, typename F> __device__ void for_lane_vectors(int C, int lane, F f)   f(k, i) per vector
    template <typename T, int W> __device__ Pack<T, W> held(const HeldRow<T, W>& h, int k, int i),
                                 __device__ void hold(HeldRow<T, W>& h, int k, const Pack<T, W>& v),
                                 __device__ HeldRow<T, W> held_load(const T* row, int C, int lane)
    template <int W> __device__ float2 held_row_stats(const HeldRow<floatX, W>& h, int C, int lane)
  the LayerNorm backward and its parameter gradients summed per block of rows:
    template <int W> __device__ float2 ln_backward_means(const HeldRow<float, W>& dout,
                                        const HeldRow<floatX, W>& x, const floatX* w, float mean,
                                        float rstd, int C, int lane)
    __device__ float ln_backward_value(float dout, float x, float w, float mean, float rstd, float2 means)
    template <typename RowFn, typename ColumnFn> __device__ void ln_backward_rounds(int N,
                                        int block_rows, RowFn per_row, ColumnFn per_column)
    template <int W, typename F> __device__ void for_owned_vectors(int C, F f)
    template <int W> __device__ void ln_sums_zero(float* sums, int n, int C),
                                     ln_sums_store(float* partials, const float* sums, int n, int C)
    template <int W, int n> __device__ void ln_sums_add(float* sums, const float (&g)[n][W], int C, int i)
    LnBackwardLaunch { int blocks, block_rows; size_t smem; }
    LnBackwardLaunch ln_backward_launch(const void* kernel, int n, int N, int C, const char* what)
    void ln_grads_finish(float* const* grads, int n, int N, int C)   host: the partials into the gradients
    float* ln_partials                                    the blocks' partial sums (device)

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
(N, C) tensors seven times. One warp per row does it all with the row in registers (HeldRow,
train_gpt2.cu: the first 1024 columns; a longer row re-reads the rest from L1/L2): it reads x and
y once, computes the statistics of LN(x) and LN(y) in fp32 from registers (two passes each: mean,
then the variance around it), writes a and r, computes the statistics of r from the values it
wrote, as rounded (so that the backward pass, which recomputes r-hat from the stored r, sees
exactly what the forward pass normalised) and writes u. It saves the six (mean, rstd) numbers per
row.
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

which is again a row kernel (siamese_input_backward_kernel): three LN backwards chained in
registers and L1, with dr and da recomputed where they are needed again rather than stored. The
LayerNorm PARAMETER gradients are sums over all rows; the kernel sums them per block of rows as it
goes (in shared memory, each column's sum owned by one thread, rows in a fixed order) and a short
column sum adds the blocks' partial sums (ln_grads_finish, train_gpt2.cu): deterministic, no
atomics, no second pass over the rows.

Memory traffic, counted for GPT-2 124M (C = 768) at B = 64, T = 1024 (N = 65536 rows), bf16
build: one bf16 (N, C) tensor ("a pass") is 100.7 MB, an fp32 one two passes. Each count is the
(N, C) tensors a kernel must read and write from DRAM where each row, once read, stays on chip
(registers, L1 or L2) while its kernel works on it; dev/cuda/README.md has bytes and FLOPs per
launch, and the reads a kernel asks of L1/L2 beyond that.
    input side backward, per sublayer: 14.2 passes: the least, 14 (read du, dx_next, dy_next, x,
      y, r; write dx, dy, dz_prev), and 0.2 for the statistics and the blocks' partial sums
      (9.4 MB, written, then read by ln_grads_finish). A row kernel that writes dr and da to fp32
      scratch for a separate three-job column sum moves 31: 22 in its own passes (14 + dr, da
      written and read back) and 9 in the column sums (du, r, dr, y, da, x read again). The
      final merge: 10.2 (no dx_next, dy_next to read) against 35 (their zeroing included).
    update + input side forward, per sublayer: 8 passes (read a_prev, y_prev, z; write x, y, a,
      r, u), the least; with the row held in registers nothing is read twice from L1/L2 either
      (a kernel whose every pass re-reads the row issues 16 passes' worth of loads and stores).
    the plain LayerNorm backward (train_gpt2.cu; pre, post, final LN): 7, 6 and 5 passes, the
      least, against 10, 9 and 8 with its column sums apart.

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

// The input side of one row whose x and y the warp holds (HeldRow: registers for the first
// ROW_HELD_COLS columns): the statistics of x and y from registers, then a, r (r held in turn, for
// its statistics and u), u and the six statistics. Each of a, r, u is written once; nothing is
// read again from memory where the row is held whole.
// SAVED: the backward's recompute (-r 2). The six statistics are read from st instead (the forward
// pass saved them from these very rows), and the same code then rebuilds a, r and u bit for bit.
template <int W, bool SAVED>
__device__ void siamese_input_row(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st,
                                  const HeldRow<floatX, W>& x, const HeldRow<floatX, W>& y, SiameseNorms p, int row,
                                  int C, int lane) {
    size_t o = (size_t)row * C;
    float2 sx = SAVED ? make_float2(st.x_mean[row], st.x_rstd[row]) : held_row_stats<W>(x, C, lane);
    float2 sy = SAVED ? make_float2(st.y_mean[row], st.y_rstd[row]) : held_row_stats<W>(y, C, lane);
    // r = LN(x) + LN(y), held as stored (rounded): its statistics are taken over those values
    HeldRow<floatX, W> r = {};
    r.row = r_out + o;
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<floatX, W> xv = held(x, k, i), xw = load_pack<W>(p.xw + i), xb = load_pack<W>(p.xb + i);
        Pack<floatX, W> yv = held(y, k, i), yw = load_pack<W>(p.yw + i), yb = load_pack<W>(p.yb + i), av, rv;
        for (int e = 0; e < W; e++) {
            float a = ((float)xv.v[e] - sx.x) * sx.y * (float)xw.v[e] + (float)xb.v[e];
            float ly = ((float)yv.v[e] - sy.x) * sy.y * (float)yw.v[e] + (float)yb.v[e];
            av.v[e] = (floatX)a;
            rv.v[e] = (floatX)(a + ly);
        }
        if (a_out) { store_pack<W>(a_out + o + i, av); }
        store_pack<W>(r_out + o + i, rv);
        hold(r, k, rv);
    });
    float2 sr = SAVED ? make_float2(st.mean[row], st.rstd[row]) : held_row_stats<W>(r, C, lane);
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<floatX, W> rv = held(r, k, i), w = load_pack<W>(p.w + i), b = load_pack<W>(p.b + i), uv;
        for (int e = 0; e < W; e++) { uv.v[e] = (floatX)(((float)rv.v[e] - sr.x) * sr.y * (float)w.v[e] + (float)b.v[e]); }
        store_pack<W>(u_out + o + i, uv);
    });
    if (lane == 0 && !SAVED) {
        st.x_mean[row] = sx.x;
        st.x_rstd[row] = sx.y;
        st.y_mean[row] = sy.x;
        st.y_rstd[row] = sy.y;
        st.mean[row] = sr.x;
        st.rstd[row] = sr.y;
    }
}

template <int W, bool SAVED = false>
__global__ void siamese_input_forward_kernel(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st,
                                             const floatX* x, const floatX* y, SiameseNorms p, int N, int C) {
    int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= N) { return; }
    size_t o = (size_t)row * C;
    HeldRow<floatX, W> xh = held_load<floatX, W>(x + o, C, lane), yh = held_load<floatX, W>(y + o, C, lane);
    siamese_input_row<W, SAVED>(a_out, r_out, u_out, st, xh, yh, p, row, C, lane);
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

// the backward's recompute (-r 2): r and u of an input side again, from its x and y and the
// statistics the forward pass saved in st (a is not needed by the backward: not written). The same
// row code as the forward pass (siamese_input_row), so the same floats, whichever forward kernel
// (this one's or the update's) made them; at either width (the width orders only the sums of
// the statistics, which are not taken here).
static void siamese_input_recompute(floatX* r_out, floatX* u_out, SiameseStats st, const floatX* x, const floatX* y,
                                    SiameseNorms p, int N, int C) {
    const void* rows[] = {r_out, u_out, x, y};
    auto kernel = siamese_row_width(C, rows, 4, p) == VEC_X ? siamese_input_forward_kernel<VEC_X, true>
                                                            : siamese_input_forward_kernel<1, true>;
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(nullptr, r_out, u_out, st, x, y, p, N, C);
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
// y = y_prev + z in registers (siamese_update_value), writes each once (the backward pass reads
// them) and keeps them (HeldRow) for the input side of the row (siamese_input_row). Against an
// element-wise update kernel followed by siamese_input_forward_kernel: one launch fewer per
// sublayer, x and y (two (N, C) tensors) never read back, and the same code on the same values,
// so the results are bit-identical to the two kernels (dev/cuda/siamese_input_forward.cu checks
// that).
template <int W>
__global__ void siamese_update_input_forward_kernel(floatX* x, floatX* y, const floatX* a_prev, const floatX* y_prev,
                                                    const floatX* z, float c, floatX* a_out, floatX* r_out,
                                                    floatX* u_out, SiameseStats st, SiameseNorms p, int N, int C) {
    int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= N) { return; }
    size_t o = (size_t)row * C;
    HeldRow<floatX, W> xh = {}, yh = {};
    xh.row = x + o;
    yh.row = y + o;
    for_lane_vectors<W>(C, lane, [&](int k, int i) {
        Pack<floatX, W> av = load_pack<W>(a_prev + o + i), yv = load_pack<W>(y_prev + o + i), zv = load_pack<W>(z + o + i);
        Pack<floatX, W> xn, yn;
        for (int e = 0; e < W; e++) { siamese_update_value((float)av.v[e], (float)yv.v[e], (float)zv.v[e], c, &xn.v[e], &yn.v[e]); }
        store_pack<W>(x + o + i, xn);
        store_pack<W>(y + o + i, yn);
        hold(xh, k, xn);
        hold(yh, k, yn);
    });
    siamese_input_row<W, false>(a_out, r_out, u_out, st, xh, yh, p, row, C, lane);
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
// The input side, backward. On entry dx = dL/dx_next and dy = dL/dy_next where streams_in is 1;
// at the final merge (streams_in 0) nothing flows in from a next sublayer and dx, dy are outputs
// only. du = dL/du. On exit dx = dL/dx, dy = dL/dy, and the six parameter gradients have grown by
// this input side's share (+=).
//
// The rows go in blocks, ROW_WARPS rows at a time (ln_backward_rounds, train_gpt2.cu):
//   step 1, one warp per row: the means of the three LN backwards. mean(g), mean(g rhat) of the
//     block-input LN from du and r (held in registers), then dr = LN_back(du) and da = dr + dx_next
//     element by element, and the means of LN_back(dr; y) and LN_back(da; x) from them;
//   step 2, the block over columns: for each row of the round, dr and da again from du, r, dx_next
//     (recomputing costs a few flops; storing them would cost two fp32 (N, C) tensors written and
//     read back), dy = dy_next + LN_back(dr; y), dx = LN_back(da; x), dz_prev, and the six
//     parameter-gradient terms (du rhat, du; dr yhat, dr; da xhat, da) into the thread's sums.
// ln_grads_finish then adds the blocks' partial sums into the gradients.
//
// The update's backward folded in: dx and dy on exit are dx_next and dy_next of the sublayer
// before, whose update backward needs them to form its dz. Given dz_prev (and that sublayer's scale
// c_prev), step 2 writes dz_prev = siamese_update_dz(dx, dy, c_prev) from the values in registers:
// no launch and no read of dx and dy (fp32) of its own, the same numbers as an element-wise kernel
// over dx and dy (dev/cuda/siamese_input_backward.cu checks that).

// the six sums of an input side, in the order of SiameseNormsT: (xw, xb, yw, yb, w, b)
#define SIAMESE_SUMS 6

// what step 2 needs of a row besides its elements: the (mean(g), mean(g vhat)) of each LN backward
typedef struct {
    float2 ln, y, x;
} SiameseRowMeans;

template <int W>
__global__ void siamese_input_backward_kernel(float* dx, float* dy, floatX* dz_prev, float c_prev, int streams_in,
                                              float* partials, const float* du, SiameseNorms p, SiameseStats st,
                                              const floatX* x, const floatX* y, const floatX* r, int N, int C,
                                              int block_rows) {
    extern __shared__ float sums[];                    // (6, C) in SIAMESE_SUMS order
    __shared__ SiameseRowMeans row_means[ROW_WARPS];  // step 1 -> step 2, per row of the round
    int lane = threadIdx.x % 32;
    ln_sums_zero<W>(sums, SIAMESE_SUMS, C);
    ln_backward_rounds(N, block_rows,
        [&](int row, int slot) {
            size_t o = (size_t)row * C;
            float mu = st.mean[row], rs = st.rstd[row];
            HeldRow<float, W> g = held_load<float, W>(du + o, C, lane);
            HeldRow<floatX, W> rh = held_load<floatX, W>(r + o, C, lane);
            float2 means = ln_backward_means<W>(g, rh, p.w, mu, rs, C, lane);
            // dr = LN_back(du; r), da = dr + dx_next, and the two reductions of LN_back(dr; y) and
            // LN_back(da; x) in one pass
            float ymu = st.y_mean[row], yrs = st.y_rstd[row], xmu = st.x_mean[row], xrs = st.x_rstd[row];
            float y1 = 0.0f, y2 = 0.0f, x1 = 0.0f, x2 = 0.0f;
            for_lane_vectors<W>(C, lane, [&](int k, int i) {
                Pack<float, W> duv = held(g, k, i), dxn = {};
                Pack<floatX, W> rv = held(rh, k, i), wv = load_pack<W>(p.w + i);
                Pack<floatX, W> xv = load_pack<W>(x + o + i), xw = load_pack<W>(p.xw + i);
                Pack<floatX, W> yv = load_pack<W>(y + o + i), yw = load_pack<W>(p.yw + i);
                if (streams_in) { dxn = load_pack<W>(dx + o + i); }
                for (int e = 0; e < W; e++) {
                    float dr = ln_backward_value(duv.v[e], (float)rv.v[e], (float)wv.v[e], mu, rs, means);
                    float da = dr + dxn.v[e];
                    float gy = (float)yw.v[e] * dr, gx = (float)xw.v[e] * da;
                    y1 += gy;
                    y2 += gy * ((float)yv.v[e] - ymu) * yrs;
                    x1 += gx;
                    x2 += gx * ((float)xv.v[e] - xmu) * xrs;
                }
            });
            SiameseRowMeans m = {means, make_float2(warp_sum(y1) / C, warp_sum(y2) / C),
                                 make_float2(warp_sum(x1) / C, warp_sum(x2) / C)};
            if (lane == 0) { row_means[slot] = m; }
        },
        [&](int base, int rows) {
            for_owned_vectors<W>(C, [&](int i) {
                Pack<floatX, W> wv = load_pack<W>(p.w + i), yw = load_pack<W>(p.yw + i), xw = load_pack<W>(p.xw + i);
                float g[SIAMESE_SUMS][W] = {};  // this round's terms in these columns
                for (int j = 0; j < rows; j++) {
                    int row = base + j;
                    size_t o = (size_t)row * C + i;
                    SiameseRowMeans m = row_means[j];
                    float mu = st.mean[row], rs = st.rstd[row];
                    float ymu = st.y_mean[row], yrs = st.y_rstd[row], xmu = st.x_mean[row], xrs = st.x_rstd[row];
                    Pack<float, W> duv = load_pack<W>(du + o), dxv = {}, dyv = {};
                    Pack<floatX, W> rv = load_pack<W>(r + o), xv = load_pack<W>(x + o), yv = load_pack<W>(y + o), dz;
                    if (streams_in) {
                        dxv = load_pack<W>(dx + o);
                        dyv = load_pack<W>(dy + o);
                    }
                    for (int e = 0; e < W; e++) {
                        float dr = ln_backward_value(duv.v[e], (float)rv.v[e], (float)wv.v[e], mu, rs, m.ln);
                        float da = dr + dxv.v[e];
                        g[0][e] += da * (((float)xv.v[e] - xmu) * xrs);  // lnx: da xhat, da
                        g[1][e] += da;
                        g[2][e] += dr * (((float)yv.v[e] - ymu) * yrs);  // lny: dr yhat, dr
                        g[3][e] += dr;
                        g[4][e] += duv.v[e] * (((float)rv.v[e] - mu) * rs);  // ln: du rhat, du
                        g[5][e] += duv.v[e];
                        dyv.v[e] += ln_backward_value(dr, (float)yv.v[e], (float)yw.v[e], ymu, yrs, m.y);
                        dxv.v[e] = ln_backward_value(da, (float)xv.v[e], (float)xw.v[e], xmu, xrs, m.x);
                    }
                    store_pack<W>(dy + o, dyv);
                    store_pack<W>(dx + o, dxv);
                    if (dz_prev) {
                        for (int e = 0; e < W; e++) { dz.v[e] = (floatX)siamese_update_dz(dxv.v[e], dyv.v[e], c_prev); }
                        store_pack<W>(dz_prev + o, dz);
                    }
                }
                ln_sums_add<W>(sums, g, C, i);
            });
        });
    ln_sums_store<W>(partials, sums, SIAMESE_SUMS, C);
}

// the kernel above, then the blocks' partial sums into the six parameter gradients g (+=).
// dz_prev: where the folded update backward writes dz of the sublayer before (scale c_prev); NULL
// for the first sublayer. streams_in: 0 at the final merge (see above).
static void siamese_input_backward(float* dx, float* dy, floatX* dz_prev, float c_prev, int streams_in, const float* du,
                                   SiameseNormGrads g, SiameseNorms p, SiameseStats st, const floatX* x,
                                   const floatX* y, const floatX* r, int N, int C) {
    const void* rows[] = {dx, dy, dz_prev, du, x, y, r};
    auto kernel = siamese_row_width(C, rows, 7, p) == VEC_X ? siamese_input_backward_kernel<VEC_X> : siamese_input_backward_kernel<1>;
    LnBackwardLaunch l = ln_backward_launch((const void*)kernel, SIAMESE_SUMS, N, C, "siamese_input_backward");
    kernel<<<l.blocks, ROW_WARPS * 32, l.smem>>>(dx, dy, dz_prev, c_prev, streams_in, ln_partials, du, p, st, x, y, r, N, C,
                                                 l.block_rows);
    cudaCheckLaunch();
    float* grads[SIAMESE_SUMS] = {g.xw, g.xb, g.yw, g.yb, g.w, g.b};
    ln_grads_finish(grads, SIAMESE_SUMS, N, C);
}

#endif // SIAMESE_CUH
