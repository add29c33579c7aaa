/*
dev/cuda/common.h: helpers shared by the kernel experiments in dev/cuda/ (stand-alone programs,
one per fused kernel of the trainer, each built with `nvcc -O3 -arch=sm_90 dev/cuda/X.cu -o X`).

Every experiment follows the same pattern:
  - random inputs on the host (rounded to bf16 where the GPU stores bf16), a short fp32 CPU
    reference written straight from the formulas of train_gpt2.c;
  - for each version of the kernel (or the one named on the command line): one run checked
    against the reference (check_close: prints max abs/rel error, exits non-zero on failure),
    then a timing (time_ms: warm-up, then N repetitions, each timed by cudaEvents with the L2
    cache flushed and the inputs restored before it, outside the timed region);
  - one line per version: time in ms and achieved GB/s against the bytes the job must move.

Every program also builds through the CPU execution layer (tests/cudacpu; `make test-dev-cuda`),
which runs it at small sizes given on the command line and checks every version there; timing
waits for a GPU.
*/
#ifndef DEV_CUDA_COMMON_H
#define DEV_CUDA_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

// The helpers the trainer defines under the same names (siamese.cuh, train_gpt2.cu and
// cuda_common.cuh) come from the trainer itself in the programs that include it (trainer.h,
// which defines DEV_CUDA_TRAINER).
#ifndef DEV_CUDA_TRAINER

// ----------------------------------------------------------------------------
// errors

static inline void cuda_check(cudaError_t err, const char* call, const char* file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "CUDA error at %s:%d: %s\n  %s\n", file, line, cudaGetErrorString(err), call);
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(call) cuda_check((call), #call, __FILE__, __LINE__)
#define cudaCheckLaunch() cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

static inline int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }

// ----------------------------------------------------------------------------
// device helpers

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) { v += __shfl_xor_sync(0xffffffffu, v, offset); }
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) { v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset)); }
    return v;
}

// what the trainer's chapters that the experiments include (../../attention.cuh: floatX) and
// attention_flash_smem.h (all of these) expect of their includer besides the helpers above
// (train_gpt2.cu and siamese.cuh define the same names; bf16 build)
typedef bf16 floatX;
#ifndef ROW_WARPS
#define ROW_WARPS 8
#endif
static inline int row_blocks(int N) { return ceil_div(N, ROW_WARPS); }
__device__ __forceinline__ int warp_row() { return blockIdx.x * ROW_WARPS + threadIdx.x / 32; }

#endif  // DEV_CUDA_TRAINER

// 8 bf16 in one 128-bit word: the unit of the vectorised kernels (needs 16-byte alignment)
union Pack8 {
    int4 raw;
    bf16 h[8];
};

__device__ __forceinline__ void unpack8(float* dst, int4 raw) {
    Pack8 p;
    p.raw = raw;
    for (int k = 0; k < 8; k++) { dst[k] = __bfloat162float(p.h[k]); }
}

__device__ __forceinline__ float bf16_round_dev(float v) { return __bfloat162float(__float2bfloat16(v)); }

__device__ __forceinline__ int4 pack8(const float* src) {
    Pack8 p;
    for (int k = 0; k < 8; k++) { p.h[k] = __float2bfloat16(src[k]); }
    return p.raw;
}

// ----------------------------------------------------------------------------
// host data: random fill, bf16 rounding, transfers

static inline float bf16_round(float v) { return __bfloat162float(__float2bfloat16(v)); }

// splitmix64: the same numbers on every machine
static inline uint64_t rng_next(uint64_t* s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline float rng_uniform(uint64_t* s) { return (float)(rng_next(s) >> 40) / (float)(1ull << 24); }

// h[i] uniform in [lo, hi)
static inline void fill_uniform(float* h, size_t n, float lo, float hi, uint64_t* s) {
    for (size_t i = 0; i < n; i++) { h[i] = lo + (hi - lo) * rng_uniform(s); }
}

// `count` LayerNorms' parameters as (weight, bias) pairs of C each: weights in [0.5, 1.5), biases in [-0.5, 0.5)
static inline void fill_ln_params(float* p, int count, int C, uint64_t* s) {
    for (int k = 0; k < count; k++) {
        fill_uniform(p + (size_t)2 * k * C, C, 0.5f, 1.5f, s);
        fill_uniform(p + (size_t)(2 * k + 1) * C, C, -0.5f, 0.5f, s);
    }
}

static inline void round_to_bf16(float* h, size_t n) {
    for (size_t i = 0; i < n; i++) { h[i] = bf16_round(h[i]); }
}

static inline void* device_alloc(size_t bytes) {
    void* p = NULL;
    cudaCheck(cudaMalloc(&p, bytes));
    return p;
}

// a device copy of h as bf16 (h itself is rounded, so the CPU reference sees the same values)
static inline bf16* to_device_bf16(float* h, size_t n) {
    round_to_bf16(h, n);
    bf16* tmp = (bf16*)malloc(n * sizeof(bf16));
    for (size_t i = 0; i < n; i++) { tmp[i] = __float2bfloat16(h[i]); }
    bf16* d = (bf16*)device_alloc(n * sizeof(bf16));
    cudaCheck(cudaMemcpy(d, tmp, n * sizeof(bf16), cudaMemcpyHostToDevice));
    free(tmp);
    return d;
}

static inline float* to_device_f32(const float* h, size_t n) {
    float* d = (float*)device_alloc(n * sizeof(float));
    cudaCheck(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static inline void from_device_bf16(float* h, const bf16* d, size_t n) {
    bf16* tmp = (bf16*)malloc(n * sizeof(bf16));
    cudaCheck(cudaMemcpy(tmp, d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) { h[i] = __bfloat162float(tmp[i]); }
    free(tmp);
}

static inline void from_device_f32(float* h, const float* d, size_t n) {
    cudaCheck(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
}

static inline void* host_alloc(size_t bytes) {
    void* p = malloc(bytes);
    if (!p) { fprintf(stderr, "out of host memory (%zu bytes)\n", bytes); exit(EXIT_FAILURE); }
    return p;
}

// ----------------------------------------------------------------------------
// CPU references of a LayerNorm row (train_gpt2.c's layernorm_row and layernorm_backward_row), for
// the programs that check LayerNorm kernels

// mean and rstd of a row of C, in double (two passes)
static inline void ln_stats_ref(double* mean, double* rstd, const float* x, int C) {
    double m = 0.0, v = 0.0;
    for (int i = 0; i < C; i++) { m += x[i]; }
    m /= C;
    for (int i = 0; i < C; i++) { v += (x[i] - m) * (x[i] - m); }
    *mean = m;
    *rstd = 1.0 / sqrt(v / C + 1e-5);
}

// out = LN(x) for N rows, with their statistics
static inline void layernorm_rows_ref(float* out, float* mean, float* rstd, const float* x, const float* w,
                                      const float* b, int N, int C) {
    for (int r = 0; r < N; r++) {
        const float* xr = x + (size_t)r * C;
        double m, rs;
        ln_stats_ref(&m, &rs, xr, C);
        for (int i = 0; i < C; i++) { out[(size_t)r * C + i] = (float)((xr[i] - m) * rs * w[i] + b[i]); }
        mean[r] = (float)m;
        rstd[r] = (float)rs;
    }
}

// dinp += LN_back(dout; x) for one row with the given statistics (fp32, as the kernels compute it);
// dw, db += the row's parameter gradients (in double)
static inline void ln_backward_ref(float* dinp, double* dw, double* db, const float* dout, const float* x,
                                   const float* w, float mean, float rstd, int C) {
    float m1 = 0.0f, m2 = 0.0f;
    for (int i = 0; i < C; i++) {
        float xhat = (x[i] - mean) * rstd;
        m1 += w[i] * dout[i];
        m2 += w[i] * dout[i] * xhat;
    }
    m1 /= C;
    m2 /= C;
    for (int i = 0; i < C; i++) {
        float xhat = (x[i] - mean) * rstd;
        dinp[i] += (w[i] * dout[i] - m1 - xhat * m2) * rstd;
        dw[i] += (double)dout[i] * xhat;
        db[i] += dout[i];
    }
}

// ----------------------------------------------------------------------------
// correctness: |got - ref| <= atol + rtol * |ref| everywhere (NaN fails). Prints one line with the
// max abs and max rel error; on failure prints the first few mismatches and exits non-zero.

static inline void check_close(const char* what, const float* ref, const float* got, size_t n, float atol,
                               float rtol) {
    double max_abs = 0.0, max_rel = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        double rel = d / fmax(fabs((double)ref[i]), 1e-6);
        if (!(d <= atol + rtol * fabs((double)ref[i]))) {  // also catches NaN
            if (bad < 5) { fprintf(stderr, "  %s[%zu]: got %.6g, want %.6g\n", what, i, got[i], ref[i]); }
            bad++;
        }
        if (d > max_abs || d != d) { max_abs = d; }
        if (rel > max_rel || rel != rel) { max_rel = rel; }
    }
    printf("    %-8s max abs err %.3e, max rel err %.3e%s\n", what, max_abs, max_rel, bad ? "  FAIL" : "");
    if (bad) {
        fprintf(stderr, "%s: %zu of %zu values outside atol %.1e + rtol %.1e\n", what, bad, n, atol, rtol);
        exit(EXIT_FAILURE);
    }
}

// the same bits: n elements of `size` bytes at the device pointers a and b (two versions' outputs
// that must be bit-identical). Prints one line; on a difference names the first element that
// differs and exits non-zero.
static inline void check_identical(const char* what, const void* a, const void* b, size_t n, size_t size) {
    unsigned char* ha = (unsigned char*)host_alloc(n * size);
    unsigned char* hb = (unsigned char*)host_alloc(n * size);
    cudaCheck(cudaMemcpy(ha, a, n * size, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(hb, b, n * size, cudaMemcpyDeviceToHost));
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++) {
        if (memcmp(ha + i * size, hb + i * size, size) != 0) { bad = i; }
    }
    free(ha);
    free(hb);
    printf("    %-8s bit-identical%s\n", what, bad < n ? ": NO  FAIL" : "");
    if (bad < n) {
        fprintf(stderr, "%s: element %zu of %zu differs between the two forms\n", what, bad, n);
        exit(EXIT_FAILURE);
    }
}

// ----------------------------------------------------------------------------
// timing. prep() runs before every repetition outside the timed region (restore inputs that the
// kernel overwrites); the L2 cache is flushed too, so each repetition reads from HBM as in training.

static void* l2_flush_buf = NULL;
static size_t l2_flush_bytes = 0;

static inline void flush_l2(void) {
    if (!l2_flush_buf) {
        int dev = 0, l2 = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
        l2_flush_bytes = 2 * (size_t)(l2 > 0 ? l2 : (64 << 20));
        l2_flush_buf = device_alloc(l2_flush_bytes);
    }
    cudaCheck(cudaMemset(l2_flush_buf, 0, l2_flush_bytes));
}

static inline void no_prep(void) {}

// mean ms of one run of fn() over reps repetitions, after warmup runs
template <typename Fn, typename Prep>
static float time_ms(Fn fn, Prep prep, int warmup = 3, int reps = 20) {
    for (int i = 0; i < warmup; i++) { prep(); fn(); }
    cudaCheck(cudaDeviceSynchronize());
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    float total = 0.0f;
    for (int i = 0; i < reps; i++) {
        prep();
        flush_l2();
        cudaCheck(cudaEventRecord(start));
        fn();
        cudaCheck(cudaEventRecord(stop));
        cudaCheck(cudaEventSynchronize(stop));
        float ms = 0.0f;
        cudaCheck(cudaEventElapsedTime(&ms, start, stop));
        total += ms;
    }
    cudaCheckLaunch();
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    return total / reps;
}

static inline void print_timing(const char* label, float ms, double bytes) {
    printf("%-34s %9.4f ms  %8.1f GB/s  (%.1f MB moved)\n", label, ms, bytes / (ms * 1e-3) / 1e9, bytes / 1e6);
}

// ----------------------------------------------------------------------------
// command line: `./prog [VERSION] [NAME=VALUE ...]`. VERSION (1..max) runs that version alone (none:
// every version); NAME=VALUE sets one of the program's sizes, whose defaults are the real ones
// (e.g. `./classifier 2 N=5 V=301 Vp=304`). `./prog ref` checks the CPU reference alone (no GPU).

typedef struct {
    const char* name;
    int* value;  // holds the default on entry
} SizeArg;

static inline void usage_exit(const char* prog, int max_version, const SizeArg* sizes, const int* defaults, int nsizes) {
    fprintf(stderr, "usage: %s [version 1..%d]", prog, max_version);
    for (int k = 0; k < nsizes; k++) { fprintf(stderr, " [%s=%d]", sizes[k].name, defaults[k]); }
    fprintf(stderr, "\n       (no version: every version; sizes default to the real ones shown)\n");
    fprintf(stderr, "       %s ref   checks the CPU reference alone (no GPU needed)\n", prog);
    exit(EXIT_FAILURE);
}

// returns the version to run (0: all) and sets the sizes given; anything else is a usage error
static inline int parse_args(int argc, char** argv, int max_version, const SizeArg* sizes, int nsizes) {
    int defaults[16];
    if (nsizes > 16) { nsizes = 16; }
    for (int k = 0; k < nsizes; k++) { defaults[k] = *sizes[k].value; }
    int version = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* eq = strchr(a, '=');
        char* end = NULL;
        long v = strtol(eq ? eq + 1 : a, &end, 10);
        int ok = end != (eq ? eq + 1 : a) && *end == '\0';
        if (!eq) {
            if (!ok || i != 1 || v < 1 || v > max_version) {
                fprintf(stderr, "%s: '%s' is not a version (1..%d)\n", argv[0], a, max_version);
                usage_exit(argv[0], max_version, sizes, defaults, nsizes);
            }
            version = (int)v;
            continue;
        }
        int k = 0;
        while (k < nsizes && (strlen(sizes[k].name) != (size_t)(eq - a) || strncmp(a, sizes[k].name, eq - a) != 0)) { k++; }
        if (k == nsizes || !ok || v < 1 || v > (1L << 30)) {
            fprintf(stderr, "%s: '%s': %s\n", argv[0], a, k == nsizes ? "no such size" : "the size must be a whole number from 1 to 2^30");
            usage_exit(argv[0], max_version, sizes, defaults, nsizes);
        }
        *sizes[k].value = (int)v;
    }
    return version;
}

// a size the kernels cannot take: one line, exit 1
static inline void size_error(const char* prog, const char* msg) {
    fprintf(stderr, "%s: %s\n", prog, msg);
    exit(EXIT_FAILURE);
}

// Built for the CPU execution layer (tests/cudacpu, which defines CUDACPU), a program checks
// every version against the CPU reference and skips the timing: a time measured there says
// nothing about a GPU.
#ifdef CUDACPU
#define TIMING_ON_GPU 0
#else
#define TIMING_ON_GPU 1
#endif

// whether to skip the timing of `label` (it says so when it does)
static inline int timing_skipped(const char* label) {
    if (TIMING_ON_GPU) { return 0; }
    printf("%-34s timing skipped: CPU execution layer (timing waits for a GPU)\n", label);
    return 1;
}

static inline void print_device(void) {
    int dev = 0;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
}

#endif  // DEV_CUDA_COMMON_H
