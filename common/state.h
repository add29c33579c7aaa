/*
common/state.h: the training state that, next to a model checkpoint, makes a resume exact.

A checkpoint of a run in the output folder is a PAIR of files written at the same step:
    model_XXXXXXXX.bin   the parameters (common/params.h; fp32 master weights on the GPU)
    state_XXXXXXXX.bin   everything else training needs to continue as if it never stopped:
        header   256 int32: magic 20260210, version 1, then the fields of TrainState below
                 (max_steps, int 16, came later: files without it hold 0 there, "not recorded")
        body     AdamW m (num_parameters float32), AdamW v (num_parameters float32)
Each file is written atomically (temporary file, fsync, rename), the state first and the model
second, so a pair is complete exactly when both files exist: a crash or a full disk at any point
leaves the previous complete pair as the newest one. `-y 1` resumes from the newest complete pair.
*/
#ifndef COMMON_STATE_H
#define COMMON_STATE_H

#include <dirent.h>
#include "params.h"

#define STATE_MAGIC 20260210
#define STATE_VERSION 1

typedef struct {
    int step;                 // optimizer steps completed (the next step to run)
    int updates;              // AdamW updates applied: the t of bias correction (skipped steps don't count)
    int nonfinite_in_a_row;   // consecutive steps skipped for a non-finite loss or gradient norm
    long num_parameters;      // must match the model
    int B, T;                 // micro-batch of the run that wrote it
    long total_batch;         // tokens per optimizer step
    int shard_index;          // training data position: the next batch (common/dataloader.h)
    long shard_offset;
    uint64_t sample_rng;      // the sampling random state
    int max_steps;            // the -x the run was planned with (its cosine schedule); 0: not recorded
} TrainState;

static inline void checkpoint_paths(const char* dir, int step, char* model_path, char* state_path, size_t cap) {
    if (model_path) { snprintf(model_path, cap, "%s/model_%08d.bin", dir, step); }
    if (state_path) { snprintf(state_path, cap, "%s/state_%08d.bin", dir, step); }
}

static inline void put_long(int* header, int i, long v) {
    header[i] = (int)(v & 0x7fffffffL);
    header[i + 1] = (int)(v >> 31);
}

// (multiplied, not shifted: the high half of a corrupted file may be negative, and shifting a
// negative number is undefined behaviour)
static inline long get_long(const int* header, int i) { return (long)header[i] + (long)header[i + 1] * 2147483648L; }

static inline void state_write(const char* path, const TrainState* st, const float* m, const float* v) {
    int header[256];
    memset(header, 0, sizeof(header));
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    header[2] = st->step;
    header[3] = st->updates;
    header[4] = st->nonfinite_in_a_row;
    put_long(header, 5, st->num_parameters);
    header[7] = st->B;
    header[8] = st->T;
    put_long(header, 9, st->total_batch);
    header[11] = st->shard_index;
    put_long(header, 12, st->shard_offset);
    header[14] = (int)(uint32_t)(st->sample_rng & 0xffffffffu);
    header[15] = (int)(uint32_t)(st->sample_rng >> 32);
    header[16] = st->max_steps;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(int), 256);
    atomic_write(&af, m, sizeof(float), (size_t)st->num_parameters);
    atomic_write(&af, v, sizeof(float), (size_t)st->num_parameters);
    atomic_commit(&af);
}

// reads and checks a state file for a model of num_parameters parameters; m and v receive the moments
static inline void state_read(const char* path, TrainState* st, float* m, float* v, size_t num_parameters) {
    FILE* f = fopen_check(path, "rb");
    long size = file_size_check(f, path);
    if (size < 1024) { fatal("%s: file is truncated (%ld bytes, smaller than the header)", path, size); }
    int header[256];
    fread_check(header, sizeof(int), 256, f, path);
    if (header[0] != STATE_MAGIC) { fatal("%s is not a training state file (bad magic %d)", path, header[0]); }
    if (header[1] != STATE_VERSION) { fatal("%s: unsupported state version %d (expected %d)", path, header[1], STATE_VERSION); }
    st->step = header[2];
    st->updates = header[3];
    st->nonfinite_in_a_row = header[4];
    st->num_parameters = get_long(header, 5);
    st->B = header[7];
    st->T = header[8];
    st->total_batch = get_long(header, 9);
    st->shard_index = header[11];
    st->shard_offset = get_long(header, 12);
    st->sample_rng = (uint64_t)(uint32_t)header[14] | ((uint64_t)(uint32_t)header[15] << 32);
    st->max_steps = header[16];  // 0 in files written before it was recorded
    if (st->num_parameters != (long)num_parameters) {
        fatal("%s holds optimizer state for %ld parameters, but the model has %zu", path, st->num_parameters, num_parameters);
    }
    if (st->step < 0 || st->updates < 0 || st->updates > st->step || st->nonfinite_in_a_row < 0 ||
        st->nonfinite_in_a_row > st->step || st->B < 1 || st->T < 1 || st->total_batch < 1 || st->shard_index < 0 ||
        st->shard_offset < 0 || st->max_steps < 0) {
        fatal("%s: inconsistent values in header (step %d, updates %d)", path, st->step, st->updates);
    }
    size_t expected = 1024 + 2 * sizeof(float) * num_parameters;
    if ((size_t)size != expected) {
        fatal("%s: file has %ld bytes but its header describes %zu (truncated or corrupted)", path, size, expected);
    }
    fread_check(m, sizeof(float), num_parameters, f, path);
    fread_check(v, sizeof(float), num_parameters, f, path);
    fclose(f);
    // non-finite moments would turn every update into NaN (and every step would then be skipped)
    for (size_t i = 0; i < num_parameters; i++) {
        if (!isfinite(m[i]) || !isfinite(v[i])) {
            fatal("%s: the AdamW %s of parameter %zu is %s; refusing to resume from it", path, isfinite(m[i]) ? "v" : "m",
                  i, isnan(isfinite(m[i]) ? v[i] : m[i]) ? "NaN" : "Inf");
        }
    }
}

// the steps of the complete checkpoint pairs in `dir`, ascending; returns how many (at most cap:
// then the newest cap)
static inline int list_checkpoints(const char* dir, int* steps, int cap) {
    DIR* d = opendir(dir);
    if (d == NULL) { return 0; }
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int step;
        char tail;
        if (sscanf(e->d_name, "model_%8d.bi%c", &step, &tail) != 2 || tail != 'n' || strlen(e->d_name) != 18) { continue; }
        char state_path[1100];
        checkpoint_paths(dir, step, NULL, state_path, sizeof(state_path));
        if (!file_exists(state_path)) { continue; }  // incomplete pair: the state is written first
        if (n < cap) {
            steps[n++] = step;
        } else {  // more pairs than fit: keep the newest `cap` (readdir's order is arbitrary)
            int oldest = 0;
            for (int i = 1; i < n; i++) { if (steps[i] < steps[oldest]) { oldest = i; } }
            if (step > steps[oldest]) { steps[oldest] = step; }
        }
    }
    closedir(d);
    for (int i = 1; i < n; i++) {  // insertion sort, the lists are short
        for (int j = i; j > 0 && steps[j - 1] > steps[j]; j--) { int t = steps[j]; steps[j] = steps[j - 1]; steps[j - 1] = t; }
    }
    return n;
}

// the newest complete checkpoint pair in `dir`, or -1
static inline int latest_checkpoint(const char* dir) {
    int steps[4096];
    int n = list_checkpoints(dir, steps, 4096);
    return n > 0 ? steps[n - 1] : -1;
}

// deletes all but the newest `keep` complete pairs (keep <= 0: keep everything)
static inline void remove_old_checkpoints(const char* dir, int keep) {
    if (keep <= 0) { return; }
    int steps[4096];
    int n = list_checkpoints(dir, steps, 4096);
    for (int i = 0; i < n - keep; i++) {
        char model_path[1100], state_path[1100];
        checkpoint_paths(dir, steps[i], model_path, state_path, sizeof(model_path));
        remove(model_path);  // the model first: a pair without its model is not a checkpoint any more
        remove(state_path);
    }
}

#endif // COMMON_STATE_H
