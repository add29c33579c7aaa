/*
attention_forward: causal multi-head self-attention, forward only, from the trainer's qkv rows:
qkv is (B, T, 3C) bf16 with q, k, v of head h at channels h*HS, C + h*HS, 2C + h*HS; the output
is (B, T, C) bf16 with head h at channels h*HS:

    out[b, t, h] = sum_{t2 <= t} softmax_t2(q_t . k_t2 / sqrt(HS)) v_t2

version 1: attention with the (B, NH, T, T) matrix: permute qkv into (B, NH, T, HS) heads, batched
           q.k^T into a bf16 (B, NH, T, T) tensor (cublasGemmStridedBatchedEx, fp32
           accumulation), a causal softmax kernel (one warp per row), batched att.v, permute back
           into rows (attention_v1.h). Materialises two T x T tensors per head.
version 2: a flash-attention-style kernel on CUDA cores (no tensor cores): one
           block per (batch, head, tile of 64 queries), one thread per query holding q and its
           output accumulator in fp32 registers; tiles of 64 keys and values are staged through
           shared memory; per chunk of 32 keys the thread computes its scores, updates its
           running max and sum once (online softmax) and accumulates p.v; tiles and chunks above
           the diagonal are skipped, the diagonal masked. No T x T tensor exists. Heavy tiles are
           launched first. Forward only (no log-sum-exp saved).
version 3: flash attention with its accumulators in shared memory (attention_flash_smem.h): blocks
           of 64 queries (16 per warp), key and value tiles loaded one bf16 at a time, WMMA
           tile products, O round-tripping through shared memory in fp32 every tile, the online
           softmax 16 rows at a time with full-warp reductions; saves the row log-sum-exp.
version 4: FlashAttention-2's design on WMMA fragments (attention_fwd_wmma.h) at a compile-time
           padded head size (16, 32, 64, 128): 16-byte loads of the q, k, v tiles, the next
           key/value tile loaded during the current one's math, O in WMMA accumulator fragments
           across the key tiles (rescaled per row through a row-index fragment); the fragments' layout
           is hidden, so S (fp32) and P (bf16) go through shared memory every tile, two lanes per
           row for the softmax statistics; saves the row log-sum-exp.
version 5: the trainer's forward (../../attention.cuh, flash_attention_forward): version 4's tiles and
           loads with PTX's mma.m16n8k16 and ldmatrix, whose register layouts are documented: S stays
           in C fragments, the online softmax runs on them (a row's statistics over the 4 lanes that
           hold it), O is rescaled in registers and P becomes the A operand of P V in registers;
           the causal mask only on tiles that cross the diagonal.

Checked against a CPU fp32 reference from the formulas (train_gpt2.c's attention; attention_ref.h,
shared with attention_backward.cu): out, and lse for versions 3 to 5. Timing in ms and in
TFLOP/s of the useful (causal) work, 4 * B * NH * HS * T (T + 1) / 2 flops.

Build and run (needs a GPU):  nvcc -O3 -arch=sm_90 -I../.. attention_forward.cu -o attention_forward -lcublas
                              ./attention_forward [version] [B=batch] [T=seq] [NH=heads] [HS=head size]
Status: verified through the CPU execution layer at small sizes (make test-dev-cuda); on an H200 at
the default sizes every version matches the reference, version 5 in 0.1004 ms, version 4 in 0.1651 ms
(dev/bench/h200/dev_cuda_attention_2.txt).
*/
#include "attention_v1.h"
#include "attention_ref.h"
#include "attention_flash_smem.h"
#include "attention.cuh"
#include "attention_fwd_wmma.h"

#define BATCH 8    // B (default; B= on the command line)
#define SEQ 1024   // T (T=)
#define HEADS 12   // NH (NH=)
#define HSIZE 64   // HS (HS=; version 2 is compiled for this one)
#define V2_QUERIES 64   // version 2: queries per block (one thread each)
#define V2_KEYS 64   // version 2: keys per tile
#define V2_CHUNK 32  // version 2: keys per online-softmax update (the warp size)

// ----------------------------------------------------------------------------
// version 2: flash-style, one thread per query, online softmax per tile of keys

template <int HS>
__global__ void __launch_bounds__(V2_QUERIES)
    attention_v2(bf16* out, const bf16* qkv, int T, int NH, float scale) {
    constexpr int HV = HS / 8;  // 128-bit vectors per head row
    __shared__ float ks[V2_KEYS][HS], vs[V2_KEYS][HS];
    int ntiles = (T + V2_QUERIES - 1) / V2_QUERIES, nbh = gridDim.x / ntiles;
    int tile = ntiles - 1 - blockIdx.x / nbh;  // the heaviest (latest) query tiles of every head first
    int bh = blockIdx.x % nbh, b = bh / NH, h = bh % NH;
    int C = NH * HS, t = tile * V2_QUERIES + threadIdx.x;
    bool valid = t < T;  // the threads past T in the last tile load tiles and meet barriers, write nothing
    size_t row_len = 3 * (size_t)C;
    const bf16* base = qkv + (size_t)b * T * row_len + h * HS;
    float q[HS], o[HS];
    const int4* q4 = (const int4*)(base + (size_t)t * row_len);
#pragma unroll
    for (int v = 0; v < HV; v++) {
        if (valid) {
            unpack8(q + 8 * v, q4[v]);
        } else {
            for (int e = 0; e < 8; e++) { q[8 * v + e] = 0.0f; }
        }
    }
#pragma unroll
    for (int i = 0; i < HS; i++) { q[i] *= scale; o[i] = 0.0f; }
    float m = -INFINITY, l = 0.0f;
    for (int kt = 0; kt <= tile; kt++) {  // key tiles at or below the diagonal
        __syncthreads();  // the previous tile is no longer read
        for (int e = threadIdx.x; e < V2_KEYS * HV; e += V2_QUERIES) {
            int j = e / HV, v = e % HV;
            if (kt * V2_KEYS + j >= T) {  // past the sequence: zeros (above every valid query's diagonal)
                for (int i = 0; i < 8; i++) { ks[j][8 * v + i] = vs[j][8 * v + i] = 0.0f; }
                continue;
            }
            const bf16* krow = base + (size_t)(kt * V2_KEYS + j) * row_len + C;
            unpack8(&ks[j][8 * v], ((const int4*)krow)[v]);
            unpack8(&vs[j][8 * v], ((const int4*)(krow + C))[v]);
        }
        __syncthreads();
        // the tile in chunks of V2_CHUNK keys (scores for a whole tile would spill registers);
        // a chunk wholly above the diagonal is skipped (warp-uniform: V2_CHUNK is the warp size)
        for (int j0 = 0; j0 < V2_KEYS; j0 += V2_CHUNK) {
            if (kt == tile && j0 > (int)threadIdx.x) { break; }
            float s[V2_CHUNK];
            float tmax = -INFINITY;
#pragma unroll
            for (int j = 0; j < V2_CHUNK; j++) {
                float dot = 0.0f;
#pragma unroll
                for (int i = 0; i < HS; i++) { dot += q[i] * ks[j0 + j][i]; }  // a broadcast read
                s[j] = (kt < tile || j0 + j <= (int)threadIdx.x) ? dot : -INFINITY;  // causal mask
                tmax = fmaxf(tmax, s[j]);
            }
            float mnew = fmaxf(m, tmax);  // finite: key 0 is in the first chunk of the first tile
            float corr = expf(m - mnew);  // 0 on the first chunk
            l *= corr;
#pragma unroll
            for (int i = 0; i < HS; i++) { o[i] *= corr; }
#pragma unroll
            for (int j = 0; j < V2_CHUNK; j++) {
                float p = expf(s[j] - mnew);
                l += p;
#pragma unroll
                for (int i = 0; i < HS; i++) { o[i] += p * vs[j0 + j][i]; }
            }
            m = mnew;
        }
    }
    if (!valid) { return; }
    float inv = 1.0f / l;
#pragma unroll
    for (int i = 0; i < HS; i++) { o[i] *= inv; }
    int4* out4 = (int4*)(out + ((size_t)b * T + t) * C + h * HS);
#pragma unroll
    for (int v = 0; v < HV; v++) { out4[v] = pack8(o + 8 * v); }
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "ref") == 0) { return check_attention_reference(); }
    int B = BATCH, T = SEQ, NH = HEADS, HS = HSIZE;
    const SizeArg sizes[] = {{"B", &B}, {"T", &T}, {"NH", &NH}, {"HS", &HS}};
    int only = parse_args(argc, argv, 5, sizes, 4);
    // the versions that take this size (a version named on the command line must; without one, the
    // others are skipped with a line that says why)
    char why[5][200] = {"", "", "", "", ""};
    if (HS != HSIZE) { snprintf(why[1], sizeof why[1], "version 2 is compiled for HS = %d", HSIZE); }
    int tile3 = fs_attention_tile(HS, why[2], sizeof why[2]);
    (void)flash_attention_supported(HS, why[4], sizeof why[4]);  // fills why[4] where it does not
    memcpy(why[3], why[4], sizeof why[3]);  // version 4: the same head sizes (its shared memory fits wherever 5's does)
    for (int v = 1; v <= 5; v++) {
        if (why[v - 1][0] != '\0' && only == v) { size_error(argv[0], why[v - 1]); }
    }
    const int C = NH * HS;
    static_assert(V2_QUERIES == V2_KEYS, "version 2 tiles");
    print_device();
    printf("attention_forward: B = %d, T = %d, NH = %d, HS = %d\n", B, T, NH, HS);
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;

    uint64_t seed = 11;
    float* qkv = (float*)host_alloc(nqkv * sizeof(float));
    fill_uniform(qkv, nqkv, -1.5f, 1.5f, &seed);  // scores up to about +-18: a peaked softmax somewhere
    bf16* d_qkv = to_device_bf16(qkv, nqkv);
    bf16* d_out = (bf16*)device_alloc(nout * sizeof(bf16));
    V1Scratch sc = v1_scratch_alloc(B, T, NH, HS);
    float* d_lse = (float*)device_alloc(nlse * sizeof(float));  // versions 3 to 5
    cublasHandle_t handle;
    cublas_check(cublasCreate(&handle), __LINE__);

    printf("CPU reference (several seconds at the real sizes)...\n");
    float* ref = (float*)host_alloc(nout * sizeof(float));
    float* ref_lse = (float*)host_alloc(nlse * sizeof(float));
    attention_ref(ref, ref_lse, NULL, qkv, NULL, B, T, NH, HS);
    float* got = (float*)host_alloc(nout * sizeof(float));
    float* got_lse = (float*)host_alloc(nlse * sizeof(float));

    double flops = 4.0 * B * NH * HS * (double)T * (T + 1) / 2;
    for (int v = 1; v <= 5; v++) {
        if (only && v != only) { continue; }
        if (why[v - 1][0] != '\0') {
            printf("(version %d skipped: %s)\n", v, why[v - 1]);
            continue;
        }
        printf("version %d\n", v);
        auto run = [&] {
            if (v == 1) {
                attention_v1(handle, d_out, d_qkv, &sc, B, T, NH, HS);
            } else if (v == 2) {
                attention_v2<HSIZE><<<B * NH * ceil_div(T, V2_QUERIES), V2_QUERIES>>>(d_out, d_qkv, T, NH, 1.0f / sqrtf((float)HS));
                cudaCheckLaunch();
            } else if (v == 3) {
                fs_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH, tile3);
            } else if (v == 4) {
                wmma_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH);
            } else {
                flash_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH);
            }
        };
        cudaCheck(cudaMemset(d_out, 0xff, nout * sizeof(bf16)));  // NaN: every element must be written
        cudaCheck(cudaMemset(d_lse, 0xff, nlse * sizeof(float)));
        run();
        cudaCheck(cudaDeviceSynchronize());
        from_device_bf16(got, d_out, nout);
        check_close("out", ref, got, nout, 2e-2f, 2e-2f);
        if (v >= 3) {  // fp32 scores from the same bf16 inputs: only the summation order differs
            from_device_f32(got_lse, d_lse, nlse);
            check_close("lse", ref_lse, got_lse, nlse, 1e-4f, 1e-4f);
        }
        char label[64];
        snprintf(label, sizeof label, "  v%d attention forward", v);
        if (!timing_skipped(label)) {
            float ms = time_ms(run, no_prep);
            printf("%s %9.4f ms  %8.1f TFLOP/s (causal work)\n", label, ms, flops / (ms * 1e-3) / 1e12);
        }
    }
    cublas_check(cublasDestroy(handle), __LINE__);
    printf("all checked versions match the CPU reference\n");
    return 0;
}
