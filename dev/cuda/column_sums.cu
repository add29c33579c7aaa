/*
column_sums: the deterministic column sums of the trainer (siamese.cuh), out[c] += sum_r in[r][c] over the N
rows of an (N, C) tensor, for the two kinds of input the trainer hands them:

    a linear layer's bias gradient   in = dout, bf16 (matmul_backward_weight: column_grads)
    the LayerNorm gradients' finish  in = the row blocks' partial sums, fp32 (ln_backward_run:
                                     column_sums, a few hundred rows at most)

Both versions add in a fixed order that depends only on N and C, so each result is deterministic.

version 1: the trainer's column_sums: one stage, one block of 32 x 32 threads per 32 columns walks
           all N rows, 32 apart, and adds its 32 partial sums per column in order through shared
           memory straight into out: 24 blocks at C = 768.
version 2: the trainer's column_grads: two stages, the rows split into column_splits(N) chunks (32
           at N = 8192; the count depends on N only), stage 1 writes each chunk's sums (768 blocks
           at C = 768), stage 2, version 1 on those rows, adds the chunks of each column in order.
Both are the trainer's own code (trainer.h includes train_gpt2.cu); it runs version 1 on the
LayerNorm partials and version 2 on the biases, whose N = B * T rows would leave version 1 with too
few blocks.

Checked against a CPU reference summing in double from random starting values of out (the
kernels add to it). GB/s against the bytes each job must read at the least: in, and out read and
written.

Build and run (needs a GPU):  nvcc -O3 -arch=sm_90 -I. dev/cuda/column_sums.cu -o column_sums -lcublasLt -lcublas
                              ./column_sums [version] [N=rows] [C=columns]
Status: verified through the CPU execution layer at small sizes (make test-dev-cuda); never run on
a GPU yet, so no timing.
*/
#include "trainer.h"

#define N_ROWS (8 * 1024)  // B * T (default; N= on the command line)
#define CH 768             // C (C=)

// out += the column sums of in (N, C), in double
static void column_sums_ref(double* out, const float* in, int N, int C) {
    for (int r = 0; r < N; r++) {
        for (int c = 0; c < C; c++) { out[c] += in[(size_t)r * C + c]; }
    }
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    int N = N_ROWS, C = CH;
    const SizeArg sizes[] = {{"N", &N}, {"C", &C}};
    int only = parse_args(argc, argv, 2, sizes, 2);
    print_device();
    printf("column_sums: N = %d rows, C = %d: a bf16 input (a bias gradient) and an fp32 one\n", N, C);
    size_t n = (size_t)N * C;

    // inputs: one bf16 and one fp32 (N, C) tensor; the sums start from random values (the kernels add to them)
    uint64_t seed = 31;
    float *in16 = (float*)host_alloc(n * sizeof(float)), *in32 = (float*)host_alloc(n * sizeof(float));
    float* out0 = (float*)host_alloc(2 * (size_t)C * sizeof(float));
    fill_uniform(in16, n, -1.0f, 1.0f, &seed);
    fill_uniform(in32, n, -3.0f, 4.0f, &seed);
    fill_uniform(out0, 2 * (size_t)C, -1.0f, 1.0f, &seed);
    bf16* d_in16 = to_device_bf16(in16, n);  // rounds the host copy too
    float* d_in32 = to_device_f32(in32, n);
    float* d_out0 = to_device_f32(out0, 2 * (size_t)C);
    float* d_out = (float*)device_alloc(2 * (size_t)C * sizeof(float));
    trainer_partials(C);  // version 2's stage 1

    // the CPU reference: (bf16 input's sums, fp32 input's sums)
    double* od = (double*)host_alloc(2 * (size_t)C * sizeof(double));
    for (size_t i = 0; i < 2 * (size_t)C; i++) { od[i] = out0[i]; }
    column_sums_ref(od, in16, N, C);
    column_sums_ref(od + C, in32, N, C);
    float* ref = (float*)host_alloc(2 * (size_t)C * sizeof(float));
    for (size_t i = 0; i < 2 * (size_t)C; i++) { ref[i] = (float)od[i]; }
    float* got = (float*)host_alloc(2 * (size_t)C * sizeof(float));

    int v = 0;  // the version run() runs
    auto run = [&] {
        if (v == 1) {
            column_sums(ColumnOuts{{d_out}}, 1, d_in16, N, C);
            column_sums(ColumnOuts{{d_out + C}}, 1, d_in32, N, C);
        } else {
            column_grads(d_out, d_in16, N, C);
            column_grads(d_out + C, d_in32, N, C);
        }
    };
    auto reset = [&] { cudaCheck(cudaMemcpy(d_out, d_out0, 2 * (size_t)C * sizeof(float), cudaMemcpyDeviceToDevice)); };
    // sums of N terms of magnitude up to ~4 in fp32, in another order than the reference: the
    // absolute tolerance (1e-2 at 8192 rows) scales with N
    const float atol = fmaxf(1e-2f * N / N_ROWS, 1e-5f);
    double bytes = (sizeof(bf16) + sizeof(float)) * (double)n + 2.0 * 2 * C * sizeof(float);
    for (v = 1; v <= 2; v++) {
        if (only && v != only) { continue; }
        printf("version %d: %s\n", v, v == 1 ? "one stage (the trainer's column_sums)" : "two stages (the trainer's column_grads)");
        reset();
        run();
        cudaCheck(cudaDeviceSynchronize());
        from_device_f32(got, d_out, 2 * (size_t)C);
        check_close("bf16 in", ref, got, C, atol, 1e-3f);
        check_close("fp32 in", ref + C, got + C, C, atol, 1e-3f);
        char label[64];
        snprintf(label, sizeof label, "  v%d bf16 and fp32 column sums", v);
        if (!timing_skipped(label)) { print_timing(label, time_ms(run, reset), bytes); }
    }
    printf("all checked versions match the CPU reference\n");
    return 0;
}
