/*
attention_backward: the backward pass of causal multi-head self-attention, from the trainer's
layouts: qkv (B, T, 3C) bf16 (q, k, v of head h at channels h*HS, C + h*HS, 2C + h*HS), dout =
dL/d(attention output) (B, T, C) bf16; the result dqkv (B, T, 3C) bf16. Per (b, head), with
P = causal softmax(q k^T / sqrt(HS)):

    dV = P^T dO,   dP = dO V^T,   dS = P (dP - rowsum(P dP)) / sqrt(HS),   dQ = dS K,   dK = dS^T Q

version 1: train_gpt2.cu's path with the (B, NH, T, T) tensors (attention_v1.h): permute into
           heads, batched matmuls for datt and dv, the softmax backward kernel on the saved
           probabilities, batched matmuls for dq and dk, permute back. Its forward pass (which
           saves the probabilities) runs before, untimed.
version 2: the trainer's flash attention backward (../../attention.cuh; version 1's path for head
           sizes it does not take): D = rowsum(dO O) (one small kernel), then two kernels that
           recompute the probabilities from the log-sum-exp the forward saved: one owns 64-query
           tiles (dQ), one owns 64-key tiles (dK, dV), WMMA tile products, fixed order, no
           atomics. Its forward runs before, untimed.

Checked against a CPU fp32 reference from the formulas (train_gpt2.c's attention backward;
attention_ref.h, shared with attention_forward.cu). Each
version also runs twice and must give bit-identical dqkv (determinism). Timing in ms and in
TFLOP/s of the useful (causal) backward work, 8 * B * NH * HS * T (T + 1) / 2 flops (four
products over the causal half; the recomputation of the scores is not counted).

Build and run (needs a GPU):  nvcc -O3 -arch=sm_90 -I../.. attention_backward.cu -o attention_backward -lcublas
                              ./attention_backward [version] [B=batch] [T=seq] [NH=heads] [HS=head size]
    ./attention_backward ref     checks the CPU reference (finite differences; no GPU)
Status: verified through the CPU execution layer at small sizes (make test-dev-cuda); never run on
a GPU yet, so no timing.
*/
#include "attention_v1.h"
#include "attention_ref.h"
#include "attention.cuh"

#define BATCH 8    // B (default; B= on the command line)
#define SEQ 1024   // T (T=)
#define HEADS 12   // NH (NH=)
#define HSIZE 64   // HS (HS=)

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "ref") == 0) { return check_attention_reference(); }
    int B = BATCH, T = SEQ, NH = HEADS, HS = HSIZE;
    const SizeArg sizes[] = {{"B", &B}, {"T", &T}, {"NH", &NH}, {"HS", &HS}};
    int only = parse_args(argc, argv, 2, sizes, 4);
    const int C = NH * HS;
    print_device();
    printf("attention_backward: B = %d, T = %d, NH = %d, HS = %d\n", B, T, NH, HS);
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;

    uint64_t seed = 13;
    float* qkv = (float*)host_alloc(nqkv * sizeof(float));
    float* dout = (float*)host_alloc(nout * sizeof(float));
    fill_uniform(qkv, nqkv, -1.5f, 1.5f, &seed);
    fill_uniform(dout, nout, -1.0f, 1.0f, &seed);
    bf16* d_qkv = to_device_bf16(qkv, nqkv);
    bf16* d_dout = to_device_bf16(dout, nout);
    bf16* d_out = (bf16*)device_alloc(nout * sizeof(bf16));
    bf16* d_dqkv = (bf16*)device_alloc(nqkv * sizeof(bf16));
    V1Scratch sc = v1_scratch_alloc(B, T, NH, HS);
    float* d_lse = (float*)device_alloc((size_t)B * NH * T * sizeof(float));
    float* d_D = (float*)device_alloc((size_t)B * NH * T * sizeof(float));
    char why[200];
    int tile = flash_attention_tile(HS, why, sizeof(why));
    if (tile == 0 && only != 1) { fprintf(stderr, "version 2: %s\n", why); exit(EXIT_FAILURE); }
    cublasHandle_t handle;
    cublas_check(cublasCreate(&handle), __LINE__);

    printf("CPU reference (several seconds at the real sizes)...\n");
    float* ref = (float*)host_alloc(nqkv * sizeof(float));
    float* ref_out = (float*)host_alloc(nout * sizeof(float));
    attention_ref(ref_out, ref, qkv, dout, B, T, NH, HS);
    float ref_max = 0.0f;
    for (size_t i = 0; i < nqkv; i++) { ref_max = fmaxf(ref_max, fabsf(ref[i])); }
    float* got = (float*)host_alloc(nqkv * sizeof(float));
    float* again = (float*)host_alloc(nqkv * sizeof(float));

    double flops = 8.0 * B * NH * HS * (double)T * (T + 1) / 2;
    for (int v = 1; v <= 2; v++) {
        if (only && v != only) { continue; }
        printf("version %d\n", v);
        // the forward pass each version's backward needs (probabilities, or out and lse), untimed
        if (v == 1) {
            attention_v1(handle, d_out, d_qkv, &sc, B, T, NH, HS);
        } else {
            flash_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH, tile);
        }
        auto run = [&] {
            if (v == 1) {
                attention_backward_v1(handle, d_dqkv, d_dout, d_qkv, &sc, B, T, NH, HS);
            } else {
                flash_attention_backward(d_dqkv, d_dout, d_qkv, d_out, d_lse, d_D, B, T, C, NH, tile);
            }
        };
        for (int k = 0; k < 2; k++) {
            cudaCheck(cudaMemset(d_dqkv, 0xff, nqkv * sizeof(bf16)));  // NaN: every element must be written
            run();
            cudaCheck(cudaDeviceSynchronize());
            from_device_bf16(k == 0 ? got : again, d_dqkv, nqkv);
        }
        // bf16 inputs, outputs and probabilities: within 1% of the gradient's largest magnitude
        check_close("dqkv", ref, got, nqkv, 1e-2f * ref_max, 5e-2f);
        int same = memcmp(got, again, nqkv * sizeof(float)) == 0;
        printf("    repeat   %s\n", same ? "bit-identical" : "DIFFERS  FAIL");
        if (!same) { exit(EXIT_FAILURE); }
        char label[64];
        snprintf(label, sizeof label, "  v%d attention backward", v);
        if (!timing_skipped(label)) {
            float ms = time_ms(run, no_prep);
            printf("%s %9.4f ms  %8.1f TFLOP/s (causal work)\n", label, ms, flops / (ms * 1e-3) / 1e12);
        }
    }
    cublas_check(cublasDestroy(handle), __LINE__);
    printf("all checked versions match the CPU reference\n");
    return 0;
}
