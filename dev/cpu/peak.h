/*
dev/cpu/peak.h: the two limits of this machine that bound a CPU training step, measured the way the
trainer meets them. dev/cpu/peak.c prints them (dev/bench_cpu.sh runs it beside the trainer);
dev/cpu/bench_matmul.c measures the FMA peak between its matmuls, so that each shape's GFLOP/s is
divided by a peak taken under the same load.

FMA peak (fma_gflops): every thread runs a loop of fused multiply-adds on registers only (no
memory operand), CHAINS = 16 independent accumulators of the widest vector the build targets: 512
bits (16 floats) where the compiler was told the CPU has AVX-512 (-march=native on such a CPU),
else 256 bits (AVX2 + FMA), the same choice as the trainer's matmul (common/matmul_tiled.h, VW).
16 chains are more than a core needs to hide the FMA latency (4 cycles x 2 FMA pipes = 8). FLOPs:
2 per lane per FMA, all threads together over the wall time of one parallel region. This is what
the FMA units can do on data already in registers: a matmul can approach it, never pass it.

Memory bandwidth (stream_gbs): three loops over arrays of 2^25 floats (128 MiB each, far larger
than any cache), split statically over the threads, each array first touched by the thread that
later reads it:
    copy     a[i] = b[i]                        8 bytes per element (STREAM's count)
    triad    a[i] = b[i] + s * c[i]             12 bytes per element (STREAM's count)
    adamw    the optimizer's pattern: reads p, g, m, v and writes p, m, v back in place, 28 bytes
             per element, every one of them really moved
STREAM's count leaves out the write-allocate read of the destination (a cache line is read before
it is written), so copy and triad undercount what really moves; adamw works in place and counts
what the memory bus carries. dev/bench_cpu.sh takes adamw's figure for the optimizer's time.

Each figure is measured several times; callers get the median and the best. On a machine that
others share the median is the one to compare with a trainer step measured at the same time; the
best is the closest to the hardware.
*/
#ifndef DEV_CPU_PEAK_H
#define DEV_CPU_PEAK_H

#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

// The clock every figure is timed with: wall time by default. peak_use_cpu_time(1) switches to the
// CPU time of the whole process (all threads), divided by the number of threads: on a machine that
// others share, that is about the time the work would take alone, as long as the threads are never
// kept waiting for each other (dev/cpu/bench_matmul.c --cpu-time).
static int peak_cpu_clock;
static void peak_use_cpu_time(int on) { peak_cpu_clock = on; }

static double peak_seconds(void) {
    struct timespec ts;
    clock_gettime(peak_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    double s = ts.tv_sec + ts.tv_nsec * 1e-9;
    return peak_cpu_clock ? s / omp_get_max_threads() : s;
}

static int peak_cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

typedef struct {
    double median, best;
} PeakFigure;

// sorts v[0..n) and returns its median and maximum
static PeakFigure peak_figure(double* v, int n) {
    qsort(v, n, sizeof(double), peak_cmp_double);
    PeakFigure f = {v[n / 2], v[n - 1]};
    return f;
}

// ----------------------------------------------------------------------------
// FMA peak. acc = acc * x + y converges to y / (1 - x) = 1e-2: no overflow, no denormals.

#if defined(__AVX512F__)
#define PEAK_ISA "avx512"
#define PEAK_LANES 16
typedef __m512 peak_vec;
#define PEAK_SET(f) _mm512_set1_ps(f)
#define PEAK_FMA(a, x, y) _mm512_fmadd_ps(a, x, y)
static float peak_hsum(__m512 v) { return _mm512_reduce_add_ps(v); }
#elif defined(__AVX2__) && defined(__FMA__)
#define PEAK_ISA "avx2"
#define PEAK_LANES 8
typedef __m256 peak_vec;
#define PEAK_SET(f) _mm256_set1_ps(f)
#define PEAK_FMA(a, x, y) _mm256_fmadd_ps(a, x, y)
static float peak_hsum(__m256 v) {
    float f[8];
    _mm256_storeu_ps(f, v);
    return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}
#else
#error "dev/cpu/peak.h needs AVX2 and FMA, or AVX-512 (build with -march=native on such a CPU)"
#endif

#define PEAK_CHAINS 16
#define PEAK_FLOPS_PER_ITER (2.0 * PEAK_LANES * PEAK_CHAINS)

// `iters` rounds of PEAK_CHAINS independent FMAs; returns a sum so the compiler keeps the work
static float peak_fma_loop(long iters, float seed) {
    peak_vec x = PEAK_SET(0.99f), y = PEAK_SET(1e-4f);
    peak_vec a0 = PEAK_SET(seed), a1 = PEAK_SET(seed + 1), a2 = PEAK_SET(seed + 2), a3 = PEAK_SET(seed + 3);
    peak_vec a4 = PEAK_SET(seed + 4), a5 = PEAK_SET(seed + 5), a6 = PEAK_SET(seed + 6), a7 = PEAK_SET(seed + 7);
    peak_vec a8 = PEAK_SET(seed + 8), a9 = PEAK_SET(seed + 9), a10 = PEAK_SET(seed + 10), a11 = PEAK_SET(seed + 11);
    peak_vec a12 = PEAK_SET(seed + 12), a13 = PEAK_SET(seed + 13), a14 = PEAK_SET(seed + 14);
    peak_vec a15 = PEAK_SET(seed + 15);
    for (long i = 0; i < iters; i++) {
        a0 = PEAK_FMA(a0, x, y);   a1 = PEAK_FMA(a1, x, y);   a2 = PEAK_FMA(a2, x, y);   a3 = PEAK_FMA(a3, x, y);
        a4 = PEAK_FMA(a4, x, y);   a5 = PEAK_FMA(a5, x, y);   a6 = PEAK_FMA(a6, x, y);   a7 = PEAK_FMA(a7, x, y);
        a8 = PEAK_FMA(a8, x, y);   a9 = PEAK_FMA(a9, x, y);   a10 = PEAK_FMA(a10, x, y); a11 = PEAK_FMA(a11, x, y);
        a12 = PEAK_FMA(a12, x, y); a13 = PEAK_FMA(a13, x, y); a14 = PEAK_FMA(a14, x, y); a15 = PEAK_FMA(a15, x, y);
    }
    return peak_hsum(a0) + peak_hsum(a1) + peak_hsum(a2) + peak_hsum(a3) + peak_hsum(a4) + peak_hsum(a5) +
           peak_hsum(a6) + peak_hsum(a7) + peak_hsum(a8) + peak_hsum(a9) + peak_hsum(a10) + peak_hsum(a11) +
           peak_hsum(a12) + peak_hsum(a13) + peak_hsum(a14) + peak_hsum(a15);
}

static volatile float peak_sink;  // keeps the loops' results alive

// GFLOP/s of all threads together over one parallel region of `iters` rounds per thread
static double peak_fma_trial(long iters) {
    float sum = 0.0f;
    double t0 = peak_seconds();
    #pragma omp parallel reduction(+ : sum)
    { sum += peak_fma_loop(iters, (float)omp_get_thread_num()); }
    double t = peak_seconds() - t0;
    peak_sink = sum;
    return PEAK_FLOPS_PER_ITER * (double)iters * omp_get_max_threads() / t * 1e-9;
}

// the FMA peak over `reps` trials of about `trial_seconds` each
static PeakFigure peak_fma(double trial_seconds, int reps) {
    long iters = 100000;
    peak_fma_trial(iters);  // wakes the threads and the core's wide units
    double g = peak_fma_trial(iters);
    iters = (long)(trial_seconds * g * 1e9 / (PEAK_FLOPS_PER_ITER * omp_get_max_threads()));
    if (iters < 1000) { iters = 1000; }
    double v[64];
    if (reps > 64) { reps = 64; }
    for (int r = 0; r < reps; r++) { v[r] = peak_fma_trial(iters); }
    return peak_figure(v, reps);
}

// ----------------------------------------------------------------------------
// memory bandwidth

#define PEAK_STREAM_N ((size_t)1 << 25)

// GB/s of copy, triad and adamw (in that order) over `reps` rounds after one round of warm-up
static void peak_stream(int reps, PeakFigure out[3]) {
    size_t n = PEAK_STREAM_N;
    float* a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (float*)aligned_alloc(64, n * sizeof(float));
        if (!a[i]) { fprintf(stderr, "error: out of memory for the stream arrays (4 x 128 MiB)\n"); exit(1); }
    }
    float *p = a[0], *g = a[1], *m = a[2], *w = a[3];
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) { p[i] = 1.0f; g[i] = 2.0f; m[i] = 0.5f; w[i] = 0.25f; }
    const double bytes[3] = {8.0, 12.0, 28.0};
    double v[3][64];
    if (reps > 64) { reps = 64; }
    for (int r = 0; r <= reps; r++) {  // round 0 warms up and is not kept
        for (int k = 0; k < 3; k++) {
            double t0 = peak_seconds();
            if (k == 0) {
                #pragma omp parallel for schedule(static)
                for (size_t i = 0; i < n; i++) { p[i] = g[i]; }
            } else if (k == 1) {
                #pragma omp parallel for schedule(static)
                for (size_t i = 0; i < n; i++) { p[i] = g[i] + 0.5f * m[i]; }
            } else {  // m and w (as AdamW's v) and p updated in place from g
                #pragma omp parallel for schedule(static)
                for (size_t i = 0; i < n; i++) {
                    float gi = g[i];
                    m[i] = 0.5f * m[i] + 0.5f * gi;
                    w[i] = 0.5f * w[i] + 0.5f * gi * gi;
                    p[i] -= 1e-9f * m[i] / (w[i] + 1.0f);
                }
            }
            double t = peak_seconds() - t0;
            if (r > 0) { v[k][r - 1] = bytes[k] * n / t * 1e-9; }
        }
    }
    for (int k = 0; k < 3; k++) { out[k] = peak_figure(v[k], reps); }
    for (int i = 0; i < 4; i++) { free(a[i]); }
}

#endif // DEV_CPU_PEAK_H
