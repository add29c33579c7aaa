/*
layernorm: the plain LayerNorm of the pre and post modes and of the final LN (siamese.cuh
layernorm_forward, layernorm_backward), forward and backward over rows of C channels:

    forward    out = (x - mean) * rstd * w + b, saving mean and rstd per row
    backward   dinp = or += LN_back(dout; x): rstd * (w dout - mean(w dout) - xhat mean(w dout xhat))
               dw += sum_r dout * xhat, db += sum_r dout (sums over all rows)

with x, out bf16 and dout, dinp, the statistics and the parameter gradients fp32. The backward runs
as the trainer runs it in each mode:
    pre    dinp += LN_back(du; x): dinp (the stream gradient dx) and dout (du) apart
    post   dinp = LN_back(dout) in place (dinp = dout = dx), with a bf16 copy dinp_x (the block's dz)

version 1: layernorm_v1.h: the forward reads the row three times (two passes for the statistics,
           one for out); the backward first sums dw, db in two-stage column sums (dout, x and the
           statistics read), then a row kernel reads dout twice (the means, then dinp).
version 2: the trainer's forward (layernorm_forward: the row held in registers, HeldRow: read
           once, the statistics from registers); the backward the trainer's kernel in
           ln_backward_cols.h's rounds (layernorm_backward<LnRoundsCols>): the rows in blocks, 8 at
           a time: one warp per row takes the two means (dout and x held), then the block, each
           thread owning columns (96 of 256 threads at C 768), writes dinp (and dinp_x) and adds
           the dw, db terms to sums only that thread touches; the trainer's column sums then add
           the blocks' sums.
version 3: the trainer's (trainer.h includes train_gpt2.cu): version 2's forward; the backward
           (layernorm_backward) with the block's threads in groups over the round's rows in step 2
           (2 groups of 96 at C 768), each group with its own sums, added in group order at the end.
           For versions 2 and 3, out, mean, rstd, dinp and dinp_x are computed exactly as in
           version 1 and must be bit-identical to it (checked); dw and db, summed in another order,
           against the reference.

Checked against a CPU reference from the formulas (common.h's LayerNorm references, after
train_gpt2.c's layernorm_row and layernorm_backward_row: statistics in double, the parameter
gradients' sums in double from random starting values, which the kernels add to). GB/s against the bytes each job must move at the least: forward,
x read and out written (bf16) and the statistics; backward pre, dout, x, dinp read and dinp
written; post, dout and x read, dinp and dinp_x written.

Build and run (needs a GPU):  nvcc -O3 -arch=sm_90 -I. dev/cuda/layernorm.cu -o layernorm -lcublasLt -lcublas
                              ./layernorm [version] [N=rows] [C=channels]
Status: verified through the CPU execution layer at small sizes (make test-dev-cuda); never run on
a GPU yet, so no timing.
*/
#include "trainer.h"
#include "layernorm_v1.h"
#include "ln_backward_cols.h"

#define N_ROWS (8 * 1024)  // B * T (default; N= on the command line)
#define CH 768             // C (C=)

// ----------------------------------------------------------------------------
// CPU reference

// dinp = or += LN_back(dout) for N rows with the saved statistics (common.h ln_backward_ref); dw,
// db += the parameter gradients (double)
static void backward_ref(float* dinp, double* dw, double* db, const float* dout, const float* x, const float* w,
                         const float* mean, const float* rstd, int N, int C, int accumulate) {
    for (int r = 0; r < N; r++) {
        size_t o = (size_t)r * C;
        if (!accumulate) { memset(dinp + o, 0, C * sizeof(float)); }
        ln_backward_ref(dinp + o, dw, db, dout + o, x + o, w, mean[r], rstd[r], C);
    }
}

// `./layernorm ref`: checks the backward reference on the CPU (no GPU needed) against central
// finite differences of L = sum dout . LN(x), the forward in double: dL/dx, dL/dw, dL/db are
// exactly what the reference returns (with the statistics of the same x)
static double fd_loss(const float* x, const float* w, const float* b, const float* dout, int N, int C) {
    double L = 0.0;
    for (int r = 0; r < N; r++) {
        const float* xr = x + (size_t)r * C;
        double m, rs;
        ln_stats_ref(&m, &rs, xr, C);
        for (int i = 0; i < C; i++) { L += dout[(size_t)r * C + i] * ((xr[i] - m) * rs * w[i] + b[i]); }
    }
    return L;
}

static int check_reference(void) {
    const int N = 3, C = 40;
    uint64_t seed = 5;
    float x[N * C], p[2 * C], dout[N * C], out[N * C], mean[N], rstd[N], dinp[N * C], num[N * C], g[2 * C];
    double gd[2 * C] = {0};
    fill_uniform(x, N * C, -2.0f, 3.0f, &seed);
    fill_ln_params(p, 1, C, &seed);
    fill_uniform(dout, N * C, -1.0f, 1.0f, &seed);
    layernorm_rows_ref(out, mean, rstd, x, p, p + C, N, C);
    backward_ref(dinp, gd, gd + C, dout, x, p, mean, rstd, N, C, 0);
    for (int i = 0; i < 2 * C; i++) { g[i] = (float)gd[i]; }
    printf("reference vs finite differences (N = %d, C = %d)\n", N, C);
    // numeric dL/dv[i] for v = x, then the parameters, by central differences of the step taken in float
    float* vs[2] = {x, p};
    const float* got[2] = {dinp, g};
    const char* names[2] = {"dx", "dparams"};
    int counts[2] = {N * C, 2 * C};
    for (int t = 0; t < 2; t++) {
        float* v = vs[t];
        for (int i = 0; i < counts[t]; i++) {
            float v0 = v[i];
            v[i] = v0 + 1e-2f;
            float vp = v[i];
            double Lp = fd_loss(x, p, p + C, dout, N, C);
            v[i] = v0 - 1e-2f;
            float vm = v[i];
            double Lm = fd_loss(x, p, p + C, dout, N, C);
            v[i] = v0;
            num[i] = (float)((Lp - Lm) / ((double)vp - vm));
        }
        check_close(names[t], num, got[t], counts[t], 1e-3f, 1e-2f);
    }
    printf("the CPU reference matches finite differences\n");
    return 0;
}

// ----------------------------------------------------------------------------

typedef struct {
    bf16 *x, *p, *out, *dinp_x;  // p: (w, b)
    float *dout, *dinp, *dinp0, *grads, *grads0;
    LnStats* st;  // (mean, rstd) per row
} Buffers;

// mode 0: pre (dinp += LN_back(dout), dout apart); mode 1: post (in place, dinp = dout, with dinp_x)
static const char* MODE_NAMES[2] = {"pre (dinp += LN_back(dout))", "post (in place, dinp_x)"};

static void run_forward(int version, const Buffers* b, int N, int C) {
    if (version == 1) {
        layernorm_forward_v1(b->out, b->st, b->x, b->p, b->p + C, N, C);
    } else {
        layernorm_forward(b->out, b->st, b->x, b->p, b->p + C, N, C);
    }
}

static void run_backward(int version, int mode, const Buffers* b, int N, int C) {
    const float* dout = mode == 0 ? b->dout : b->dinp;  // post: in place
    bf16* dinp_x = mode == 0 ? NULL : b->dinp_x;
    int accumulate = mode == 0;
    if (version == 1) {
        layernorm_backward_v1(b->dinp, dinp_x, b->grads, b->grads + C, dout, b->x, b->p, b->st, N, C, accumulate);
    } else if (version == 2) {
        layernorm_backward<LnRoundsCols>(b->dinp, dinp_x, b->grads, b->grads + C, dout, b->x, b->p, b->st, N, C,
                                         accumulate);
    } else {
        layernorm_backward(b->dinp, dinp_x, b->grads, b->grads + C, dout, b->x, b->p, b->st, N, C, accumulate);
    }
}

// the backward's inputs that it overwrites: dinp (pre: its starting value; post: dout itself), the
// gradients' starting values
static void reset(int mode, const Buffers* b, int N, int C) {
    size_t n = (size_t)N * C;
    cudaCheck(cudaMemcpy(b->dinp, mode == 0 ? b->dinp0 : b->dout, n * sizeof(float), cudaMemcpyDeviceToDevice));
    cudaCheck(cudaMemcpy(b->grads, b->grads0, 2 * C * sizeof(float), cudaMemcpyDeviceToDevice));
    cudaCheck(cudaMemset(b->dinp_x, 0, n * sizeof(bf16)));
}

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "ref") == 0) { return check_reference(); }
    int N = N_ROWS, C = CH;
    const SizeArg sizes[] = {{"N", &N}, {"C", &C}};
    int only = parse_args(argc, argv, 3, sizes, 2);
    size_t n = (size_t)N * C;
    print_device();
    printf("layernorm: N = %d rows, C = %d\n", N, C);

    // inputs: rows with a non-zero mean, parameters near (1, 0), gradients and their starting values
    uint64_t seed = 17;
    float *x = (float*)host_alloc(n * sizeof(float)), *p = (float*)host_alloc(2 * C * sizeof(float));
    float *dout = (float*)host_alloc(n * sizeof(float)), *dinp0 = (float*)host_alloc(n * sizeof(float));
    float* g0 = (float*)host_alloc(2 * C * sizeof(float));
    fill_uniform(x, n, -2.0f, 3.0f, &seed);
    fill_ln_params(p, 1, C, &seed);
    fill_uniform(dout, n, -1.0f, 1.0f, &seed);
    fill_uniform(dinp0, n, -1.0f, 1.0f, &seed);
    fill_uniform(g0, 2 * C, -1.0f, 1.0f, &seed);
    Buffers b;
    b.x = to_device_bf16(x, n);  // rounds the host copies too
    b.p = to_device_bf16(p, 2 * C);
    b.dout = to_device_f32(dout, n);
    b.dinp0 = to_device_f32(dinp0, n);
    b.grads0 = to_device_f32(g0, 2 * C);
    b.out = (bf16*)device_alloc(n * sizeof(bf16));
    b.dinp_x = (bf16*)device_alloc(n * sizeof(bf16));
    b.st = (LnStats*)device_alloc(N * sizeof(LnStats));
    b.dinp = (float*)device_alloc(n * sizeof(float));
    b.grads = (float*)device_alloc(2 * C * sizeof(float));
    Buffers b1 = b;  // the same inputs, outputs of their own: version 1 beside versions 2 and 3
    b1.out = (bf16*)device_alloc(n * sizeof(bf16));
    b1.dinp_x = (bf16*)device_alloc(n * sizeof(bf16));
    b1.st = (LnStats*)device_alloc(N * sizeof(LnStats));
    b1.dinp = (float*)device_alloc(n * sizeof(float));
    b1.grads = (float*)device_alloc(2 * C * sizeof(float));
    trainer_partials(C);
    cols_partials(C);

    // the CPU reference: the forward, then the backward of each mode from the reference statistics
    float* ref_out = (float*)host_alloc(n * sizeof(float));
    float *ref_mean = (float*)host_alloc(N * sizeof(float)), *ref_rstd = (float*)host_alloc(N * sizeof(float));
    layernorm_rows_ref(ref_out, ref_mean, ref_rstd, x, p, p + C, N, C);
    float* ref_dinp[2] = {(float*)host_alloc(n * sizeof(float)), (float*)host_alloc(n * sizeof(float))};
    float* ref_g[2] = {(float*)host_alloc(2 * C * sizeof(float)), (float*)host_alloc(2 * C * sizeof(float))};
    double* gd = (double*)host_alloc(2 * C * sizeof(double));
    for (int mode = 0; mode < 2; mode++) {
        for (int i = 0; i < 2 * C; i++) { gd[i] = g0[i]; }
        memcpy(ref_dinp[mode], dinp0, n * sizeof(float));
        backward_ref(ref_dinp[mode], gd, gd + C, dout, x, p, ref_mean, ref_rstd, N, C, mode == 0);
        for (int i = 0; i < 2 * C; i++) { ref_g[mode][i] = (float)gd[i]; }
    }
    float* ref_dinp_x = (float*)host_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { ref_dinp_x[i] = bf16_round(ref_dinp[1][i]); }
    float* got = (float*)host_alloc(n * sizeof(float));
    float *got_mean = (float*)host_alloc(N * sizeof(float)), *got_rstd = (float*)host_alloc(N * sizeof(float));

    // the parameter gradients sum N rows: the absolute tolerance (1e-2 at 8192 rows) scales with N
    const float dparams_atol = fmaxf(1e-2f * N / N_ROWS, 1e-5f);
    double bf = sizeof(bf16) * (double)n, ff = sizeof(float) * (double)n, stats = 2.0 * N * sizeof(float);
    double bytes_fwd = 2 * bf + stats, bytes_bwd[2] = {3 * ff + bf + stats, 2 * ff + 2 * bf + stats};
    for (int v = 1; v <= 3; v++) {
        if (only && v != only) { continue; }
        printf("version %d\n", v);
        // forward; the backward below runs on the statistics it saved
        run_forward(v, &b, N, C);
        cudaCheck(cudaDeviceSynchronize());
        from_device_bf16(got, b.out, n);
        check_close("out", ref_out, got, n, 2e-2f, 1e-2f);
        from_device_stats(got_mean, got_rstd, b.st, N);
        check_close("mean", ref_mean, got_mean, N, 1e-5f, 1e-4f);
        check_close("rstd", ref_rstd, got_rstd, N, 1e-5f, 1e-4f);
        if (v >= 2) {
            run_forward(1, &b1, N, C);
            cudaCheck(cudaDeviceSynchronize());
            printf("  against version 1:\n");
            check_identical("out", b1.out, b.out, n, sizeof(bf16));
            check_identical("mean, rstd", b1.st, b.st, N, sizeof(LnStats));
        }
        char label[64];
        snprintf(label, sizeof label, "  v%d forward", v);
        if (!timing_skipped(label)) { print_timing(label, time_ms([&] { run_forward(v, &b, N, C); }, no_prep), bytes_fwd); }
        for (int mode = 0; mode < 2; mode++) {
            printf("  backward, %s\n", MODE_NAMES[mode]);
            reset(mode, &b, N, C);
            run_backward(v, mode, &b, N, C);
            cudaCheck(cudaDeviceSynchronize());
            from_device_f32(got, b.dinp, n);
            check_close("dinp", ref_dinp[mode], got, n, 1e-4f, 1e-3f);
            if (mode == 1) {
                from_device_bf16(got, b.dinp_x, n);
                check_close("dinp_x", ref_dinp_x, got, n, 1e-4f, 8e-3f);
            }
            from_device_f32(got, b.grads, 2 * C);
            check_close("dparams", ref_g[mode], got, 2 * C, dparams_atol, 1e-3f);
            if (v >= 2) {  // version 1 on this version's statistics (identical, checked above)
                reset(mode, &b1, N, C);
                b1.st = b.st;
                run_backward(1, mode, &b1, N, C);
                cudaCheck(cudaDeviceSynchronize());
                printf("    against version 1:\n");
                check_identical("dinp", b1.dinp, b.dinp, n, sizeof(float));
                if (mode == 1) { check_identical("dinp_x", b1.dinp_x, b.dinp_x, n, sizeof(bf16)); }
            }
            snprintf(label, sizeof label, "  v%d backward, %s", v, mode == 0 ? "pre" : "post");
            if (!timing_skipped(label)) {
                print_timing(label, time_ms([&] { run_backward(v, mode, &b, N, C); }, [&] { reset(mode, &b, N, C); }),
                             bytes_bwd[mode]);
            }
        }
    }
    printf("all checked versions match the CPU reference\n");
    return 0;
}
