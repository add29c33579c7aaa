/*
vec_kernels: the trainer's element-wise and row kernels at their two widths (siamese.cuh, Pack
and row_width), scalar and with 16-byte loads and stores, all memory-bound:

    LayerNorm forward    out = (x - mean) * rstd * w + b per row of C, saving mean and rstd
                         (siamese.cuh layernorm_forward: layernorm_forward_kernel<1> / <VEC_X>)
    GELU forward         out = GELU(inp), tanh approximation
                         (train_gpt2.cu gelu_apply, backward 0: gelu_kernel<1> / <VEC_X>)
    GELU backward        d = d * GELU'(inp), in place
                         (gelu_apply, backward 1: the same gelu_kernel<1> / <VEC_X>)

version 1: the scalar width, W = 1 (one element per thread; LayerNorm: one warp per row, lane i
           at columns i, i + 32, ...): what the trainer runs where C is not a multiple of 8 or a
           tensor is not 16-byte aligned. Launched here as the trainer's host functions launch it.
version 2: the trainer's host functions (layernorm_forward, gelu_apply), which take W = VEC_X at
           these sizes: one 16-byte vector of 8 bf16 per load and store (LayerNorm: lane i at
           vectors i, i + 32, ...). They need C (LayerNorm) and the element counts to be
           multiples of 8 and 16-byte aligned tensors; the program refuses sizes where the trainer
           would take version 1.
Both are the trainer's own kernels (trainer.h includes train_gpt2.cu). The SiameseNorm update at
the two widths is in siamese_input_forward.cu (version 1, the element-wise update kernel).

Checked against a CPU reference from the formulas (train_gpt2.c's layernorm_forward, gelu in
double): they differ from it by one bf16 rounding of the output and fp32 arithmetic. Timing per
kernel; GB/s against the bytes it must move (bf16 tensors read and written, stats).

Build and run (needs a GPU):  nvcc -O3 -arch=sm_90 -I. dev/cuda/vec_kernels.cu -o vec_kernels -lcublasLt -lcublas
                              ./vec_kernels [version] [N=rows] [C=channels]   (element-wise: N * C elements)
Status: verified through the CPU execution layer at small sizes (make test-dev-cuda); never run on
a GPU yet, so no timing.
*/
#include "trainer.h"

#define N_ROWS (8 * 1024)  // B * T (default; N= on the command line)
#define CH 768             // C (C=); the GELU tensors are (N, 4C) in the trainer, here (N, C)

// ----------------------------------------------------------------------------
// CPU references

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

static double gelu_slope_ref(double x) {
    double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
}

// `./vec_kernels ref`: checks the references themselves on the CPU (no GPU needed): undoing the
// affine part, every LayerNorm row has mean 0 and variance 1 (and the saved statistics are the
// row's); the GELU slope matches central finite differences of GELU
static int check_reference(void) {
    const int N = 4, C = 40;
    uint64_t seed = 9;
    float x[N * C], p[2 * C], out[N * C], mean[N], rstd[N], m[N], var[N], zeros[N] = {0}, ones[N];
    fill_uniform(x, N * C, -2.0f, 3.0f, &seed);
    fill_ln_params(p, 1, C, &seed);
    layernorm_rows_ref(out, mean, rstd, x, p, p + C, N, C);
    for (int r = 0; r < N; r++) {
        double s = 0.0, q = 0.0;
        for (int i = 0; i < C; i++) { s += (out[r * C + i] - p[C + i]) / p[i]; }
        s /= C;
        for (int i = 0; i < C; i++) { double t = (out[r * C + i] - p[C + i]) / p[i] - s; q += t * t; }
        m[r] = (float)s;
        var[r] = (float)(q / C);
        ones[r] = 1.0f;
    }
    printf("reference: LayerNorm rows normalised (N = %d, C = %d), GELU slope vs finite differences\n", N, C);
    check_close("means", zeros, m, N, 1e-5f, 0.0f);
    check_close("vars", ones, var, N, 1e-4f, 0.0f);
    for (int r = 0; r < N; r++) {  // the saved statistics undo the normalisation: x = mean + xhat / rstd
        double s = 0.0;
        for (int i = 0; i < C; i++) { s += x[r * C + i]; }
        m[r] = (float)(s / C);
    }
    check_close("mean", m, mean, N, 1e-6f, 1e-6f);
    const int K = 101;
    float num[K], slope[K];
    for (int k = 0; k < K; k++) {
        double v = -5.0 + 10.0 * k / (K - 1), h = 1e-4;
        num[k] = (float)((gelu_ref(v + h) - gelu_ref(v - h)) / (2 * h));
        slope[k] = (float)gelu_slope_ref(v);
    }
    check_close("slope", num, slope, K, 1e-6f, 1e-6f);
    printf("the CPU reference passes\n");
    return 0;
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "ref") == 0) { return check_reference(); }
    int N = N_ROWS, C = CH;
    const SizeArg sizes[] = {{"N", &N}, {"C", &C}};
    int only = parse_args(argc, argv, 2, sizes, 2);
    if (only != 1 && C % VEC_X != 0) { size_error(argv[0], "version 2 needs C a multiple of 8 (version 1 takes any C)"); }
    print_device();
    size_t n = (size_t)N * C;
    printf("vec_kernels: N = %d rows, C = %d (LayerNorm), %zu elements (GELU)\n", N, C, n);

    uint64_t seed = 77;
    float *x = (float*)host_alloc(n * sizeof(float)), *p = (float*)host_alloc(2 * (size_t)C * sizeof(float));
    float *z = (float*)host_alloc(n * sizeof(float)), *d = (float*)host_alloc(n * sizeof(float));
    fill_uniform(x, n, -2.0f, 3.0f, &seed);  // a non-zero mean
    fill_ln_params(p, 1, C, &seed);
    fill_uniform(z, n, -5.0f, 5.0f, &seed);  // the GELU input: both tails and the bend
    fill_uniform(d, n, -1.0f, 1.0f, &seed);
    bf16 *d_x = to_device_bf16(x, n), *d_p = to_device_bf16(p, 2 * (size_t)C);  // round the host copies too
    bf16 *d_z = to_device_bf16(z, n), *d_d0 = to_device_bf16(d, n);
    bf16* d_out = (bf16*)device_alloc(n * sizeof(bf16));
    LnStats* d_st = (LnStats*)device_alloc(N * sizeof(LnStats));
    const bf16 *d_w = d_p, *d_b = d_p + C;

    // the references
    float *ln = (float*)host_alloc(n * sizeof(float)), *mean = (float*)host_alloc(N * sizeof(float));
    float* rstd = (float*)host_alloc(N * sizeof(float));
    layernorm_rows_ref(ln, mean, rstd, x, p, p + C, N, C);
    float *gf = (float*)host_alloc(n * sizeof(float)), *gb = (float*)host_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        gf[i] = (float)gelu_ref(z[i]);
        gb[i] = (float)(d[i] * gelu_slope_ref(z[i]));
    }
    float* got = (float*)host_alloc(n * sizeof(float));
    float* got_st = (float*)host_alloc(2 * (size_t)N * sizeof(float));  // the means, then the rstds
    auto restore_d = [&] { cudaCheck(cudaMemcpy(d_out, d_d0, n * sizeof(bf16), cudaMemcpyDeviceToDevice)); };

    double bf = (double)n * sizeof(bf16);
    for (int v = 1; v <= 2; v++) {
        if (only && v != only) { continue; }
        printf("version %d: %s\n", v, v == 1 ? "scalar loads (W = 1)" : "16-byte loads (W = VEC_X, the trainer's choice here)");
        if (v == 2 && !(row_width(n, {d_x, d_out, d_z}) == VEC_X && row_width(C, {d_w, d_b}) == VEC_X)) {
            size_error(argv[0], "version 2: a tensor is not 16-byte aligned (the trainer would take version 1)");
        }
        char label[64];
        // LayerNorm forward
        auto run_ln = [&] {
            if (v == 1) {
                layernorm_forward_kernel<1><<<row_blocks(N), ROW_WARPS * 32>>>(d_out, d_st, d_x, d_w, d_b, N, C);
                cudaCheckLaunch();
            } else {
                layernorm_forward(d_out, d_st, d_x, d_w, d_b, N, C);
            }
        };
        run_ln();
        cudaCheck(cudaDeviceSynchronize());
        from_device_bf16(got, d_out, n);
        check_close("ln out", ln, got, n, 2e-2f, 1e-2f);
        from_device_stats(got_st, got_st + N, d_st, N);
        check_close("ln mean", mean, got_st, N, 1e-5f, 1e-4f);
        check_close("ln rstd", rstd, got_st + N, N, 1e-5f, 1e-4f);
        snprintf(label, sizeof label, "  v%d LayerNorm forward", v);
        if (!timing_skipped(label)) { print_timing(label, time_ms(run_ln, no_prep), 2 * bf + 2.0 * N * sizeof(float)); }
        // GELU forward, then backward in place over d
        auto gelu = [&](int backward) {
            if (v == 1) {
                gelu_kernel<1><<<ceil_div((long)n, 256), 256>>>(d_out, d_z, n, backward);
                cudaCheckLaunch();
            } else {
                gelu_apply(d_out, d_z, n, backward);
            }
        };
        auto run_gelu = [&] { gelu(0); };
        run_gelu();
        cudaCheck(cudaDeviceSynchronize());
        from_device_bf16(got, d_out, n);
        check_close("gelu", gf, got, n, 1e-6f, 8e-3f);  // one bf16 rounding (up to 1 ulp near a tie), and
        // the fp32 cancellation of 1 + tanh(u) for large negative inputs (atol)
        snprintf(label, sizeof label, "  v%d GELU forward", v);
        if (!timing_skipped(label)) { print_timing(label, time_ms(run_gelu, no_prep), 2 * bf); }
        auto run_dgelu = [&] { gelu(1); };
        restore_d();
        run_dgelu();
        cudaCheck(cudaDeviceSynchronize());
        from_device_bf16(got, d_out, n);
        check_close("dgelu", gb, got, n, 1e-6f, 8e-3f);
        snprintf(label, sizeof label, "  v%d GELU backward", v);
        if (!timing_skipped(label)) { print_timing(label, time_ms(run_dgelu, restore_d), 3 * bf); }
    }
    printf("all checked versions match the CPU reference\n");
    return 0;
}
