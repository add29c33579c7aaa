/*
dev/cuda/layernorm_v1.h: version 1 of the LayerNorm row kernels, plain and SiameseNorm, for the
experiments that check and time them beside the trainer's (layernorm.cu, siamese_input_forward.cu,
siamese_input_backward.cu). Included after trainer.h: it uses the trainer's helpers (Pack,
load_pack, warp_sum, row_width, ROW_KERNEL, ln_backward_value, siamese_update_value, ...).

Forward: one warp per row, every pass over the row read from memory (L1/L2 after the first):
    ln_row_stats_v1           two passes over the row (mean, then the variance around it)
    layernorm_forward_v1      the statistics, then a third pass writes out
    siamese_input_forward_v1  x and y twice each for their statistics, a third time for a and r
                              (r's mean summed as it is written); r read back twice (its
                              variance, then u)
    siamese_update_input_forward_v1   the update (x = a_prev + z / c, y = y_prev + z) written,
                              then the input side above reading x and y back
Backward: the row kernels write what the parameter gradients need to memory, and separate
column-sum kernels read it back:
    layernorm_backward_v1     the column sums of dw, db first (dout, inp and the statistics read
                              once more), then the row kernel (dout read twice, once for the two
                              means and once for dinp)
    siamese_input_backward_v1 the row kernel writes dr = LN_back(du; r) and da = dr + dx_next to two
                              fp32 (N, C) scratch tensors and reads them back for dy, dx (and
                              dz_prev), then three column-sum jobs read du, r, dr, y, da, x
The column sums: for up to three jobs at once (blockIdx.y picks one), dw[c] += sum_r dout * xhat
and db[c] += sum_r dout in two stages with no atomics: the rows split into column_splits(N)
chunks (the trainer's), a block of 32 x 32 threads per 32 columns of a chunk writing its sums,
then a second kernel adding the chunks of each column in order.

Every kernel here computes each value in the same order as the trainer's kernels of the same job,
except the parameter-gradient sums: so the trainer's outputs must be bit-identical to these but
for dw, db (the experiments check that).
*/
#ifndef DEV_CUDA_LAYERNORM_V1_H
#define DEV_CUDA_LAYERNORM_V1_H

// ----------------------------------------------------------------------------
// forward

template <int W>
__device__ __forceinline__ float2 ln_row_stats_v1(const floatX* x, int C, int lane) {
    float sum = 0.0f;
    for (int i = lane * W; i < C; i += 32 * W) {
        Pack<floatX, W> v = load_pack<W>(x + i);
        for (int e = 0; e < W; e++) { sum += (float)v.v[e]; }
    }
    float mean = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int i = lane * W; i < C; i += 32 * W) {
        Pack<floatX, W> v = load_pack<W>(x + i);
        for (int e = 0; e < W; e++) { float d = (float)v.v[e] - mean; sq += d * d; }
    }
    float rstd = rsqrtf(warp_sum(sq) / C + 1e-5f);
    return make_float2(mean, rstd);
}

template <int W>
__global__ void layernorm_forward_v1_kernel(floatX* out, LnStats* stats, const floatX* inp, const floatX* w,
                                            const floatX* b, int N, int C) {
    int r = warp_row(), lane = threadIdx.x % 32;
    if (r >= N) { return; }
    const floatX* x = inp + (size_t)r * C;
    float2 st = ln_row_stats_v1<W>(x, C, lane);
    floatX* o = out + (size_t)r * C;
    for (int i = lane * W; i < C; i += 32 * W) {
        Pack<floatX, W> xv = load_pack<W>(x + i), wv = load_pack<W>(w + i), bv = load_pack<W>(b + i), ov;
        for (int e = 0; e < W; e++) { ov.v[e] = (floatX)(((float)xv.v[e] - st.x) * st.y * (float)wv.v[e] + (float)bv.v[e]); }
        store_pack<W>(o + i, ov);
    }
    if (lane == 0) { stats[r] = LnStats{st.x, st.y}; }
}

static void layernorm_forward_v1(floatX* out, LnStats* stats, const floatX* inp, const floatX* w, const floatX* b,
                                 int N, int C) {
    auto kernel = ROW_KERNEL(row_width(C, {out, inp, w, b}), layernorm_forward_v1_kernel);
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(out, stats, inp, w, b, N, C);
    cudaCheckLaunch();
}

// the input side of one row (x and y point at the row)
template <int W>
__device__ void siamese_input_row_v1(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st, const floatX* x,
                                     const floatX* y, SiameseNorms p, int row, int C, int lane) {
    size_t o = (size_t)row * C;
    float2 sx = ln_row_stats_v1<W>(x, C, lane);
    float2 sy = ln_row_stats_v1<W>(y, C, lane);
    // r = LN(x) + LN(y); its mean is summed as r is written, its variance over r read back
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
        st.x[row] = LnStats{sx.x, sx.y};
        st.y[row] = LnStats{sy.x, sy.y};
        st.ln[row] = LnStats{mean, rstd};
    }
}

template <int W>
__global__ void siamese_input_forward_v1_kernel(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st,
                                                const floatX* x, const floatX* y, SiameseNorms p, int N, int C) {
    int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= N) { return; }
    size_t o = (size_t)row * C;
    siamese_input_row_v1<W>(a_out, r_out, u_out, st, x + o, y + o, p, row, C, lane);
}

static void siamese_input_forward_v1(floatX* a_out, floatX* r_out, floatX* u_out, SiameseStats st, const floatX* x,
                                     const floatX* y, SiameseNorms p, int N, int C) {
    int width = row_width(C, {a_out, r_out, u_out, x, y, p.xw, p.xb, p.yw, p.yb, p.w, p.b});
    auto kernel = ROW_KERNEL(width, siamese_input_forward_v1_kernel);
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(a_out, r_out, u_out, st, x, y, p, N, C);
    cudaCheckLaunch();
}

template <int W>
__global__ void siamese_update_input_forward_v1_kernel(floatX* x, floatX* y, const floatX* a_prev,
                                                       const floatX* y_prev, const floatX* z, float c, floatX* a_out,
                                                       floatX* r_out, floatX* u_out, SiameseStats st, SiameseNorms p,
                                                       int N, int C) {
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
    siamese_input_row_v1<W>(a_out, r_out, u_out, st, x + o, y + o, p, row, C, lane);
}

static void siamese_update_input_forward_v1(floatX* x, floatX* y, const floatX* a_prev, const floatX* y_prev,
                                            const floatX* z, float c, floatX* a_out, floatX* r_out, floatX* u_out,
                                            SiameseStats st, SiameseNorms p, int N, int C) {
    int width = row_width(C, {x, y, a_prev, y_prev, z, a_out, r_out, u_out, p.xw, p.xb, p.yw, p.yb, p.w, p.b});
    auto kernel = ROW_KERNEL(width, siamese_update_input_forward_v1_kernel);
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(x, y, a_prev, y_prev, z, c, a_out, r_out, u_out, st, p, N, C);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// the LayerNorm column sums: dw[c] += sum_r dout * xhat (skipped for a bias job, inp NULL), db[c] += sum_r dout

typedef struct {
    float* dw;
    float* db;
    const float* dout;  // (N, C)
    const floatX* inp;  // (N, C), NULL for a bias-only job
    const LnStats* st;  // (N)
} LnColumnJob;
typedef struct {
    LnColumnJob job[3];
} LnColumnJobs;

// stage 1's output: (3 jobs, 2 sums, COLUMN_MAX_SPLITS, C) floats, for C up to ln_v1_partials_cols
static float* ln_v1_partials = NULL;
static size_t ln_v1_partials_cols = 0;

static inline void ln_v1_partials_reserve(int C) {
    if ((size_t)C <= ln_v1_partials_cols) { return; }
    cudaCheck(cudaFree(ln_v1_partials));
    cudaCheck(cudaMalloc((void**)&ln_v1_partials, (size_t)3 * 2 * COLUMN_MAX_SPLITS * C * sizeof(float)));
    ln_v1_partials_cols = C;
}

// the sums of job j over the rows [r_begin, r_end) for the column blockIdx.x * 32 + threadIdx.x:
// threads walk the rows 32 apart, then the 32 partial sums are added in order through shared memory
__device__ int ln_column_tile_sums_v1(const LnColumnJob& j, int C, int r_begin, int r_end, float* tw, float* tb) {
    int c = blockIdx.x * COLUMN_TILE + threadIdx.x;
    float sw = 0.0f, sb = 0.0f;
    if (c < C) {
        for (int r = r_begin + threadIdx.y; r < r_end; r += COLUMN_TILE) {
            float d = j.dout[(size_t)r * C + c];
            sb += d;
            if (j.inp) { sw += d * ((float)j.inp[(size_t)r * C + c] - j.st[r].mean) * j.st[r].rstd; }
        }
    }
    __shared__ float part_w[COLUMN_TILE][COLUMN_TILE + 1], part_b[COLUMN_TILE][COLUMN_TILE + 1];
    part_w[threadIdx.y][threadIdx.x] = sw;
    part_b[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) { return 0; }
    *tw = 0.0f;
    *tb = 0.0f;
    for (int k = 0; k < COLUMN_TILE; k++) { *tw += part_w[k][threadIdx.x]; *tb += part_b[k][threadIdx.x]; }
    return 1;
}

__global__ void ln_column_grads_v1_kernel(LnColumnJobs jobs, int N, int C, float* partials, int splits) {
    int c = blockIdx.x * COLUMN_TILE + threadIdx.x;
    int chunk = ceil_div_dev(N, splits), r_begin = blockIdx.z * chunk, r_end = r_begin + chunk < N ? r_begin + chunk : N;
    float tw, tb;
    if (ln_column_tile_sums_v1(jobs.job[blockIdx.y], C, r_begin, r_end, &tw, &tb)) {
        float* pw = partials + ((size_t)blockIdx.y * 2 * COLUMN_MAX_SPLITS + blockIdx.z) * C;
        pw[c] = tw;
        pw[(size_t)COLUMN_MAX_SPLITS * C + c] = tb;
    }
}

__global__ void ln_column_finish_v1_kernel(LnColumnJobs jobs, int C, const float* partials, int splits) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    const LnColumnJob j = jobs.job[blockIdx.y];
    const float* pw = partials + (size_t)blockIdx.y * 2 * COLUMN_MAX_SPLITS * C + c;
    const float* pb = pw + (size_t)COLUMN_MAX_SPLITS * C;
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < splits; k++) { tw += pw[(size_t)k * C]; tb += pb[(size_t)k * C]; }
    if (j.dw) { j.dw[c] += tw; }
    j.db[c] += tb;
}

static void ln_column_grads_v1(const LnColumnJobs& jobs, int njobs, int N, int C) {
    ln_v1_partials_reserve(C);
    int splits = column_splits(N);
    ln_column_grads_v1_kernel<<<dim3(ceil_div(C, COLUMN_TILE), njobs, splits), dim3(COLUMN_TILE, COLUMN_TILE)>>>(
        jobs, N, C, ln_v1_partials, splits);
    cudaCheckLaunch();
    ln_column_finish_v1_kernel<<<dim3(ceil_div(C, 256), njobs), 256>>>(jobs, C, ln_v1_partials, splits);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// backward

// (mean(g), mean(g * xhat)) of one row, g = w * dout
template <int W>
__device__ __forceinline__ LnBackMeans ln_backward_means_v1(const float* dout, const floatX* x, const floatX* w, float mean,
                                                       float rstd, int C, int lane) {
    float m1 = 0.0f, m2 = 0.0f;
    for (int i = lane * W; i < C; i += 32 * W) {
        Pack<float, W> dv = load_pack<W>(dout + i);
        Pack<floatX, W> xv = load_pack<W>(x + i), wv = load_pack<W>(w + i);
        for (int e = 0; e < W; e++) {
            float g = (float)wv.v[e] * dv.v[e];
            m1 += g;
            m2 += g * ((float)xv.v[e] - mean) * rstd;
        }
    }
    return LnBackMeans{warp_sum(m1) / C, warp_sum(m2) / C};
}

// dinp = (accumulate 0) or += (accumulate 1) dL/dinp; dinp may be dout; dinp_x a floatX copy when given
template <int W>
__global__ void layernorm_backward_v1_kernel(float* dinp, floatX* dinp_x, const float* dout, const floatX* inp,
                                             const floatX* w, const LnStats* st, int N, int C, int accumulate) {
    int r = warp_row(), lane = threadIdx.x % 32;
    if (r >= N) { return; }
    size_t o = (size_t)r * C;
    LnStats s = st[r];
    LnBackMeans means = ln_backward_means_v1<W>(dout + o, inp + o, w, s.mean, s.rstd, C, lane);
    for (int i = lane * W; i < C; i += 32 * W) {
        Pack<float, W> dv = load_pack<W>(dout + o + i), d;
        Pack<floatX, W> xv = load_pack<W>(inp + o + i), wv = load_pack<W>(w + i), dx;
        for (int e = 0; e < W; e++) { d.v[e] = ln_backward_value(dv.v[e], (float)xv.v[e], (float)wv.v[e], s, means); }
        if (accumulate) {
            Pack<float, W> prev = load_pack<W>(dinp + o + i);
            for (int e = 0; e < W; e++) { d.v[e] += prev.v[e]; }
        }
        store_pack<W>(dinp + o + i, d);
        if (dinp_x) {
            for (int e = 0; e < W; e++) { dx.v[e] = (floatX)d.v[e]; }
            store_pack<W>(dinp_x + o + i, dx);
        }
    }
}

static void layernorm_backward_v1(float* dinp, floatX* dinp_x, float* dw, float* db, const float* dout,
                                  const floatX* inp, const floatX* w, const LnStats* st, int N, int C, int accumulate) {
    LnColumnJobs jobs = {};
    jobs.job[0] = LnColumnJob{dw, db, dout, inp, st};
    ln_column_grads_v1(jobs, 1, N, C);  // first: the row kernel may overwrite dout in place
    auto kernel = ROW_KERNEL(row_width(C, {dinp, dinp_x, dout, inp, w}), layernorm_backward_v1_kernel);
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(dinp, dinp_x, dout, inp, w, st, N, C, accumulate);
    cudaCheckLaunch();
}

// the SiameseNorm input side backward: dx, dy in place (dL/dx_next, dL/dy_next on entry), dr_buf and
// da_buf (N, C) fp32 scratch, dz_prev (when given) = dx / c_prev + dy
template <int W>
__global__ void siamese_input_backward_v1_kernel(float* dx, float* dy, float* dr_buf, float* da_buf, floatX* dz_prev,
                                                 float c_prev, const float* du, SiameseNorms p, SiameseStats st,
                                                 const floatX* x, const floatX* y, const floatX* r, int N, int C) {
    int row = warp_row(), lane = threadIdx.x % 32;
    if (row >= N) { return; }
    size_t o = (size_t)row * C;
    // dr = LN_back(du; r, ln)
    LnStats ls = st.ln[row];
    LnBackMeans means = ln_backward_means_v1<W>(du + o, r + o, p.w, ls.mean, ls.rstd, C, lane);
    for (int i = lane * W; i < C; i += 32 * W) {
        Pack<float, W> duv = load_pack<W>(du + o + i), dr;
        Pack<floatX, W> rv = load_pack<W>(r + o + i), wv = load_pack<W>(p.w + i);
        for (int e = 0; e < W; e++) { dr.v[e] = ln_backward_value(duv.v[e], (float)rv.v[e], (float)wv.v[e], ls, means); }
        store_pack<W>(dr_buf + o + i, dr);
    }
    // da = dr + dx_next, and the two reductions of LN_back(dr; y) and LN_back(da; x) in one pass
    LnStats ys = st.y[row], xs = st.x[row];
    float y1 = 0.0f, y2 = 0.0f, x1 = 0.0f, x2 = 0.0f;
    for (int i = lane * W; i < C; i += 32 * W) {
        Pack<float, W> dr = load_pack<W>(dr_buf + o + i), dxn = load_pack<W>(dx + o + i), da;  // dr: this lane's own write
        Pack<floatX, W> xv = load_pack<W>(x + o + i), xw = load_pack<W>(p.xw + i);
        Pack<floatX, W> yv = load_pack<W>(y + o + i), yw = load_pack<W>(p.yw + i);
        for (int e = 0; e < W; e++) {
            da.v[e] = dr.v[e] + dxn.v[e];
            float gy = (float)yw.v[e] * dr.v[e], gx = (float)xw.v[e] * da.v[e];
            y1 += gy;
            y2 += gy * ((float)yv.v[e] - ys.mean) * ys.rstd;
            x1 += gx;
            x2 += gx * ((float)xv.v[e] - xs.mean) * xs.rstd;
        }
        store_pack<W>(da_buf + o + i, da);
    }
    LnBackMeans ymeans = LnBackMeans{warp_sum(y1) / C, warp_sum(y2) / C};
    LnBackMeans xmeans = LnBackMeans{warp_sum(x1) / C, warp_sum(x2) / C};
    // dy += LN_back(dr; y), dx = LN_back(da; x), and dz of the sublayer before
    for (int i = lane * W; i < C; i += 32 * W) {
        Pack<float, W> dr = load_pack<W>(dr_buf + o + i), da = load_pack<W>(da_buf + o + i), dyv = load_pack<W>(dy + o + i), dxv;
        Pack<floatX, W> xv = load_pack<W>(x + o + i), xw = load_pack<W>(p.xw + i);
        Pack<floatX, W> yv = load_pack<W>(y + o + i), yw = load_pack<W>(p.yw + i), dz;
        for (int e = 0; e < W; e++) {
            dyv.v[e] += ln_backward_value(dr.v[e], (float)yv.v[e], (float)yw.v[e], ys, ymeans);
            dxv.v[e] = ln_backward_value(da.v[e], (float)xv.v[e], (float)xw.v[e], xs, xmeans);
        }
        store_pack<W>(dy + o + i, dyv);
        store_pack<W>(dx + o + i, dxv);
        if (dz_prev) {
            for (int e = 0; e < W; e++) { dz.v[e] = (floatX)siamese_update_dz(dxv.v[e], dyv.v[e], c_prev); }
            store_pack<W>(dz_prev + o + i, dz);
        }
    }
}

// the row kernel, then the three LayerNorms' parameter gradients as column sums
static void siamese_input_backward_v1(float* dx, float* dy, float* dr_buf, float* da_buf, floatX* dz_prev, float c_prev,
                                      const float* du, SiameseNormGrads g, SiameseNorms p, SiameseStats st,
                                      const floatX* x, const floatX* y, const floatX* r, int N, int C) {
    int width = row_width(C, {dx, dy, dr_buf, da_buf, dz_prev, du, x, y, r, p.xw, p.xb, p.yw, p.yb, p.w, p.b});
    auto kernel = ROW_KERNEL(width, siamese_input_backward_v1_kernel);
    kernel<<<row_blocks(N), ROW_WARPS * 32>>>(dx, dy, dr_buf, da_buf, dz_prev, c_prev, du, p, st, x, y, r, N, C);
    cudaCheckLaunch();
    LnColumnJobs jobs = {};
    jobs.job[0] = LnColumnJob{g.w, g.b, du, r, st.ln};
    jobs.job[1] = LnColumnJob{g.yw, g.yb, dr_buf, y, st.y};
    jobs.job[2] = LnColumnJob{g.xw, g.xb, da_buf, x, st.x};
    ln_column_grads_v1(jobs, 3, N, C);
}

#endif  // DEV_CUDA_LAYERNORM_V1_H
