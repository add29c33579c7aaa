/*
dev/cpu/peak.c: prints this machine's fp32 FMA peak and memory bandwidth on OMP_NUM_THREADS
threads (dev/cpu/peak.h says what each figure measures). dev/bench_cpu.sh builds and runs it in
the same run as the trainer and divides each step by these limits.

    gcc -O3 -march=native -fopenmp dev/cpu/peak.c -o /tmp/peak
    OMP_NUM_THREADS=2 /tmp/peak fma            # about 1 s (2 s in an AVX-512 build)
    OMP_NUM_THREADS=2 /tmp/peak stream         # about 5 s and 512 MiB of memory
    OMP_NUM_THREADS=2 /tmp/peak                # both
    OMP_NUM_THREADS=2 /tmp/peak fma --cpu-time # timed by the process's CPU time / threads (peak.h)

Output, one line per figure, for scripts:
    fma_gflops median 233.9 best 234.4 isa avx512 threads 2
    fma_gflops_avx2 median 233.5 best 234.1 isa avx2 threads 2     (AVX-512 builds only)
    stream_gbs copy median 20.1 best 21.0 threads 2         (and triad, adamw)
*/
#include <string.h>
#include "peak.h"

int main(int argc, char** argv) {
    if (argc > 1 && strcmp(argv[argc - 1], "--cpu-time") == 0) {
        peak_use_cpu_time(1);
        argc--;
    }
    const char* what = argc > 1 ? argv[1] : "all";
    int fma = !strcmp(what, "fma") || !strcmp(what, "all");
    int stream = !strcmp(what, "stream") || !strcmp(what, "all");
    if ((!fma && !stream) || argc > 2) {
        fprintf(stderr, "error: usage: peak [fma|stream|all] [--cpu-time]\n");
        return 1;
    }
    int threads = omp_get_max_threads();
    if (fma) {
        PeakFigure f = peak_fma(0.1, 7);
        printf("fma_gflops median %.1f best %.1f isa %s threads %d\n", f.median, f.best, PEAK_ISA, threads);
        if (PEAK_LANES > 8) {  // an AVX-512 build: the same loop on 256-bit vectors beside it
            PeakFigure f2 = peak_fma_avx2(0.1, 7);
            printf("fma_gflops_avx2 median %.1f best %.1f isa avx2 threads %d\n", f2.median, f2.best, threads);
        }
    }
    if (stream) {
        PeakFigure s[3];
        peak_stream(5, s);
        const char* names[3] = {"copy", "triad", "adamw"};
        for (int k = 0; k < 3; k++) {
            printf("stream_gbs %s median %.1f best %.1f threads %d\n", names[k], s[k].median, s[k].best, threads);
        }
    }
    return 0;
}
