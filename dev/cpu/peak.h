/*
dev/cpu/peak.h: the two limits of this machine that bound a CPU training step, measured the way the
trainer meets them. dev/cpu/peak.c prints them (dev/bench_cpu.sh runs it beside the trainer);
dev/cpu/bench_matmul.c measures the FMA peak between its matmuls, so that each shape's GFLOP/s is
divided by a peak taken under the same load.

FMA peak (fma_gflops): every thread runs a loop of fused multiply-adds on registers only (no
memory operand), PEAK_CHAINS = 12 independent accumulators of the widest vector the build targets: 512
bits (16 floats) where the compiler was told the CPU has AVX-512 (-march=native on such a CPU),
else 256 bits (AVX2 + FMA), the same choice as the trainer's matmul (common/matmul_tiled.h, VW).
12 chains are more than a core needs to hide the FMA latency (4 cycles x 2 FMA pipes = 8), and with
x and y they fit the 16 vector registers of an AVX2 build (16 chains there kept three accumulators
on the stack, and an AVX2 build measured 133 GFLOP/s where the peak is 233). FLOPs:
2 per lane per FMA, all threads together over the wall time of one parallel region. This is what
the FMA units can do on data already in registers: a matmul can approach it, never pass it.
An AVX-512 build also measures the same loop on 256-bit vectors (fma_gflops_avx2), to show what
the wider vectors add on this core (nothing where it splits them into two 256-bit halves).

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

#if !defined(__AVX2__) || !defined(__FMA__)
#error "dev/cpu/peak.h needs AVX2 and FMA, or AVX-512 (build with -march=native on such a CPU)"
#endif

#define PEAK_CHAINS 12

static float peak_hsum256(__m256 v) {
    float f[8];
    _mm256_storeu_ps(f, v);
    return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}

// NAME(iters, seed): `iters` rounds of PEAK_CHAINS independent FMAs on vectors of type VEC; returns
// a sum so the compiler keeps the work. Written once, defined for each vector width below.
#define PEAK_DEFINE_FMA_LOOP(NAME, VEC, SET, FMA, HSUM)                                                     \
    static float NAME(long iters, float seed) {                                                            \
        VEC x = SET(0.99f), y = SET(1e-4f);                                                                \
        VEC a0 = SET(seed), a1 = SET(seed + 1), a2 = SET(seed + 2), a3 = SET(seed + 3);                    \
        VEC a4 = SET(seed + 4), a5 = SET(seed + 5), a6 = SET(seed + 6), a7 = SET(seed + 7);                \
        VEC a8 = SET(seed + 8), a9 = SET(seed + 9), a10 = SET(seed + 10), a11 = SET(seed + 11);            \
        for (long i = 0; i < iters; i++) {                                                                 \
            a0 = FMA(a0, x, y); a1 = FMA(a1, x, y); a2 = FMA(a2, x, y);   a3 = FMA(a3, x, y);              \
            a4 = FMA(a4, x, y); a5 = FMA(a5, x, y); a6 = FMA(a6, x, y);   a7 = FMA(a7, x, y);              \
            a8 = FMA(a8, x, y); a9 = FMA(a9, x, y); a10 = FMA(a10, x, y); a11 = FMA(a11, x, y);            \
        }                                                                                                  \
        return HSUM(a0) + HSUM(a1) + HSUM(a2) + HSUM(a3) + HSUM(a4) + HSUM(a5) + HSUM(a6) + HSUM(a7) +     \
               HSUM(a8) + HSUM(a9) + HSUM(a10) + HSUM(a11);                                                \
    }

PEAK_DEFINE_FMA_LOOP(peak_fma_loop_avx2, __m256, _mm256_set1_ps, _mm256_fmadd_ps, peak_hsum256)
#if defined(__AVX512F__)
#define PEAK_ISA "avx512"
#define PEAK_LANES 16
PEAK_DEFINE_FMA_LOOP(peak_fma_loop_widest, __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_reduce_add_ps)
#else
#define PEAK_ISA "avx2"
#define PEAK_LANES 8
#define peak_fma_loop_widest peak_fma_loop_avx2
#endif

static volatile float peak_sink;  // keeps the loops' results alive

typedef float (*PeakFmaLoop)(long iters, float seed);

// GFLOP/s of all threads together over one parallel region of `iters` rounds per thread of `loop`,
// whose vectors have `lanes` floats (2 FLOPs per lane per FMA)
static double peak_fma_trial(PeakFmaLoop loop, int lanes, long iters) {
    float sum = 0.0f;
    double t0 = peak_seconds();
    #pragma omp parallel reduction(+ : sum)
    { sum += loop(iters, (float)omp_get_thread_num()); }
    double t = peak_seconds() - t0;
    peak_sink = sum;
    return 2.0 * lanes * PEAK_CHAINS * (double)iters * omp_get_max_threads() / t * 1e-9;
}

// the FMA peak of `loop` over `reps` trials of about `trial_seconds` each
static PeakFigure peak_fma_of(PeakFmaLoop loop, int lanes, double trial_seconds, int reps) {
    long iters = 100000;
    peak_fma_trial(loop, lanes, iters);  // wakes the threads and the core's wide units
    double g = peak_fma_trial(loop, lanes, iters);
    iters = (long)(trial_seconds * g * 1e9 / (2.0 * lanes * PEAK_CHAINS * omp_get_max_threads()));
    if (iters < 1000) { iters = 1000; }
    double v[64];
    if (reps > 64) { reps = 64; }
    for (int r = 0; r < reps; r++) { v[r] = peak_fma_trial(loop, lanes, iters); }
    return peak_figure(v, reps);
}

// the FMA peak with the widest vectors the build targets (PEAK_ISA): the one a step is divided by
static PeakFigure peak_fma(double trial_seconds, int reps) {
    return peak_fma_of(peak_fma_loop_widest, PEAK_LANES, trial_seconds, reps);
}

// the FMA peak with 256-bit vectors (AVX2), for comparison in an AVX-512 build: a core that splits
// each 512-bit FMA into two 256-bit halves gets the same FLOPs from both widths, one with 512-bit
// FMA units twice as many from AVX-512
static inline PeakFigure peak_fma_avx2(double trial_seconds, int reps) {
    return peak_fma_of(peak_fma_loop_avx2, 8, trial_seconds, reps);
}

// ----------------------------------------------------------------------------
// memory bandwidth

#define PEAK_STREAM_N ((size_t)1 << 25)

// GB/s of copy, triad and adamw (in that order) over `reps` rounds after one round of warm-up
static inline void peak_stream(int reps, PeakFigure out[3]) {
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
