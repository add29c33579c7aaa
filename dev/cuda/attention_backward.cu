/*
attention_backward: the backward pass of causal multi-head self-attention, from the trainer's
layouts: qkv (B, T, 3C) bf16 (q, k, v of head h at channels h*HS, C + h*HS, 2C + h*HS), dout =
dL/d(attention output) (B, T, C) bf16; the result dqkv (B, T, 3C) bf16. Per (b, head), with
P = causal softmax(q k^T / sqrt(HS)):

    dV = P^T dO,   dP = dO V^T,   dS = P (dP - rowsum(P dP)) / sqrt(HS),   dQ = dS K,   dK = dS^T Q

version 1: the backward pass on the saved (B, NH, T, T) probabilities (attention_v1.h): permute
           into heads, batched matmuls for datt and dv, the softmax backward kernel, batched
           matmuls for dq and dk, permute back. Its forward pass (which saves the probabilities)
           runs before, untimed.
version 2: flash attention with its accumulators in shared memory (attention_flash_smem.h):
           D = rowsum(dO O), then two kernels that each recompute S and dP from the log-sum-exp:
           one owns 64-query tiles (dQ), one owns 64-key tiles (dK, dV); 7 tile products per
           tile pair, fixed order, no atomics. Its forward runs before, untimed.
version 3: FlashAttention-2's backward on WMMA fragments (attention_bwd_wmma.h): D = rowsum(dO O),
           one kernel that owns 64-key tiles and walks the query tiles with the 5 tile products
           (S, dP, dV += P^T dO, dK += dS^T Q, dQ += dS K), P^T and dS^T through shared memory,
           dK and dV in registers, each block's dQ contributions in its own fp32 slice (a split),
           then a kernel that sums the splits in order into dQ. No atomics. S=N sets the number
           of splits (default: wb_dq_splits). Its forward (the trainer's) runs before, untimed.
version 4: the trainer's backward (../../attention.cuh, flash_attention_backward): D = rowsum(dO O),
           then on mma.m16n8k16 with ldmatrix operands a kernel that owns 64-key tiles (S^T, dP^T,
           dV += P^T dO, dK += dS^T Q: 4 products, P^T and dS^T never leave registers) and one
           that owns 64-query tiles (S, dP, dQ += dS K: 3 products); every accumulator in
           registers until written once. No atomics, no fp32 partial sums in memory. Its forward
           runs before, untimed.

Checked against a CPU fp32 reference from the formulas (train_gpt2.c's attention backward;
attention_ref.h, shared with attention_forward.cu): dq, dk and dv each. Each version also runs
twice and must give bit-identical dqkv (determinism). Timing in ms and in TFLOP/s of the useful
(causal) backward work, 8 * B * NH * HS * T (T + 1) / 2 flops (four products over the causal
half; the recomputation of the scores is not counted).

Build and run (needs a GPU):  nvcc -O3 -arch=sm_90 -I../.. attention_backward.cu -o attention_backward -lcublas
                              ./attention_backward [version] [B=batch] [T=seq] [NH=heads] [HS=head size] [S=splits]
    (S=: version 3's dQ splits)
    ./attention_backward ref     checks the CPU reference (finite differences; no GPU)
Status: every version verified through the CPU execution layer at small sizes (make test-dev-cuda);
versions 1 to 3 timed on an H100 and an H200 (dev/cuda/README.md), version 4 not run on a GPU yet.
*/
#include "attention_v1.h"
#include "attention_ref.h"
#include "attention_flash_smem.h"
#include "attention.cuh"
#include "attention_bwd_wmma.h"

#define BATCH 8    // B (default; B= on the command line)
#define SEQ 1024   // T (T=)
#define HEADS 12   // NH (NH=)
#define HSIZE 64   // HS (HS=)

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "ref") == 0) { return check_attention_reference(); }
    int B = BATCH, T = SEQ, NH = HEADS, HS = HSIZE, S = 0;
    const SizeArg sizes[] = {{"B", &B}, {"T", &T}, {"NH", &NH}, {"HS", &HS}, {"S", &S}};
    int only = parse_args(argc, argv, 4, sizes, 5);
    // the versions that take this size (see attention_forward.cu)
    char why[4][200] = {"", "", "", ""};
    int tile2 = fs_attention_tile(HS, why[1], sizeof why[1]);
    (void)flash_attention_supported(HS, why[3], sizeof why[3]);  // fills why[3] where it does not
    if (why[3][0] != '\0') {
        memcpy(why[2], why[3], sizeof why[2]);  // version 3 takes the same head sizes
    } else {
        (void)wb_attention_supported(HS, why[2], sizeof why[2]);
    }
    for (int v = 1; v <= 4; v++) {
        if (why[v - 1][0] != '\0' && only == v) { size_error(argv[0], why[v - 1]); }
    }
    const int C = NH * HS;
    int nsplits = S > 0 ? S : wb_dq_splits(B * NH, T);
    print_device();
    printf("attention_backward: B = %d, T = %d, NH = %d, HS = %d (version 3: %d dQ splits)\n", B, T, NH, HS, nsplits);
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
    float* d_dq_acc = why[2][0] ? NULL : (float*)device_alloc(wb_dq_acc_floats(B, NH, T, HS, nsplits) * sizeof(float));
    cublasHandle_t handle;
    cublas_check(cublasCreate(&handle), __LINE__);

    printf("CPU reference (several seconds at the real sizes)...\n");
    float* ref = (float*)host_alloc(nqkv * sizeof(float));
    float* ref_out = (float*)host_alloc(nout * sizeof(float));
    attention_ref(ref_out, NULL, ref, qkv, dout, B, T, NH, HS);
    float* got = (float*)host_alloc(nqkv * sizeof(float));
    float* again = (float*)host_alloc(nqkv * sizeof(float));
    // dq, dk, dv apart (each (B * T, C) of the (B * T, 3C) rows), and the largest magnitude of each
    size_t npart = (size_t)B * T * C;
    float* ref_part = (float*)host_alloc(npart * sizeof(float));
    float* got_part = (float*)host_alloc(npart * sizeof(float));
    auto part = [&](float* dst, const float* rows, int k) {
        for (size_t r = 0; r < (size_t)B * T; r++) { memcpy(dst + r * C, rows + r * 3 * C + k * C, C * sizeof(float)); }
    };

    double flops = 8.0 * B * NH * HS * (double)T * (T + 1) / 2;
    for (int v = 1; v <= 4; v++) {
        if (only && v != only) { continue; }
        if (why[v - 1][0] != '\0') {
            printf("(version %d skipped: %s)\n", v, why[v - 1]);
            continue;
        }
        printf("version %d\n", v);
        // the forward pass each version's backward needs (probabilities, or out and lse), untimed
        if (v == 1) {
            attention_v1(handle, d_out, d_qkv, &sc, B, T, NH, HS);
        } else if (v == 2) {
            fs_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH, tile2);
        } else {
            flash_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH);
        }
        auto run = [&] {
            if (v == 1) {
                attention_backward_v1(handle, d_dqkv, d_dout, d_qkv, &sc, B, T, NH, HS);
            } else if (v == 2) {
                fs_attention_backward(d_dqkv, d_dout, d_qkv, d_out, d_lse, d_D, B, T, C, NH, tile2);
            } else if (v == 3) {
                wmma_attention_backward(d_dqkv, d_dq_acc, d_D, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, nsplits);
            } else {
                flash_attention_backward(d_dqkv, d_D, d_dout, d_qkv, d_out, d_lse, B, T, C, NH);
            }
        };
        for (int k = 0; k < 2; k++) {
            cudaCheck(cudaMemset(d_dqkv, 0xff, nqkv * sizeof(bf16)));  // NaN: every element must be written
            run();
            cudaCheck(cudaDeviceSynchronize());
            from_device_bf16(k == 0 ? got : again, d_dqkv, nqkv);
        }
        // bf16 inputs, outputs and probabilities: within 1% of the part's largest magnitude
        const char* names[3] = {"dq", "dk", "dv"};
        for (int k = 0; k < 3; k++) {
            part(ref_part, ref, k);
            part(got_part, got, k);
            float ref_max = 0.0f;
            for (size_t i = 0; i < npart; i++) { ref_max = fmaxf(ref_max, fabsf(ref_part[i])); }
            check_close(names[k], ref_part, got_part, npart, 1e-2f * ref_max, 5e-2f);
        }
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
