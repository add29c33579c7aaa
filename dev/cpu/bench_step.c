/*
dev/cpu/bench_step.c: one CPU training step of train_gpt2.c taken apart: the time of each of its
phases (zeroing the gradients, forward, backward, the gradient norm, AdamW), by the wall clock and
by CPU time, and the whole step's model FLOPs against the FMA peak (dev/cpu/peak.h) measured in
the same run. dev/bench_cpu.sh times the trainer as a user runs it; this says where a step's time
goes, and, timed by CPU time, stays comparable on a machine that others keep busy.

    gcc -O3 -march=native -fno-math-errno -fopenmp -I. dev/cpu/bench_step.c -o /tmp/bench_step -lm
    OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=2 /tmp/bench_step [shape] [mode] [B] [T] [steps] [V]

shape dN or dNcChH (default d12), mode pre, post or siamese (default siamese), B and T (4, 64),
steps (6; the medians are over steps 2..steps), V the vocabulary (50257). CPU time is that of the
whole process divided by the threads: about the time alone on the machine, except that a thread
asleep while it waits for the other is not counted (set OMP_WAIT_POLICY=PASSIVE, as the trainer
does: a spinning thread would be). The model FLOPs are counted as in dev/bench_cpu.sh. It builds
against any version of train_gpt2.c with these functions, so two versions can be compared in one
session (build each from its own tree with -I that tree).
*/
#define TESTING
#include "train_gpt2.c"
#include "dev/cpu/peak.h"

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (ts.tv_sec + ts.tv_nsec * 1e-9) / omp_get_max_threads();
}

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double median(double* v, int n) { return peak_figure(v, n).median; }

enum { ZERO, FORWARD, BACKWARD, NORM, UPDATE, PHASES, MAX_STEPS = 64 };
static const char* PHASE_NAMES[PHASES] = {"zero_grad", "forward", "backward", "grad norm", "AdamW"};

int main(int argc, char** argv) {
    const char* shape = argc > 1 ? argv[1] : "d12";
    const char* mode_name = argc > 2 ? argv[2] : "siamese";
    int B = argc > 3 ? atoi(argv[3]) : 4, T = argc > 4 ? atoi(argv[4]) : 64;
    int steps = argc > 5 ? atoi(argv[5]) : 6, V = argc > 6 ? atoi(argv[6]) : 50257;
    int L = 0, C = 0, NH = 0, mode = -1;
    for (int i = 0; i < NUM_NORM_MODES; i++) { if (strcmp(mode_name, NORM_MODE_NAMES[i]) == 0) { mode = i; } }
    int fields = sscanf(shape, "d%dc%dh%d", &L, &C, &NH);
    if (argc > 7 || mode < 0 || fields < 1 || fields == 2 || L < 1 || B < 1 || T < 1 || T > 1024 || steps < 2 ||
        steps > MAX_STEPS || V < 2 || (fields == 3 && (C < 1 || NH < 1 || C % NH != 0))) {
        fprintf(stderr, "error: usage: bench_step [dN | dNcChH] [pre|post|siamese] [B] [T 1..1024] [steps 2..%d] [V]\n",
                MAX_STEPS);
        return 1;
    }
    GPT2Config cfg = gpt2_config_for_depth(L, (NormMode)mode, V, 1024);
    if (fields == 3) { cfg.channels = C; cfg.num_heads = NH; }
    GPT2 model;
    gpt2_build_fresh(&model, &cfg, 1);
    gpt2_allocate(&model, B, T);
    int* tokens = (int*)malloc_check((size_t)(B * T + 1) * sizeof(int), "tokens");
    uint64_t rng = 5;
    for (int i = 0; i <= B * T; i++) { tokens[i] = (int)(random_u32(&rng) % (uint32_t)V); }

    double peak_before = peak_fma(0.05, 5).median;
    double wall[PHASES][MAX_STEPS], cpu[PHASES][MAX_STEPS], wall_step[MAX_STEPS], cpu_step[MAX_STEPS];
    for (int s = 0; s < steps; s++) {
        double w0 = wall_seconds(), c0 = cpu_seconds();
        double w = w0, c = c0;
        for (int p = 0; p < PHASES; p++) {
            switch (p) {
                case ZERO: gpt2_zero_grad(&model); break;
                case FORWARD: gpt2_forward(&model, tokens, tokens + 1, B, T); break;
                case BACKWARD: gpt2_backward(&model, 1.0f); break;
                case NORM: {
                    float norm = (float)sqrt(gpt2_grad_sumsq(&model, 0, model.num_parameters));
                    model.mean_loss = norm;  // (kept alive)
                    break;
                }
                case UPDATE: gpt2_update(&model, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, s + 1); break;
            }
            double w1 = wall_seconds(), c1 = cpu_seconds();
            wall[p][s] = w1 - w;
            cpu[p][s] = c1 - c;
            w = w1;
            c = c1;
        }
        wall_step[s] = w - w0;
        cpu_step[s] = c - c0;
    }
    double peak_after = peak_fma(0.05, 5).median;
    peak_use_cpu_time(1);
    double peak_cpu = peak_fma(0.05, 5).median;

    double Ld = cfg.num_layers, Cd = cfg.channels, tokens_per_step = (double)B * T;
    double flops = 6.0 * (12.0 * Ld * Cd * Cd + (double)cfg.padded_vocab_size * Cd) * tokens_per_step +
                   12.0 * Ld * Cd * T * tokens_per_step;
    printf("%s %s: L %d C %d NH %d Vp %d, B %d T %d, %d threads, %s; medians of steps 2..%d\n", shape, mode_name,
           cfg.num_layers, cfg.channels, cfg.num_heads, cfg.padded_vocab_size, B, T, omp_get_max_threads(), PEAK_ISA,
           steps);
    printf("%-10s %10s %10s\n", "phase", "wall ms", "CPU ms");
    for (int p = 0; p < PHASES; p++) {
        printf("%-10s %10.2f %10.2f\n", PHASE_NAMES[p], 1e3 * median(wall[p] + 1, steps - 1),
               1e3 * median(cpu[p] + 1, steps - 1));
    }
    double ws = median(wall_step + 1, steps - 1), cs = median(cpu_step + 1, steps - 1);
    double peak_wall = 0.5 * (peak_before + peak_after);
    printf("%-10s %10.2f %10.2f\n", "step", 1e3 * ws, 1e3 * cs);
    printf("model FLOPs %.1f G: wall %.1f GFLOP/s = %.3f of the FMA peak %.1f; CPU time %.1f GFLOP/s = %.3f of %.1f\n",
           flops * 1e-9, flops / ws * 1e-9, flops / ws * 1e-9 / peak_wall, peak_wall, flops / cs * 1e-9,
           flops / cs * 1e-9 / peak_cpu, peak_cpu);
    free(tokens);
    gpt2_free(&model);
    return 0;
}
