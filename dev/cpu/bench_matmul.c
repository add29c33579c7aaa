/*
dev/cpu/bench_matmul.c: times the CPU matmul kernels of train_gpt2.c on the shapes of one d12
training step (BT = B*T rows, 256 by default: B=4, T=64), and prints GFLOP/s per shape and its
fraction of the machine's fp32 FMA peak (dev/cpu/peak.h), so that a change to the kernels can be
measured in isolation.

    gcc -O3 -march=native -fopenmp -I. dev/cpu/bench_matmul.c -o /tmp/bench_matmul -lm
    OMP_NUM_THREADS=2 /tmp/bench_matmul [BT] [reps] [--cpu-time]

The peak is measured right before and right after each shape's timings, on the same threads, and
the fraction divides by their mean: on a machine that others share, the two see about the same
load. Each time is the median of `reps` (default 5) calls. --cpu-time times everything (the peak
too) by the CPU time of the process divided by the threads instead of the wall clock: on a busy
machine that is close to what the same work takes alone, with 1 thread exactly so.
*/
#define TESTING
#include "train_gpt2.c"
#include "dev/cpu/peak.h"

static double median_of(double* v, int n) { return peak_figure(v, n).median; }

int main(int argc, char** argv) {
    if (argc > 1 && strcmp(argv[argc - 1], "--cpu-time") == 0) {
        peak_use_cpu_time(1);
        argc--;
    }
    int BT = argc > 1 ? atoi(argv[1]) : 256;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (argc > 3 || BT < 1 || BT > 65536 || reps < 1 || reps > 64) {
        fprintf(stderr, "error: usage: bench_matmul [BT (1..65536)] [reps (1..64)] [--cpu-time]\n");
        return 1;
    }
    const struct { const char* name; int C, OC, count; } shapes[] = {
        {"qkv      768 -> 2304 ", 768, 2304, 12},
        {"attproj  768 -> 768  ", 768, 768, 12},
        {"fc       768 -> 3072 ", 768, 3072, 12},
        {"fcproj  3072 -> 768  ", 3072, 768, 12},
        {"logits   768 -> 50304", 768, 50304, 1},
    };
    printf("BT %d, %d threads, %s, %s; fraction = GFLOP/s / the FMA peak measured around each shape\n", BT,
           omp_get_max_threads(), PEAK_ISA, peak_cpu_clock ? "CPU time" : "wall time");
    double total_fwd = 0.0, total_bwd = 0.0, total_flops = 0.0, peak_sum = 0.0;
    int peak_n = 0;
    uint64_t rng = 1;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int C = shapes[s].C, OC = shapes[s].OC;
        float* inp = (float*)malloc_check((size_t)BT * C * sizeof(float), "inp");
        float* w = (float*)malloc_check((size_t)OC * C * sizeof(float), "w");
        float* out = (float*)malloc_check((size_t)BT * OC * sizeof(float), "out");
        float* dinp = (float*)calloc_check((size_t)BT * C, sizeof(float), "dinp");
        float* dw = (float*)calloc_check((size_t)OC * C, sizeof(float), "dw");
        float* db = (float*)calloc_check((size_t)OC, sizeof(float), "db");
        random_normal(inp, (size_t)BT * C, 1.0f, &rng);
        random_normal(w, (size_t)OC * C, 0.02f, &rng);
        matmul_forward(out, inp, w, NULL, BT, C, OC);  // warm up (page faults)
        matmul_backward(dinp, dw, db, out, inp, w, BT, C, OC);
        double before = peak_fma(0.05, 3).median;
        double fwd[64], bwd[64];
        for (int r = 0; r < reps; r++) {
            double t0 = peak_seconds();
            matmul_forward(out, inp, w, NULL, BT, C, OC);
            double t1 = peak_seconds();
            matmul_backward(dinp, dw, db, out, inp, w, BT, C, OC);
            double t2 = peak_seconds();
            fwd[r] = t1 - t0;
            bwd[r] = t2 - t1;
        }
        double after = peak_fma(0.05, 3).median;
        double peak = 0.5 * (before + after);
        peak_sum += before + after;
        peak_n += 2;
        double f = median_of(fwd, reps), b = median_of(bwd, reps), flops = 2.0 * BT * C * OC;
        printf("%s forward %8.2f ms %6.1f GFLOP/s %.2f | backward %8.2f ms %6.1f GFLOP/s %.2f | peak %.1f\n",
               shapes[s].name, f * 1e3, flops / f * 1e-9, flops / f * 1e-9 / peak, b * 1e3, 2 * flops / b * 1e-9,
               2 * flops / b * 1e-9 / peak, peak);
        total_fwd += f * shapes[s].count;
        total_bwd += b * shapes[s].count;
        total_flops += 3 * flops * shapes[s].count;
        free(inp); free(w); free(out); free(dinp); free(dw); free(db);
    }
    double peak = peak_sum / peak_n;
    printf("one d12 step: matmul forward %.0f ms, backward %.0f ms: %.1f GFLOP/s, %.2f of the FMA peak (%.1f GFLOP/s)\n",
           total_fwd * 1e3, total_bwd * 1e3, total_flops / (total_fwd + total_bwd) * 1e-9,
           total_flops / (total_fwd + total_bwd) * 1e-9 / peak, peak);
    return 0;
}
