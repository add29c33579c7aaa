/*
common/debug_state.h: reading the PyTorch debug-state dumps (README.md, "Debug-state dump") and
measuring errors against them; shared by test_gpt2.c (CPU) and test_gpt2.cu (GPU).

Errors are measured per tensor as max|ours - torch| / max|torch|: the largest error relative to
the tensor's scale. A NaN anywhere counts as the largest error.
*/
#ifndef COMMON_DEBUG_STATE_H
#define COMMON_DEBUG_STATE_H

#include <math.h>
#include "params.h"

#define DUMP_MAGIC 20260209
#define DUMP_VERSION 1

typedef struct {
    int B, T, steps;
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    int* inputs;     // (B, T)
    int* targets;    // (B, T)
    float* logits;   // (B, T, Vp)
    float loss;
    float* grads;    // num_parameters, checkpoint order
    float* losses;   // (steps)
} DebugState;

static inline float header_float(const int* header, int i) {
    float f;
    memcpy(&f, header + i, sizeof(f));
    return f;
}

// reads a debug-state dump and checks it against the model it belongs to
static inline void debug_state_read(DebugState* ds, const char* path, const GPT2Config* cfg, size_t num_params) {
    FILE* f = fopen_check(path, "rb");
    long size = file_size_check(f, path);
    if (size < 1024) { fatal("%s: file is truncated (smaller than the header)", path); }
    int header[256];
    fread_check(header, sizeof(int), 256, f, path);
    if (header[0] != DUMP_MAGIC) { fatal("%s is not a debug-state dump (bad magic %d)", path, header[0]); }
    if (header[1] != DUMP_VERSION) { fatal("%s: unsupported dump version %d", path, header[1]); }
    ds->B = header[2];
    ds->T = header[3];
    ds->steps = header[6];
    if (ds->B < 1 || ds->T < 1 || ds->T > cfg->max_seq_len || ds->steps < 0 || ds->steps > 1000) {
        fatal("%s: bad sizes in header (B %d, T %d, steps %d)", path, ds->B, ds->T, ds->steps);
    }
    if (header[4] != cfg->vocab_size || header[5] != cfg->padded_vocab_size || header[7] != (int)cfg->norm_mode) {
        fatal("%s does not belong to its model.bin (vocab %d/%d, mode %d)", path, header[4], header[5], header[7]);
    }
    ds->lr = header_float(header, 16);
    ds->beta1 = header_float(header, 17);
    ds->beta2 = header_float(header, 18);
    ds->eps = header_float(header, 19);
    ds->weight_decay = header_float(header, 20);
    ds->grad_clip = header_float(header, 21);
    size_t BT = (size_t)ds->B * ds->T;
    size_t expected = 1024 + 4 * (2 * BT + BT * cfg->padded_vocab_size + 1 + num_params + ds->steps);
    if ((size_t)size != expected) { fatal("%s: %ld bytes, expected %zu (truncated or corrupted)", path, size, expected); }
    ds->inputs = (int*)malloc_check(BT * sizeof(int), "dump inputs");
    ds->targets = (int*)malloc_check(BT * sizeof(int), "dump targets");
    ds->logits = (float*)malloc_check(BT * cfg->padded_vocab_size * sizeof(float), "dump logits");
    ds->grads = (float*)malloc_check(num_params * sizeof(float), "dump grads");
    ds->losses = (float*)malloc_check((ds->steps + 1) * sizeof(float), "dump losses");
    fread_check(ds->inputs, sizeof(int), BT, f, path);
    fread_check(ds->targets, sizeof(int), BT, f, path);
    fread_check(ds->logits, sizeof(float), BT * cfg->padded_vocab_size, f, path);
    fread_check(&ds->loss, sizeof(float), 1, f, path);
    fread_check(ds->grads, sizeof(float), num_params, f, path);
    fread_check(ds->losses, sizeof(float), ds->steps, f, path);
    fclose(f);
}

static inline void debug_state_free(DebugState* ds) {
    free(ds->inputs);
    free(ds->targets);
    free(ds->logits);
    free(ds->grads);
    free(ds->losses);
}

// max|got - ref| / max|ref| over n floats with stride handling for (rows, used of stride) layouts
static inline float scaled_max_error(const float* got, const float* ref, size_t rows, size_t used, size_t stride) {
    float max_diff = 0.0f, max_ref = 0.0f;
    for (size_t r = 0; r < rows; r++) {
        for (size_t i = 0; i < used; i++) {
            float d = fabsf(got[r * stride + i] - ref[r * stride + i]);
            float a = fabsf(ref[r * stride + i]);
            if (!(d <= max_diff)) { max_diff = d; }  // a NaN difference becomes the maximum
            if (a > max_ref) { max_ref = a; }
        }
    }
    return max_ref > 0.0f ? max_diff / max_ref : max_diff;
}

static inline int report(const char* what, float err, float tol) {
    int ok = err <= tol;  // false for NaN
    printf("  %-10s error %.3e  (tol %.0e)  %s\n", what, err, tol, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

// compares every (non-empty) gradient tensor by name, checkpoint order; returns the failures
static inline int report_gradients(const float* grads, const float* ref, const size_t sizes[NUM_PARAMETER_TENSORS], float tol) {
    int failures = 0;
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = sizes[i];
        if (n > 0) { failures += report(PARAM_NAMES[i], scaled_max_error(grads + offset, ref + offset, 1, n, n), tol); }
        offset += n;
    }
    return failures;
}

static inline void report_adamw_settings(const DebugState* ds) {
    printf("  %d AdamW steps (lr %g, betas %g %g, eps %g, wd %g, clip %g):\n", ds->steps, ds->lr, ds->beta1, ds->beta2,
           ds->eps, ds->weight_decay, ds->grad_clip);
}

// one AdamW step's loss against torch's (relative error); returns 1 on failure
static inline int report_step_loss(int step, float ours, float ref, float norm, float tol) {
    float err = fabsf(ours - ref) / fabsf(ref);
    int ok = err <= tol;  // false for NaN
    printf("    step %2d loss ours %.6f torch %.6f | norm %.4f | error %.2e %s\n", step, ours, ref, norm, err, ok ? "ok" : "FAIL");
    return !ok;
}

#endif // COMMON_DEBUG_STATE_H
