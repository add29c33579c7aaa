/*
siamese_input_forward: one sublayer boundary of the SiameseNorm forward pass (see siamese.cuh):

    update side   x = a_prev + z / c        y = y_prev + z          (the previous sublayer's update)
    input side    a = LN(x; lnx)            s = a + LN(y; lny)      u = LN(s; ln)

with bf16 tensors (N, C) and the six fp32 statistics (mean, rstd of x, y and s) saved per row.

version 1: two kernels: the element-wise update kernel (written here, W elements per thread as
           row_width picks: 16-byte vectors where C % 8 == 0, else scalar), then layernorm_v1.h's
           input side (siamese_input_forward_v1: one warp per row, two passes over x and over y
           for their statistics, a third for a and s, two more over s, re-read from L1/L2, for its
           statistics and u).
version 2: the same update kernel, the input side rewritten: one warp per row holds the whole row
           in registers (128-bit loads of 8 bf16), so x and y are read from memory exactly once
           and s is never re-read; the statistics stay two-pass (mean, then the squares around it)
           but over registers, so they cost shuffles, not memory traffic.
version 3: version 2 with the update side folded in: the kernel reads a_prev, y_prev and z,
           forms x and y in registers (rounded to bf16 exactly as they are stored, since the
           backward pass recomputes x-hat from the stored x), writes them once, and goes on.
           Saves the write+read round trip of x and y between the two kernels.
version 4: version 1 with the update folded into the input side's row kernel
           (layernorm_v1.h siamese_update_input_forward_v1): one launch, x and y read back by the
           warp that wrote them. The same code on the same values as version 1, so every output
           must be bit-identical to version 1's (checked: version 1 runs again beside it).
version 5: the trainer's (siamese_input_forward given a_prev; trainer.h includes
           train_gpt2.cu): version 4 with the row held in registers (HeldRow, siamese.cuh: the
           first 1024 columns at any width, the rest re-read), x and y formed there and never read
           back, the statistics of x, y and s over registers, s held for u. The same arithmetic in
           the same order as version 1, so every output must be bit-identical to version 1's; and
           so must the trainer's unfolded input side (the update kernel, then
           siamese_input_forward without a_prev, which reads x and y into registers once), checked beside it.

Every version is checked against a CPU fp32 reference written from the formulas (train_gpt2.c's
layernorm_row), which rounds to bf16 only where the GPU stores a tensor that is read again (x,
y, s). Timing: the whole boundary (update + input) for every version, and the input kernel alone
for versions 1, 2 and 5. GB/s is counted against the bytes the job must move at the least: read
a_prev, y_prev, z; write x, y, a, s, u (bf16) and the statistics.

Build and run (needs a GPU):  nvcc -O3 -arch=sm_90 -I. dev/cuda/siamese_input_forward.cu -o siamese_input_forward -lcublasLt -lcublas
                              ./siamese_input_forward [version] [N=rows] [C=channels]
Status: verified through the CPU execution layer at small sizes (make test-dev-cuda); never run on
a GPU yet, so no timing.
*/
#include "trainer.h"
#include "layernorm_v1.h"

#define N_ROWS (8 * 1024)  // B * T (default; N= on the command line)
#define CH 768             // C (GPT-2 124M; C=)
#define LN_EPS 1e-5f

// the parameters, one (6, C) array: xw, xb (LN of X), yw, yb (LN of Y), w, b (the block-input LN)
enum { P_XW, P_XB, P_YW, P_YB, P_W, P_B, NUM_P };
// the statistics, one (3, N) array of LnStats pairs, as the trainer saves them: of LN(x), LN(y), the block-input LN
enum { S_X, S_Y, S_LN, NUM_S };

// ----------------------------------------------------------------------------
// CPU reference

static void layernorm_ref(float* out, LnStats* st_out, const float* x, const float* w, const float* b, int C) {
    float sum = 0.0f;
    for (int i = 0; i < C; i++) { sum += x[i]; }
    float mean = sum / C;
    float sq = 0.0f;
    for (int i = 0; i < C; i++) { sq += (x[i] - mean) * (x[i] - mean); }
    float rstd = 1.0f / sqrtf(sq / C + LN_EPS);
    for (int i = 0; i < C; i++) { out[i] = (x[i] - mean) * rstd * w[i] + b[i]; }
    *st_out = LnStats{mean, rstd};
}

static void boundary_ref(float* x, float* y, float* a, float* s, float* u, LnStats* st, const float* a_prev,
                         const float* y_prev, const float* z, float c, const float* p, int N, int C) {
    float* ly = (float*)host_alloc(C * sizeof(float));
    for (int r = 0; r < N; r++) {
        size_t o = (size_t)r * C;
        for (int i = 0; i < C; i++) {
            x[o + i] = bf16_round(a_prev[o + i] + z[o + i] / c);  // stored as bf16
            y[o + i] = bf16_round(y_prev[o + i] + z[o + i]);
        }
        layernorm_ref(a + o, st + S_X * N + r, x + o, p + P_XW * C, p + P_XB * C, C);
        layernorm_ref(ly, st + S_Y * N + r, y + o, p + P_YW * C, p + P_YB * C, C);
        for (int i = 0; i < C; i++) { s[o + i] = bf16_round(a[o + i] + ly[i]); }  // stored as bf16
        layernorm_ref(u + o, st + S_LN * N + r, s + o, p + P_W * C, p + P_B * C, C);
    }
    free(ly);
}

// `./siamese_input_forward ref`: checks the reference itself on the CPU (no GPU needed): undoing
// each LN's affine part, (a - xb) / xw and (u - b) / w must have mean 0 and variance 1 in every row,
// and s - a must be LN(y), i.e. (s - a - yb) / yw too (up to the bf16 rounding of s)
static void row_moments(float* mean, float* var, const float* v, const float* w, const float* b, int C) {
    double m = 0.0, q = 0.0;
    for (int i = 0; i < C; i++) { m += (v[i] - b[i]) / w[i]; }
    m /= C;
    for (int i = 0; i < C; i++) { double t = (v[i] - b[i]) / w[i] - m; q += t * t; }
    *mean = (float)m;
    *var = (float)(q / C);
}

static int check_reference(void) {
    const int N = 4, C = 48;
    const float c = 2.0f;
    size_t n = (size_t)N * C;
    uint64_t seed = 3;
    float a_prev[N * C], y_prev[N * C], z[N * C], p[NUM_P * C];
    LnStats st[NUM_S * N];
    float x[N * C], y[N * C], a[N * C], s[N * C], u[N * C], ly[N * C];
    fill_uniform(a_prev, n, -2.0f, 2.5f, &seed);
    fill_uniform(y_prev, n, -4.0f, 5.0f, &seed);
    fill_uniform(z, n, -1.0f, 1.0f, &seed);
    fill_ln_params(p, NUM_P / 2, C, &seed);
    boundary_ref(x, y, a, s, u, st, a_prev, y_prev, z, c, p, N, C);
    for (size_t i = 0; i < n; i++) { ly[i] = s[i] - a[i]; }
    float zeros[3 * N] = {0}, ones[3 * N], means[3 * N], vars[3 * N];
    for (int r = 0; r < N; r++) {
        size_t o = (size_t)r * C;
        row_moments(means + r, vars + r, a + o, p + P_XW * C, p + P_XB * C, C);
        row_moments(means + N + r, vars + N + r, u + o, p + P_W * C, p + P_B * C, C);
        row_moments(means + 2 * N + r, vars + 2 * N + r, ly + o, p + P_YW * C, p + P_YB * C, C);
    }
    for (int i = 0; i < 3 * N; i++) { ones[i] = 1.0f; }
    printf("reference: rows of LN(x), LN(s), LN(y) normalised (N = %d, C = %d)\n", N, C);
    check_close("means", zeros, means, 2 * N, 1e-5f, 0.0f);
    check_close("vars", ones, vars, 2 * N, 1e-4f, 0.0f);
    check_close("LN(y)", zeros, means + 2 * N, N, 1e-2f, 0.0f);  // s is rounded to bf16
    check_close("LN(y)", ones, vars + 2 * N, N, 1e-2f, 0.0f);
    for (size_t i = 0; i < n; i++) { ly[i] = bf16_round(a_prev[i] + z[i] / c); }
    check_close("x", ly, x, n, 0.0f, 0.0f);
    printf("the CPU reference passes\n");
    return 0;
}

// ----------------------------------------------------------------------------
// versions 1 and 2: the element-wise update x_next = a + z / c, y_next = y + z (the trainer's
// siamese_update_value), W elements per thread (siamese.cuh, Pack)

template <int W>
__global__ void update_forward(bf16* x_next, bf16* y_next, const bf16* a, const bf16* y, const bf16* z, float c,
                               size_t npack) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npack) { return; }
    size_t o = i * W;
    Pack<bf16, W> av = load_pack<W>(a + o), yv = load_pack<W>(y + o), zv = load_pack<W>(z + o), xn, yn;
    for (int e = 0; e < W; e++) { siamese_update_value((float)av.v[e], (float)yv.v[e], (float)zv.v[e], c, &xn.v[e], &yn.v[e]); }
    store_pack<W>(x_next + o, xn);
    store_pack<W>(y_next + o, yn);
}

// ----------------------------------------------------------------------------
// versions 2 and 3: the row in registers. Lane `lane` owns the 8-wide vectors j = lane + 32 k of
// the row (k < VPL), so every load and store is a coalesced 128-bit access. C % 8 == 0; the
// vectors per lane VPL = ceil(C / 256) are a template parameter (the register arrays), C is not.

#define VPL_MAX 4  // C up to 1024
static int vectors_per_lane(int C) { return ceil_div(C / 8, 32); }

// mean and rstd over the values a lane holds (v[k][.] for the vectors it owns), two-pass
template <int VPL>
__device__ __forceinline__ float2 row_stats_regs(const float (*v)[8], int C, int lane) {
    const int V = C / 8;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < VPL; k++) {
        if (lane + 32 * k < V) {
            for (int e = 0; e < 8; e++) { sum += v[k][e]; }
        }
    }
    float mean = warp_sum(sum) / C;
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < VPL; k++) {
        if (lane + 32 * k < V) {
            for (int e = 0; e < 8; e++) { float d = v[k][e] - mean; sq += d * d; }
        }
    }
    return make_float2(mean, rsqrtf(warp_sum(sq) / C + LN_EPS));
}

// the input side of one row whose x and y are in registers (xv, yv: overwritten)
template <int VPL>
__device__ __forceinline__ void input_side_regs(float (*xv)[8], float (*yv)[8], int4* a4, int4* s4, int4* u4,
                                                LnStats* st, const bf16* p, int N, int C, int r, int lane) {
    const int V = C / 8;
    const int4* p4 = (const int4*)p;  // the parameters as vectors: P_k * C / 8 + j
    float2 sx = row_stats_regs<VPL>(xv, C, lane);
    float2 sy = row_stats_regs<VPL>(yv, C, lane);
    // a and s; s (rounded to bf16, as stored) replaces x in the registers
#pragma unroll
    for (int k = 0; k < VPL; k++) {
        int j = lane + 32 * k;
        if (j >= V) { continue; }
        float xw[8], xb[8], yw[8], yb[8], a[8];
        unpack8(xw, __ldg(p4 + P_XW * V + j));
        unpack8(xb, __ldg(p4 + P_XB * V + j));
        unpack8(yw, __ldg(p4 + P_YW * V + j));
        unpack8(yb, __ldg(p4 + P_YB * V + j));
        for (int e = 0; e < 8; e++) {
            a[e] = (xv[k][e] - sx.x) * sx.y * xw[e] + xb[e];
            float ly = (yv[k][e] - sy.x) * sy.y * yw[e] + yb[e];
            xv[k][e] = bf16_round_dev(a[e] + ly);
        }
        a4[j] = pack8(a);
        s4[j] = pack8(xv[k]);
    }
    float2 ss = row_stats_regs<VPL>(xv, C, lane);
#pragma unroll
    for (int k = 0; k < VPL; k++) {
        int j = lane + 32 * k;
        if (j >= V) { continue; }
        float w[8], b[8], u[8];
        unpack8(w, __ldg(p4 + P_W * V + j));
        unpack8(b, __ldg(p4 + P_B * V + j));
        for (int e = 0; e < 8; e++) { u[e] = (xv[k][e] - ss.x) * ss.y * w[e] + b[e]; }
        u4[j] = pack8(u);
    }
    if (lane == 0) {
        st[S_X * N + r] = LnStats{sx.x, sx.y};
        st[S_Y * N + r] = LnStats{sy.x, sy.y};
        st[S_LN * N + r] = LnStats{ss.x, ss.y};
    }
}

template <int VPL>
__global__ void __launch_bounds__(ROW_WARPS * 32)
    input_forward_v2(bf16* a_out, bf16* s_out, bf16* u_out, LnStats* st, const bf16* x, const bf16* y, const bf16* p,
                     int N, int C) {
    const int V = C / 8;
    int r = blockIdx.x * ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= N) { return; }
    size_t o4 = (size_t)r * V;  // the row's offset in vectors
    const int4 *x4 = (const int4*)x + o4, *y4 = (const int4*)y + o4;
    float xv[VPL][8] = {}, yv[VPL][8] = {};  // zero where a lane owns no vector (never read there)
#pragma unroll
    for (int k = 0; k < VPL; k++) {  // all loads first: VPL * 2 128-bit loads in flight per lane
        int j = lane + 32 * k;
        if (j < V) {
            unpack8(xv[k], x4[j]);
            unpack8(yv[k], y4[j]);
        }
    }
    input_side_regs<VPL>(xv, yv, (int4*)a_out + o4, (int4*)s_out + o4, (int4*)u_out + o4, st, p, N, C, r, lane);
}

template <int VPL>
__global__ void __launch_bounds__(ROW_WARPS * 32)
    boundary_forward_v3(bf16* x_out, bf16* y_out, bf16* a_out, bf16* s_out, bf16* u_out, LnStats* st,
                        const bf16* a_prev, const bf16* y_prev, const bf16* z, float c, const bf16* p, int N, int C) {
    const int V = C / 8;
    int r = blockIdx.x * ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= N) { return; }
    size_t o4 = (size_t)r * V;
    const int4 *ap4 = (const int4*)a_prev + o4, *yp4 = (const int4*)y_prev + o4, *z4 = (const int4*)z + o4;
    float xv[VPL][8] = {}, yv[VPL][8] = {};  // zero where a lane owns no vector (never read there)
#pragma unroll
    for (int k = 0; k < VPL; k++) {
        int j = lane + 32 * k;
        if (j >= V) { continue; }
        float zv[8];
        unpack8(xv[k], ap4[j]);
        unpack8(yv[k], yp4[j]);
        unpack8(zv, z4[j]);
        for (int e = 0; e < 8; e++) {  // x and y as the update kernel stores them
            xv[k][e] = bf16_round_dev(xv[k][e] + zv[e] / c);
            yv[k][e] = bf16_round_dev(yv[k][e] + zv[e]);
        }
        ((int4*)x_out)[o4 + j] = pack8(xv[k]);
        ((int4*)y_out)[o4 + j] = pack8(yv[k]);
    }
    input_side_regs<VPL>(xv, yv, (int4*)a_out + o4, (int4*)s_out + o4, (int4*)u_out + o4, st, p, N, C, r, lane);
}

// ----------------------------------------------------------------------------

typedef struct {
    bf16 *a_prev, *y_prev, *z, *p;       // inputs
    bf16 *x, *y, *a, *s, *u;             // outputs
    LnStats* st;
} Buffers;

// the update kernel at the width the trainer's row_width picks for these tensors
static void run_update(const Buffers* b, float c, int N, int C) {
    size_t n = (size_t)N * C;
    int w = row_width(n, {b->x, b->y, b->a_prev, b->y_prev, b->z});
    auto kernel = w == VEC_X ? update_forward<VEC_X> : update_forward<1>;
    kernel<<<ceil_div((long)(n / w), 256), 256>>>(b->x, b->y, b->a_prev, b->y_prev, b->z, c, n / w);
    cudaCheckLaunch();
}

// the trainer's views of the parameters and statistics (SiameseNorms, SiameseStats)
static SiameseNorms trainer_norms(const Buffers* b, int C) {
    bf16* p = b->p;
    SiameseNorms q = {p + P_XW * C, p + P_XB * C, p + P_YW * C, p + P_YB * C, p + P_W * C, p + P_B * C};
    return q;
}
static SiameseStats trainer_stats(const Buffers* b, int N) {
    SiameseStats q = {b->st + S_X * N, b->st + S_Y * N, b->st + S_LN * N};
    return q;
}

// the instantiations of versions 2 and 3, by vectors per lane
typedef void (*InputV2)(bf16*, bf16*, bf16*, LnStats*, const bf16*, const bf16*, const bf16*, int, int);
static const InputV2 input_v2[VPL_MAX] = {input_forward_v2<1>, input_forward_v2<2>, input_forward_v2<3>, input_forward_v2<4>};
typedef void (*BoundaryV3)(bf16*, bf16*, bf16*, bf16*, bf16*, LnStats*, const bf16*, const bf16*, const bf16*, float,
                           const bf16*, int, int);
static const BoundaryV3 boundary_v3[VPL_MAX] = {boundary_forward_v3<1>, boundary_forward_v3<2>, boundary_forward_v3<3>,
                                                boundary_forward_v3<4>};

static void run_input(int version, const Buffers* b, int N, int C) {
    if (version == 1) {
        siamese_input_forward_v1(b->a, b->s, b->u, trainer_stats(b, N), b->x, b->y, trainer_norms(b, C), N, C);
    } else if (version == 5) {  // the trainer's input side
        siamese_input_forward(b->a, b->s, b->u, trainer_stats(b, N), b->x, b->y, trainer_norms(b, C), N, C);
    } else {
        InputV2 kernel = input_v2[vectors_per_lane(C) - 1];
        kernel<<<ceil_div(N, ROW_WARPS), ROW_WARPS * 32>>>(b->a, b->s, b->u, b->st, b->x, b->y, b->p, N, C);
        cudaCheckLaunch();
    }
}

static void run_boundary(int version, const Buffers* b, float c, int N, int C) {
    if (version == 5) {  // the trainer's folded kernel
        siamese_input_forward(b->a, b->s, b->u, trainer_stats(b, N), b->x, b->y, trainer_norms(b, C), N, C, false,
                              b->a_prev, b->y_prev, b->z, c);
    } else if (version == 4) {
        siamese_update_input_forward_v1(b->x, b->y, b->a_prev, b->y_prev, b->z, c, b->a, b->s, b->u,
                                        trainer_stats(b, N), trainer_norms(b, C), N, C);
    } else if (version == 3) {
        BoundaryV3 kernel = boundary_v3[vectors_per_lane(C) - 1];
        kernel<<<ceil_div(N, ROW_WARPS), ROW_WARPS * 32>>>(b->x, b->y, b->a, b->s, b->u, b->st, b->a_prev, b->y_prev, b->z, c,
                                                           b->p, N, C);
        cudaCheckLaunch();
    } else {
        run_update(b, c, N, C);
        run_input(version, b, N, C);
    }
}

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "ref") == 0) { return check_reference(); }
    int N = N_ROWS, C = CH;
    const SizeArg sizes[] = {{"N", &N}, {"C", &C}};
    int only = parse_args(argc, argv, 5, sizes, 2);
    if ((only == 0 || only == 2 || only == 3) && (C % 8 != 0 || C > 256 * VPL_MAX)) {
        size_error(argv[0], "versions 2 and 3 need C a multiple of 8 up to 1024 (versions 1, 4 and 5 take any C)");
    }
    const int layer = 3;
    const float c = sqrtf(2.0f * (layer + 1));
    size_t n = (size_t)N * C;
    print_device();
    printf("siamese_input_forward: N = %d rows, C = %d, c = %.4f\n", N, C, c);

    // inputs: streams with a non-zero mean (exercises the variance pass), LN parameters near (1, 0)
    uint64_t seed = 42;
    float* a_prev = (float*)host_alloc(n * sizeof(float));
    float* y_prev = (float*)host_alloc(n * sizeof(float));
    float* z = (float*)host_alloc(n * sizeof(float));
    float* p = (float*)host_alloc(NUM_P * C * sizeof(float));
    fill_uniform(a_prev, n, -2.0f, 2.5f, &seed);
    fill_uniform(y_prev, n, -4.0f, 5.0f, &seed);
    fill_uniform(z, n, -1.0f, 1.0f, &seed);
    fill_ln_params(p, NUM_P / 2, C, &seed);  // (xw, xb), (yw, yb), (w, b)
    Buffers b;
    b.a_prev = to_device_bf16(a_prev, n);
    b.y_prev = to_device_bf16(y_prev, n);
    b.z = to_device_bf16(z, n);
    b.p = to_device_bf16(p, NUM_P * C);
    bf16** outs[5] = {&b.x, &b.y, &b.a, &b.s, &b.u};
    for (int k = 0; k < 5; k++) { *outs[k] = (bf16*)device_alloc(n * sizeof(bf16)); }
    b.st = (LnStats*)device_alloc(NUM_S * N * sizeof(LnStats));
    Buffers b1 = b;  // the same inputs, outputs of their own: version 1 beside versions 4 and 5
    bf16** outs1[5] = {&b1.x, &b1.y, &b1.a, &b1.s, &b1.u};
    for (int k = 0; k < 5; k++) { *outs1[k] = (bf16*)device_alloc(n * sizeof(bf16)); }
    b1.st = (LnStats*)device_alloc(NUM_S * N * sizeof(LnStats));

    // the CPU reference
    float* ref[5];
    size_t n_st = 2 * NUM_S * (size_t)N;  // the statistics as floats
    float* got = (float*)host_alloc((n > n_st ? n : n_st) * sizeof(float));  // an output or the stats
    for (int k = 0; k < 5; k++) { ref[k] = (float*)host_alloc(n * sizeof(float)); }
    LnStats* ref_st = (LnStats*)host_alloc(NUM_S * N * sizeof(LnStats));
    boundary_ref(ref[0], ref[1], ref[2], ref[3], ref[4], ref_st, a_prev, y_prev, z, c, p, N, C);
    const char* names[5] = {"x", "y", "a", "s", "u"};

    // bytes the boundary must move at the least, and the input side alone
    double bf = sizeof(bf16) * (double)n, stats = NUM_S * (double)N * sizeof(LnStats);
    double bytes_boundary = 8 * bf + stats, bytes_input = 5 * bf + stats;

    // version `against` of the boundary on b1, checked bit for bit against b's outputs; unfolded: the
    // update kernel, then version `against`'s input side
    auto check_against = [&](int against, int unfolded, const char* what) {
        for (int k = 0; k < 5; k++) { cudaCheck(cudaMemset(*outs1[k], 0, n * sizeof(bf16))); }
        if (unfolded) {
            run_update(&b1, c, N, C);
            run_input(against, &b1, N, C);
        } else {
            run_boundary(against, &b1, c, N, C);
        }
        cudaCheck(cudaDeviceSynchronize());
        printf("  %s:\n", what);
        for (int k = 0; k < 5; k++) { check_identical(names[k], *outs1[k], *outs[k], n, sizeof(bf16)); }
        check_identical("stats", b1.st, b.st, NUM_S * N, sizeof(LnStats));
    };
    for (int v = 1; v <= 5; v++) {
        if (only && v != only) { continue; }
        printf("version %d\n", v);
        for (int k = 0; k < 5; k++) { cudaCheck(cudaMemset(*outs[k], 0, n * sizeof(bf16))); }
        run_boundary(v, &b, c, N, C);
        cudaCheck(cudaDeviceSynchronize());
        for (int k = 0; k < 5; k++) {  // x and y exactly: the same fp32 operations, one bf16 rounding
            from_device_bf16(got, *outs[k], n);
            check_close(names[k], ref[k], got, n, k < 2 ? 0.0f : 2e-2f, k < 2 ? 0.0f : 1e-2f);
        }
        from_device_f32(got, (const float*)b.st, n_st);
        check_close("stats", (const float*)ref_st, got, n_st, 1e-3f, 1e-3f);
        if (v >= 4) { check_against(1, 0, "against version 1"); }  // the folded kernel against the two kernels, bit for bit
        if (v == 5) { check_against(5, 1, "against the update kernel, then the trainer's siamese_input_forward"); }
        char label[64];
        snprintf(label, sizeof label, "  v%d update + input side", v);
        if (!timing_skipped(label)) {
            print_timing(label, time_ms([&] { run_boundary(v, &b, c, N, C); }, no_prep), bytes_boundary);
        }
        if (v < 3 || v == 5) {
            snprintf(label, sizeof label, "  v%d input side alone", v);
            if (!timing_skipped(label)) { print_timing(label, time_ms([&] { run_input(v, &b, N, C); }, no_prep), bytes_input); }
        }
    }
    printf("all checked versions match the CPU reference\n");
    return 0;
}
