/*
dev/cpu/bench_matmul.c: times the CPU matmul kernels of train_gpt2.c on the shapes of one d12
training step at B=4, T=64 (BT = 256), and prints GFLOP/s per shape, so that a change to the
kernels can be measured in isolation.

    gcc -O3 -march=native -fopenmp -I. dev/cpu/bench_matmul.c -o /tmp/bench_matmul -lm
    OMP_NUM_THREADS=2 /tmp/bench_matmul
*/
#define TESTING
#include "train_gpt2.c"

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void) {
    const int BT = 256;
    const struct { const char* name; int C, OC, count; } shapes[] = {
        {"qkv      768 -> 2304", 768, 2304, 12},
        {"attproj  768 -> 768 ", 768, 768, 12},
        {"fc       768 -> 3072", 768, 3072, 12},
        {"fcproj  3072 -> 768 ", 3072, 768, 12},
        {"logits   768 -> 50304", 768, 50304, 1},
    };
    double total_fwd = 0.0, total_bwd = 0.0;
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
        int reps = 3;
        double t0 = seconds();
        for (int r = 0; r < reps; r++) { matmul_forward(out, inp, w, NULL, BT, C, OC); }
        double t1 = seconds();
        for (int r = 0; r < reps; r++) { matmul_backward(dinp, dw, db, out, inp, w, BT, C, OC); }
        double t2 = seconds();
        double fwd = (t1 - t0) / reps, bwd = (t2 - t1) / reps, flops = 2.0 * BT * C * OC;
        printf("%s  forward %7.2f ms %6.1f GFLOP/s | backward %7.2f ms %6.1f GFLOP/s\n", shapes[s].name,
               fwd * 1e3, flops / fwd * 1e-9, bwd * 1e3, 2 * flops / bwd * 1e-9);
        total_fwd += fwd * shapes[s].count;
        total_bwd += bwd * shapes[s].count;
        free(inp); free(w); free(out); free(dinp); free(dw); free(db);
    }
    printf("one d12 step: matmul forward %.0f ms, backward %.0f ms\n", total_fwd * 1e3, total_bwd * 1e3);
    return 0;
}
