/*
classifier: the fused softmax + cross-entropy + dlogits of train_gpt2.cu (classifier). For each of
the B*T rows of bf16 logits (Vp = 50304 entries, of which the first V = 50257 are real):

    lse        = log sum_{i < V} exp(logit_i)
    loss[row]  = lse - logit[target]
    dlogits_i  = (exp(logit_i - lse) - [i == target]) * dloss    for i < V, 0 on the padding

written IN PLACE over the logits, so that the probabilities never exist as a tensor. Moves
2 * N * Vp * 2 bytes: pure bandwidth. Versions 1 to 3 also have a loss-only mode (write_grad 0),
for a trainer that keeps the logits through the forward pass and runs the classifier again in the
backward pass (both passes then cost a training step: read the row, then read and write it); the
trainer's versions 4 and 5 always write dlogits (the trainer runs them once, in the forward pass).

version 1: two passes over the row from memory: one block of 512 threads per row, scalar bf16
           loads, an online (max, sum) per thread that calls expf twice per element (the merge
           rescales the sum even when the max does not change), then a second pass for dlogits.
version 2: the same two passes with 128-bit loads (8 bf16) and a cheaper online softmax: per
           vector of 8, one max, at most one rescale of the running sum, then 8 expf.
version 3: the row in registers: 1024 threads per row each load their (at most CLS3_VPT) vectors
           of 8 at once, take their local max and sum of exp from registers, merge once across the
           block, and write dlogits from the same registers, with a second expf per entry: the row
           is read from memory once.
version 4: the trainer's classifier() (its own code: trainer.h includes train_gpt2.cu), which runs
           classifier_kernel<true> for rows of up to CLASSIFIER_TILE = 51200 entries: 1024 threads
           each hold 50 entries in registers as fp32 (4-byte loads), a block max, then
           exp(x - max) kept in the registers in place of x (one expf per entry) and a block sum,
           and dlogits from the registers: the row read once and written once. Longer rows take
           classifier_kernel<false> (version 5).
version 5: the trainer's classifier_kernel<false>, launched at any size: the same kernel over tiles
           of 51200 entries, each step loading every tile again: three reads of the row, two expf
           per entry.

Checked against a CPU reference from the formulas (train_gpt2.c's crossentropy_forward/backward,
sums in double). Timing: each version's loss + dlogits pass (read and write the row), and for
versions 1 to 3 their loss-only pass (read the V real entries, write the losses).

Per launch at the default sizes (8192 rows): 1.65 GB, 0.49 ms at H100 SXM's 3.35 TB/s; at d12,
B = 64, T = 1024 (65536 rows): 13.19 GB, 3.94 ms (train_gpt2.cu, the classifier's comment).

Build and run (needs a GPU; about 1.7 GB of GPU memory, 4 GB of host memory):
    nvcc -O3 -arch=sm_90 -I. dev/cuda/classifier.cu -o classifier -lcublasLt -lcublas
    ./classifier [version] [N=rows] [V=vocab] [Vp=padded]
Status: verified through the CPU execution layer at small sizes (make test-dev-cuda); never run on
a GPU yet, so no timing.
*/
#include "trainer.h"

#define N_ROWS (8 * 1024)  // B * T (default; N= on the command line)
#define VOCAB 50257        // V (V=)
#define VOCAB_PADDED 50304 // Vp, a multiple of 128 (Vp=)
#define CLS1_THREADS 512
#define CLS2_THREADS 512
#define CLS3_THREADS 1024
#define CLS3_VPT 7         // vectors of 8 per thread in version 3: rows up to 1024 * 7 * 8 = 57344

// ----------------------------------------------------------------------------
// CPU reference: losses, and the row overwritten by dlogits

static void classifier_ref(float* logits, float* losses, const int* targets, float dloss, int N, int V, int Vp) {
    for (int r = 0; r < N; r++) {
        float* l = logits + (size_t)r * Vp;
        float maxv = -INFINITY;
        for (int i = 0; i < V; i++) { maxv = fmaxf(maxv, l[i]); }
        double sum = 0.0;
        for (int i = 0; i < V; i++) { sum += exp((double)l[i] - maxv); }
        double lse = maxv + log(sum);
        losses[r] = (float)(lse - l[targets[r]]);
        for (int i = 0; i < Vp; i++) {
            double g = i < V ? exp((double)l[i] - lse) : 0.0;
            if (i == targets[r]) { g -= 1.0; }
            l[i] = (float)(g * dloss);
        }
    }
}

// `./classifier ref`: checks the reference itself on the CPU (no GPU needed): its dlogits must be
// the central finite differences of dloss * (sum of the row losses), padding included (zero there)
static int check_reference(void) {
    const int N = 3, V = 37, Vp = 40;
    const float dloss = 1.0f / N;
    uint64_t seed = 5;
    float logits[N * Vp], work[N * Vp], losses[N], num[N * Vp];
    int targets[N];
    fill_uniform(logits, N * Vp, -6.0f, 6.0f, &seed);
    for (int r = 0; r < N; r++) { targets[r] = (int)(rng_next(&seed) % V); }
    for (int i = 0; i < N * Vp; i++) {
        double L[2];
        float v[2];
        for (int k = 0; k < 2; k++) {
            memcpy(work, logits, sizeof work);
            work[i] += k ? -1e-2f : 1e-2f;
            v[k] = work[i];
            classifier_ref(work, losses, targets, dloss, N, V, Vp);
            L[k] = 0.0;
            for (int r = 0; r < N; r++) { L[k] += (double)dloss * losses[r]; }
        }
        num[i] = (float)((L[0] - L[1]) / ((double)v[0] - v[1]));
    }
    memcpy(work, logits, sizeof work);
    classifier_ref(work, losses, targets, dloss, N, V, Vp);
    printf("reference vs finite differences (N = %d, V = %d, Vp = %d)\n", N, V, Vp);
    check_close("dlogits", num, work, N * Vp, 1e-4f, 1e-2f);
    printf("the CPU reference matches finite differences\n");
    return 0;
}

// ----------------------------------------------------------------------------
// versions 1 to 3: an online (max, sum of exp(v - max)) per thread, merged across the block

// merges a (max, sum of exp(v - max)) pair into another; an empty pair has max = -inf
__device__ __forceinline__ void softmax_merge(float* m, float* s, float m2, float s2) {
    float mn = fmaxf(*m, m2);
    if (mn == -INFINITY) { return; }
    *s = *s * expf(*m - mn) + s2 * expf(m2 - mn);
    *m = mn;
}

// the log-sum-exp of the block's row from each thread's (max, sum of exp(v - max)): the warps
// merge by shuffles, then every thread merges the warps' pairs in the same order
__device__ float block_lse(float m, float s) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int offset = 16; offset > 0; offset >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, offset), s2 = __shfl_xor_sync(0xffffffffu, s, offset);
        softmax_merge(&m, &s, m2, s2);
    }
    __shared__ float wm[32], wsum[32];
    if (lane == 0) { wm[warp] = m; wsum[warp] = s; }
    __syncthreads();
    m = -INFINITY;
    s = 0.0f;
    for (int w = 0; w < (int)blockDim.x / 32; w++) { softmax_merge(&m, &s, wm[w], wsum[w]); }
    return m + logf(s);
}

// one dlogit from its logit and the row's lse
__device__ __forceinline__ float classifier_grad(float logit, int i, float lse, int V, int target, float dloss) {
    float g = i < V ? expf(logit - lse) * dloss : 0.0f;
    return i == target ? g - dloss : g;
}

// ----------------------------------------------------------------------------
// version 1: two passes over the row from memory, scalar loads; any Vp

__global__ void classifier_v1(bf16* logits, float* losses, const int* targets, float dloss, int V, int Vp,
                              int write_grad) {
    int row = blockIdx.x, tid = threadIdx.x;
    bf16* l = logits + (size_t)row * Vp;
    int target = targets[row];
    float target_logit = (float)l[target];  // read before any thread may overwrite the row
    float m = -INFINITY, s = 0.0f;
    for (int i = tid; i < V; i += blockDim.x) { softmax_merge(&m, &s, (float)l[i], 1.0f); }
    float lse = block_lse(m, s);
    if (tid == 0) { losses[row] = lse - target_logit; }
    if (!write_grad) { return; }
    for (int i = tid; i < Vp; i += blockDim.x) { l[i] = (bf16)classifier_grad((float)l[i], i, lse, V, target, dloss); }
}

// versions 2 and 3 view the row of their block as vectors of 8 (Vp % 8 == 0, rows 16-byte aligned)
struct ClsRow {
    int4* l4;            // the row
    int target;
    float target_logit;  // read before any thread may overwrite the row
    int nv;              // vectors to read: all with write_grad, else only those with real entries
};

__device__ __forceinline__ ClsRow cls_row(bf16* logits, const int* targets, int V, int Vp, int write_grad) {
    bf16* l = logits + (size_t)blockIdx.x * Vp;
    ClsRow r;
    r.l4 = (int4*)l;
    r.target = targets[blockIdx.x];
    r.target_logit = (float)l[r.target];
    r.nv = (write_grad ? Vp : V + 7) / 8;
    return r;
}

// the dlogits of vector j, from its logits v (overwritten), packed for the store
__device__ __forceinline__ int4 dlogits8(float* v, int j, float lse, int V, int target, float dloss) {
    for (int e = 0; e < 8; e++) { v[e] = classifier_grad(v[e], 8 * j + e, lse, V, target, dloss); }
    return pack8(v);
}

// ----------------------------------------------------------------------------
// version 2: 128-bit loads, one rescale per vector of 8 at most. Vp % 8 == 0, rows 16-byte aligned.

__global__ void __launch_bounds__(CLS2_THREADS)
    classifier_v2(bf16* logits, float* losses, const int* targets, float dloss, int V, int Vp, int write_grad) {
    int tid = threadIdx.x;
    ClsRow r = cls_row(logits, targets, V, Vp, write_grad);
    float m = -INFINITY, s = 0.0f;
    for (int j = tid; j < r.nv; j += CLS2_THREADS) {
        float v[8];
        unpack8(v, r.l4[j]);
        float vm = -INFINITY;
        for (int e = 0; e < 8; e++) { vm = fmaxf(vm, 8 * j + e < V ? v[e] : -INFINITY); }
        if (vm > m) { s *= expf(m - vm); m = vm; }  // exp(-inf) = 0 on the first vector
        for (int e = 0; e < 8; e++) { s += 8 * j + e < V ? expf(v[e] - m) : 0.0f; }
    }
    float lse = block_lse(m, s);
    if (tid == 0) { losses[blockIdx.x] = lse - r.target_logit; }
    if (!write_grad) { return; }
    for (int j = tid; j < r.nv; j += CLS2_THREADS) {
        float v[8];
        unpack8(v, r.l4[j]);
        r.l4[j] = dlogits8(v, j, lse, V, r.target, dloss);
    }
}

// ----------------------------------------------------------------------------
// version 3: the row in registers (needs Vp / 8 <= CLS3_THREADS * CLS3_VPT)

__global__ void __launch_bounds__(CLS3_THREADS)
    classifier_v3(bf16* logits, float* losses, const int* targets, float dloss, int V, int Vp, int write_grad) {
    int tid = threadIdx.x;
    ClsRow r = cls_row(logits, targets, V, Vp, write_grad);
    int4 reg[CLS3_VPT];
#pragma unroll
    for (int k = 0; k < CLS3_VPT; k++) {  // every load in flight at once
        int j = tid + k * CLS3_THREADS;
        if (j < r.nv) { reg[k] = r.l4[j]; }
    }
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < CLS3_VPT; k++) {
        int j = tid + k * CLS3_THREADS;
        if (j >= r.nv) { continue; }
        float v[8];
        unpack8(v, reg[k]);
        for (int e = 0; e < 8; e++) { m = fmaxf(m, 8 * j + e < V ? v[e] : -INFINITY); }
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < CLS3_VPT; k++) {
        int j = tid + k * CLS3_THREADS;
        if (j >= r.nv) { continue; }
        float v[8];
        unpack8(v, reg[k]);
        for (int e = 0; e < 8; e++) { s += 8 * j + e < V ? expf(v[e] - m) : 0.0f; }
    }
    float lse = block_lse(m, s);
    if (tid == 0) { losses[blockIdx.x] = lse - r.target_logit; }
    if (!write_grad) { return; }
#pragma unroll
    for (int k = 0; k < CLS3_VPT; k++) {
        int j = tid + k * CLS3_THREADS;
        if (j >= r.nv) { continue; }
        float v[8];
        unpack8(v, reg[k]);
        r.l4[j] = dlogits8(v, j, lse, V, r.target, dloss);
    }
}

// ----------------------------------------------------------------------------

// write_grad 0: the loss-only mode of versions 1 to 3 (versions 4 and 5 always write dlogits)
static void run_version(int version, bf16* logits, float* losses, const int* targets, float dloss, int N, int V,
                        int Vp, int write_grad) {
    if (version == 4) {  // the trainer's classifier(): dloss = 1 / N, its kernel picked by the row length
        classifier(logits, losses, targets, N, V, Vp);
        return;
    }
    if (version == 1) {
        classifier_v1<<<N, CLS1_THREADS>>>(logits, losses, targets, dloss, V, Vp, write_grad);
    } else if (version == 2) {
        classifier_v2<<<N, CLS2_THREADS>>>(logits, losses, targets, dloss, V, Vp, write_grad);
    } else if (version == 3) {
        classifier_v3<<<N, CLS3_THREADS>>>(logits, losses, targets, dloss, V, Vp, write_grad);
    } else {  // the trainer's long-row form, launched as classifier() launches it for rows beyond a tile
        classifier_kernel<false><<<N, CLASSIFIER_THREADS>>>(logits, losses, targets, dloss, V, Vp);
    }
    cudaCheckLaunch();
}

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "ref") == 0) { return check_reference(); }
    int N = N_ROWS, V = VOCAB, Vp = VOCAB_PADDED;
    const SizeArg sizes[] = {{"N", &N}, {"V", &V}, {"Vp", &Vp}};
    int only = parse_args(argc, argv, 5, sizes, 3);
    if (V > Vp) { size_error(argv[0], "V must be at most Vp"); }
    if ((only == 0 || only == 2 || only == 3) && Vp % 8 != 0) {
        size_error(argv[0], "versions 2 and 3 need Vp a multiple of 8 (version 1 takes any Vp, versions 4 and 5 an even one)");
    }
    if ((only == 0 || only >= 4) && Vp % 2 != 0) { size_error(argv[0], "versions 4 and 5 need an even Vp"); }
    if ((only == 0 || only == 3) && Vp / 8 > CLS3_THREADS * CLS3_VPT) {
        size_error(argv[0], "version 3 holds rows of at most 57344 entries (Vp)");
    }
    const float dloss = 1.0f / N;  // the mean loss over the batch
    size_t n = (size_t)N * Vp;
    print_device();
    printf("classifier: N = %d rows, V = %d, Vp = %d\n", N, V, Vp);

    // logits uniform in [-6, 6) (the padding too: the kernels must ignore it), random targets
    uint64_t seed = 1234;
    float* logits = (float*)host_alloc(n * sizeof(float));
    fill_uniform(logits, n, -6.0f, 6.0f, &seed);
    int* targets = (int*)host_alloc(N * sizeof(int));
    for (int r = 0; r < N; r++) { targets[r] = (int)(rng_next(&seed) % V); }
    bf16* d_logits0 = to_device_bf16(logits, n);  // pristine copy; rounds the host copy
    bf16* d_logits = (bf16*)device_alloc(n * sizeof(bf16));
    int* d_targets = (int*)device_alloc(N * sizeof(int));
    cudaCheck(cudaMemcpy(d_targets, targets, N * sizeof(int), cudaMemcpyHostToDevice));
    float* d_losses = (float*)device_alloc(N * sizeof(float));

    printf("CPU reference (tens of seconds at the real sizes)...\n");
    float* ref_losses = (float*)host_alloc(N * sizeof(float));
    classifier_ref(logits, ref_losses, targets, dloss, N, V, Vp);  // logits now hold the reference dlogits
    float* got = (float*)host_alloc(n * sizeof(float));

    auto restore = [&] { cudaCheck(cudaMemcpy(d_logits, d_logits0, n * sizeof(bf16), cudaMemcpyDeviceToDevice)); };
    double bytes_grad = 2.0 * n * sizeof(bf16) + N * (sizeof(int) + sizeof(float));
    double bytes_loss = (double)N * V * sizeof(bf16) + N * (sizeof(int) + sizeof(float));
    for (int v = 1; v <= 5; v++) {
        if (only && v != only) { continue; }
        printf("version %d\n", v);
        restore();
        run_version(v, d_logits, d_losses, d_targets, dloss, N, V, Vp, 1);
        cudaCheck(cudaDeviceSynchronize());
        from_device_f32(got, d_losses, N);
        check_close("losses", ref_losses, got, N, 1e-3f, 1e-4f);
        from_device_bf16(got, d_logits, n);
        check_close("dlogits", logits, got, n, 1e-6f * dloss, 1e-2f);  // most |dlogits| are ~1e-8: rtol decides
        char label[64];
        snprintf(label, sizeof label, "  v%d loss + dlogits", v);
        if (!timing_skipped(label)) {
            print_timing(label, time_ms([&] { run_version(v, d_logits, d_losses, d_targets, dloss, N, V, Vp, 1); }, restore),
                         bytes_grad);
        }
        if (v >= 4) { continue; }
        restore();
        run_version(v, d_logits, d_losses, d_targets, dloss, N, V, Vp, 0);  // the loss-only mode
        from_device_f32(got, d_losses, N);
        check_close("losses", ref_losses, got, N, 1e-3f, 1e-4f);
        snprintf(label, sizeof label, "  v%d loss only", v);
        if (!timing_skipped(label)) {
            print_timing(label, time_ms([&] { run_version(v, d_logits, d_losses, d_targets, dloss, N, V, Vp, 0); }, no_prep),
                         bytes_loss);
        }
    }
    printf("all checked versions match the CPU reference\n");
    return 0;
}
