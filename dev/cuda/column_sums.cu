/*
column_sums: the column sums that give the bias and LayerNorm parameter gradients in
train_gpt2.cu (column_grads): for up to three jobs at once, over the N rows of (N, C) tensors,

    dw[c] += sum_r dout[r][c] * (inp[r][c] - mean[r]) * rstd[r]     (LayerNorm weight)
    db[c] += sum_r dout[r][c]                                       (LayerNorm or linear bias)

Here: the three LayerNorm jobs of a SiameseNorm input side (fp32 dout, bf16 inputs with their row
statistics, as siamese_input_backward hands them over) in one launch, then a linear layer's bias
(bf16 dout, no weight) in another. Both versions add in a fixed order, so each result is
deterministic.

version 1: one stage: one block of 32 x 32 threads per 32 columns walks all N rows, 32 apart,
           and adds its 32 partial sums per column in order through shared memory (the trainer's
           column_tile_sums) straight into dw and db: 24 blocks per job at C = 768.
version 2: the trainer's column_grads (its own code: trainer.h includes train_gpt2.cu): two
           stages, the rows split into column_splits(N) chunks (32 at N = 8192; the count
           depends on N only), stage 1 writes each chunk's sums, stage 2 adds the chunks of each
           column in order: 768 blocks per job at C = 768.

Checked against a CPU reference summing in double from random starting values of dw and db (the
kernels add to them). GB/s against the bytes the jobs must read at the least: dout and inp of
every job, the statistics, and dw, db read and written.

Build and run (needs a GPU):  nvcc -O3 -arch=sm_90 -I. dev/cuda/column_sums.cu -o column_sums -lcublasLt -lcublas
                              ./column_sums [version] [N=rows] [C=columns]
Status: verified through the CPU execution layer at small sizes (make test-dev-cuda); never run on
a GPU yet, so no timing.
*/
#include "trainer.h"

#define N_ROWS (8 * 1024)  // B * T (default; N= on the command line)
#define CH 768             // C (C=)
#define LN_JOBS 3

// dw += sum_r dout * xhat, db += sum_r dout, in double (dw NULL: a bias); xhat as the kernel forms it
static void column_sums_ref(double* dw, double* db, const float* dout, const float* inp, const float* mean,
                            const float* rstd, int N, int C) {
    for (int r = 0; r < N; r++) {
        for (int c = 0; c < C; c++) {
            float d = dout[(size_t)r * C + c];
            db[c] += d;
            if (dw) { dw[c] += (double)d * ((inp[(size_t)r * C + c] - mean[r]) * rstd[r]); }
        }
    }
}

// ----------------------------------------------------------------------------
// version 1: one stage, a block per 32 columns over all rows (the trainer's ColumnJobs and block sums)

template <typename Td>
__global__ void column_sums_v1(ColumnJobs<Td> jobs, int N, int C) {
    const ColumnJob<Td> j = jobs.job[blockIdx.y];
    int c = blockIdx.x * COLUMN_TILE + threadIdx.x;
    float tw, tb;
    if (column_tile_sums(j, C, 0, N, &tw, &tb)) {  // the trainer's block sums, over all rows
        if (j.dw) { j.dw[c] += tw; }
        j.db[c] += tb;
    }
}

template <typename Td>
static void column_sums_v1_launch(const ColumnJobs<Td>& jobs, int njobs, int N, int C) {
    column_sums_v1<Td><<<dim3(ceil_div(C, COLUMN_TILE), njobs), dim3(COLUMN_TILE, COLUMN_TILE)>>>(jobs, N, C);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    int N = N_ROWS, C = CH;
    const SizeArg sizes[] = {{"N", &N}, {"C", &C}};
    int only = parse_args(argc, argv, 2, sizes, 2);
    print_device();
    printf("column_sums: N = %d rows, C = %d, %d LayerNorm jobs (fp32 dout) and a bias job (bf16 dout)\n", N, C,
           LN_JOBS);
    size_t n = (size_t)N * C;

    // inputs: per LN job dout (fp32), inp (bf16) and its row statistics; the bias job's dout (bf16);
    // the gradients start from random values (the kernels add to them)
    uint64_t seed = 31;
    float *dout[LN_JOBS], *inp[LN_JOBS], *mean[LN_JOBS], *rstd[LN_JOBS];
    float *d_dout[LN_JOBS], *d_mean[LN_JOBS], *d_rstd[LN_JOBS];
    bf16* d_inp[LN_JOBS];
    for (int k = 0; k < LN_JOBS; k++) {
        dout[k] = (float*)host_alloc(n * sizeof(float));
        inp[k] = (float*)host_alloc(n * sizeof(float));
        mean[k] = (float*)host_alloc(N * sizeof(float));
        rstd[k] = (float*)host_alloc(N * sizeof(float));
        fill_uniform(dout[k], n, -1.0f, 1.0f, &seed);
        fill_uniform(inp[k], n, -3.0f, 4.0f, &seed);
        fill_uniform(mean[k], N, 0.0f, 1.0f, &seed);
        fill_uniform(rstd[k], N, 0.4f, 0.8f, &seed);
        d_dout[k] = to_device_f32(dout[k], n);
        d_inp[k] = to_device_bf16(inp[k], n);  // rounds the host copy too
        d_mean[k] = to_device_f32(mean[k], N);
        d_rstd[k] = to_device_f32(rstd[k], N);
    }
    float* bias_dout = (float*)host_alloc(n * sizeof(float));
    fill_uniform(bias_dout, n, -1.0f, 1.0f, &seed);
    bf16* d_bias_dout = to_device_bf16(bias_dout, n);
    const int ngrads = 2 * LN_JOBS + 1;  // (dw, db) per LN job, then the bias
    float* grads0 = (float*)host_alloc(ngrads * (size_t)C * sizeof(float));
    fill_uniform(grads0, ngrads * (size_t)C, -1.0f, 1.0f, &seed);
    float* d_grads0 = to_device_f32(grads0, ngrads * (size_t)C);
    float* d_grads = (float*)device_alloc(ngrads * (size_t)C * sizeof(float));
    trainer_column_partials(C);  // version 2's stage 1

    // the CPU reference
    double* gd = (double*)host_alloc(ngrads * (size_t)C * sizeof(double));
    for (size_t i = 0; i < ngrads * (size_t)C; i++) { gd[i] = grads0[i]; }
    for (int k = 0; k < LN_JOBS; k++) {
        column_sums_ref(gd + 2 * k * (size_t)C, gd + (2 * k + 1) * (size_t)C, dout[k], inp[k], mean[k], rstd[k], N, C);
    }
    column_sums_ref(NULL, gd + 2 * LN_JOBS * (size_t)C, bias_dout, NULL, NULL, NULL, N, C);
    float* ref = (float*)host_alloc(ngrads * (size_t)C * sizeof(float));
    for (size_t i = 0; i < ngrads * (size_t)C; i++) { ref[i] = (float)gd[i]; }
    float* got = (float*)host_alloc(ngrads * (size_t)C * sizeof(float));

    ColumnJobs<float> ln_jobs = {};
    for (int k = 0; k < LN_JOBS; k++) {
        ln_jobs.job[k] = ln_job(d_grads + 2 * k * C, d_grads + (2 * k + 1) * C, d_dout[k], d_inp[k], d_mean[k], d_rstd[k]);
    }
    ColumnJobs<floatX> bias_jobs = {};
    bias_jobs.job[0] = ColumnJob<floatX>{NULL, d_grads + 2 * LN_JOBS * C, d_bias_dout, NULL, NULL, NULL};
    int v = 0;  // the version run() runs
    auto run = [&] {
        if (v == 1) {
            column_sums_v1_launch(ln_jobs, LN_JOBS, N, C);
            column_sums_v1_launch(bias_jobs, 1, N, C);
        } else {
            column_grads(ln_jobs, LN_JOBS, N, C);
            column_grads(bias_jobs, 1, N, C);
        }
    };
    auto reset = [&] {
        cudaCheck(cudaMemcpy(d_grads, d_grads0, ngrads * (size_t)C * sizeof(float), cudaMemcpyDeviceToDevice));
    };
    // sums of N terms of magnitude up to ~3 in fp32, in another order than the reference: the
    // absolute tolerance (1e-2 at 8192 rows) scales with N
    const float atol = fmaxf(1e-2f * N / N_ROWS, 1e-5f);
    double bytes = LN_JOBS * ((sizeof(float) + sizeof(bf16)) * (double)n + 2.0 * N * sizeof(float)) +
                   (double)n * sizeof(bf16) + 2.0 * ngrads * C * sizeof(float);
    for (v = 1; v <= 2; v++) {
        if (only && v != only) { continue; }
        printf("version %d: %s\n", v, v == 1 ? "one stage" : "two stages (the trainer's column_grads)");
        reset();
        run();
        cudaCheck(cudaDeviceSynchronize());
        from_device_f32(got, d_grads, ngrads * (size_t)C);
        check_close("ln grads", ref, got, 2 * LN_JOBS * (size_t)C, atol, 1e-3f);
        check_close("bias", ref + 2 * LN_JOBS * (size_t)C, got + 2 * LN_JOBS * (size_t)C, C, atol, 1e-3f);
        char label[64];
        snprintf(label, sizeof label, "  v%d LN grads + bias grad", v);
        if (!timing_skipped(label)) { print_timing(label, time_ms(run, reset), bytes); }
    }
    printf("all checked versions match the CPU reference\n");
    return 0;
}
