/*
common/train_common.h: host-side pieces of the training loop that train_gpt2.c (CPU) and
train_gpt2.cu (GPU) share: a clock, the NaN injection used by the tests of the non-finite guard,
the output-folder rules (resume, or refuse to overwrite a run) and the handling of a step whose
loss or gradient norm is not finite.
*/
#ifndef COMMON_TRAIN_COMMON_H
#define COMMON_TRAIN_COMMON_H

#include <time.h>
#include "args.h"
#include "logger.h"
#include "state.h"

static inline double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// A debugging aid for the tests of the non-finite guard: TRAIN_GPT2_NAN_STEPS="3,5-9" makes the
// gradients of those (1-based) steps NaN, as an overflow in a real run would.
static inline int nan_injected_at(int step) {
    const char* spec = getenv("TRAIN_GPT2_NAN_STEPS");
    while (spec && *spec) {
        char* end;
        long lo = strtol(spec, &end, 10), hi = lo;
        if (end == spec) { fatal("TRAIN_GPT2_NAN_STEPS: expected steps like \"3,5-9\""); }
        if (*end == '-') { spec = end + 1; hi = strtol(spec, &end, 10); }
        if (step >= lo && step <= hi) { return 1; }
        spec = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0') { fatal("TRAIN_GPT2_NAN_STEPS: expected steps like \"3,5-9\""); }
    }
    return 0;
}

// the output folder (-o): creates it, and returns the step of the newest complete checkpoint to
// resume from with -y 1 (-1: start fresh). Without -y 1 it refuses a folder that already holds a run.
static inline int output_dir_prepare(const TrainArgs* a) {
    if (a->output_dir[0] == '\0') { return -1; }
    ensure_writable_dir(a->output_dir);
    char log_path[1100];
    snprintf(log_path, sizeof(log_path), "%s/main.log", a->output_dir);
    int latest = latest_checkpoint(a->output_dir);
    if (a->resume) {
        if (latest < 0) { printf("note: no complete checkpoint in %s to resume from; starting fresh\n", a->output_dir); }
        return latest;
    }
    if (latest >= 0 || file_exists(log_path)) {
        fatal("%s already holds a run; resume it with -y 1 or choose another -o folder", a->output_dir);
    }
    return -1;
}

// a NaN or Inf loss or gradient norm at `step` (0-based): the update is skipped (the weights stay
// as they were), the step is printed and logged, and MAX_NONFINITE_STEPS in a row stop the run
static inline void nonfinite_step(Logger* lg, const TrainArgs* a, TrainState* st, int step, double loss, float norm) {
    st->nonfinite_in_a_row++;
    printf("step %d/%d | loss %.6f | norm %.4f | non-finite: update skipped (%d in a row)\n", step + 1, a->max_steps,
           loss, norm, st->nonfinite_in_a_row);
    logger_line(lg, "step=%d train_loss=%.6f norm=%.4f skipped=1", step + 1, loss, norm);
    if (st->nonfinite_in_a_row >= MAX_NONFINITE_STEPS) {
        int good = a->output_dir[0] != '\0' ? latest_checkpoint(a->output_dir) : -1;
        char where[1100] = "none was written";
        if (good >= 0) { checkpoint_paths(a->output_dir, good, where, NULL, sizeof(where)); }
        fatal("%d non-finite steps in a row, stopping at step %d; last good checkpoint: %s", st->nonfinite_in_a_row,
              step + 1, where);
    }
}

// a state read back for -y 1 must be the one its name says, from a run with the same batch shape:
// with another -b, -t or -d the data position and the accumulation would not continue the run
static inline void resume_check_state(const TrainState* st, const TrainArgs* a, const char* state_path, int resume_step) {
    if (st->step != resume_step) { fatal("%s says step %d, its name says %d", state_path, st->step, resume_step); }
    if (st->B != a->B || st->T != a->T || st->total_batch != a->total_batch) {
        fatal("%s was written with -b %d -t %d -d %ld; resume with the same (not -b %d -t %d -d %ld)", state_path,
              st->B, st->T, st->total_batch, a->B, a->T, a->total_batch);
    }
}

#endif // COMMON_TRAIN_COMMON_H
