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
#include "arithmetic.h"
#include "dataloader.h"
#include "logger.h"
#include "state.h"
#include "tokenizer.h"

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

// ----------------------------------------------------------------------------
// the data side of a run, before the model exists

typedef struct {
    Tokenizer tokenizer;  // the tokenizer.bin beside the first training shard (may be absent)
    int is_arith;         // the data folder holds the arithmetic corpus (its marker file)
    ArithSpec arith;      // and how it was made
} RunData;

// Without -i the default dataset is generated first (common/arithmetic.h). The data folder (of the
// first training shard) holds the tokenizer.bin the data scripts write, and for arithmetic data
// the marker that turns on the accuracy. -i without -j means no validation (the default -j
// belongs to the arithmetic data).
static inline void run_data_prepare(RunData* rd, TrainArgs* a) {
    int default_data = strcmp(a->train_pattern, ARITH_DEFAULT_TRAIN) == 0;
    if (default_data) { arith_ensure_dataset(ARITH_DIR); }
    char data_dir[1024], tok_path[1100];
    dataloader_first_dir(a->train_pattern, data_dir, sizeof(data_dir));
    snprintf(tok_path, sizeof(tok_path), "%s/tokenizer.bin", data_dir);
    tokenizer_init(&rd->tokenizer, tok_path);
    rd->is_arith = data_dir[0] != '\0' && arith_read_marker(data_dir, &rd->arith);
    if (!default_data && !rd->is_arith && strcmp(a->val_pattern, ARITH_DEFAULT_VAL) == 0 && a->val_every > 0) {
        printf("note: -i given without -j: no validation (the default -j belongs to the arithmetic data)\n");
        a->val_pattern = "";
    }
}

// the order of the training batches: from the start of the data, or with -S from a position the
// seed chooses (common/dataloader.h); a resumed run then continues from its saved position
static inline void run_data_order(DataLoader* train_loader, const TrainArgs* a) {
    if (!a->seed_given) { return; }
    dataloader_start_at_seed(train_loader, a->seed);
    printf("data order: seed %llu, the training batches start at shard %d, token %ld\n", a->seed,
           train_loader->shard_index, train_loader->shard_offset);
}

// the vocabulary of a fresh model: the tokenizer's (257 for the arithmetic data), else GPT-2's
static inline int run_data_vocab_size(const RunData* rd) { return rd->tokenizer.loaded ? rd->tokenizer.vocab_size : 50257; }

// arithmetic data: sets up exact-match accuracy on held-out problems at every validation;
// returns whether it runs (it needs -t long enough and a vocabulary with GPT-2's byte tokens)
static inline int run_arith_eval_init(ArithEval* e, const RunData* rd, const TrainArgs* a, const GPT2Config* cfg) {
    if (!rd->is_arith || a->arith_problems <= 0 || a->val_every <= 0) { return 0; }
    int ok = cfg->vocab_size > arith_tokens().newline && arith_eval_init(e, &rd->arith, a->arith_problems, a->B, a->T);
    if (ok) {
        printf("arithmetic accuracy: %d held-out problems (1-%d digit operands, %d solved ones before each), "
               "greedy answers\n", a->arith_problems, rd->arith.max_digits, e->context);
    } else {
        printf("note: no arithmetic accuracy (the problems need -t >= %d and a vocabulary with GPT-2's byte tokens)\n",
               arith_eval_row_tokens(&rd->arith, 0));
    }
    return ok;
}

// one evaluation line: the validation loss (when have_val) and the arithmetic accuracy (when
// arith is not NULL, decoding greedily with `greedy`), printed and logged for `step`
static inline void run_report_evaluation(Logger* lg, int step, int have_val, float val_loss, ArithEval* arith,
                                         ArithGreedyFn greedy, void* model) {
    char line[256] = "", log[256] = "";
    if (have_val) {
        snprintf(line, sizeof(line), "val loss %.6f", val_loss);
        snprintf(log, sizeof(log), " val_loss=%.6f", val_loss);
    }
    if (arith) {
        float acc = arith_eval_run(arith, greedy, model);
        size_t n = strlen(line), k = strlen(log);
        snprintf(line + n, sizeof(line) - n, "%sarith acc %.4f (%d/%d) | %s | %s", n ? " | " : "", acc, arith->correct,
                 arith->K, arith->shown[0], arith->shown[1]);
        snprintf(log + k, sizeof(log) - k, " arith_acc=%.4f", acc);
    }
    printf("%s\n", line);
    logger_line(lg, "step=%d%s", step, log);
}

#endif // COMMON_TRAIN_COMMON_H
