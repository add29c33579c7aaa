/*
common/debug_state.h: the debug-state dumps (doc/formats.md, "Debug-state dump"): reading and writing
them, and measuring a trainer's numbers against them; shared by test_gpt2.c (CPU) and test_gpt2.cu
(GPU). The dumps come from `python dev/train_gpt2.py --write_dumps DIR` (PyTorch, in float64) or
from `./test_gpt2 --write DIR SHAPE` (the CPU trainer, at shapes too large to store).

Besides the logits, the loss, the parameter gradients and the losses and gradient norms of a few
AdamW steps, a dump holds the forward activations of every sublayer, in forward order, and the
gradients of the residual streams at every sublayer boundary, in backward order. Their list is not
stored: it follows from the norm mode and the shape (dump_forward_list, dump_backward_list below), and
dev/train_gpt2.py records the same tensors in the same order. Per sublayer k = 2l + s (s = 0
attention, 1 MLP) of layer l, as dev/MODEL.md ("Forward pass") names them:

    pre      u = LN(x)  [qkv atty | fch fch_gelu]  z = F(u)  x = x + z
    post     [qkv atty | fch fch_gelu]  z = F(x)  x+z  x = LN(x + z)
    siamese  a = LN(x)  LN(y)  a+LN(y)  u = LN(a + LN(y))  [qkv atty | fch fch_gelu]  z  x = a + z/c  y = y + z

before them the embedding e, after them the final merge LN(x)+LN(y) (siamese), h and the logits.
The stream gradients are dx (and dy, siamese) at boundaries 2L, 2L-1, ..., 0 (boundary k + 1 is the
stream after sublayer k, boundary 0 the embedding).

Errors are measured per tensor as max|ours - ref| / max|ref|: the largest error relative to the
tensor's scale (a reference in float64 keeps the error measured ours alone), the losses and the
gradient norms relative. A NaN anywhere counts as the largest error. That scale is no yardstick for
a gradient that is mostly cancellation (large terms of both signs summed to a small total, as in a
trained model's LayerNorm biases): any float32 computation of it errs by a large fraction of its
small scale. So every dump of dev/train_gpt2.py stores, per checked number (each forward tensor,
the loss, each stream gradient, each parameter tensor's gradient, each step loss, each step's
gradient norm), its yardstick: the error of PyTorch's own float32 computation on the same model and
batch against the float64 reference, in the same measure. A number passes when

    error <= tolerance(floor, yardstick) = max(floor, YARDSTICK_K * yardstick),   YARDSTICK_K = 10

with the test's fixed floor per kind (test_gpt2.c): a float32 trainer may err by ten times what
PyTorch's float32 errs on that tensor, and never fails below the floor. Dumps that ./test_gpt2
--write makes (the CPU trainer as reference, no float32/float64 pair) store yardsticks 0: the floor
alone. On the untrained dumps every yardstick is under 1e-6, so 10x stays under the floors; on the
trained dump (data/test/siamese_trained) they reach 4.6e-5 and the tolerances of most gradients rise,
and those of the gradient norms of its later steps reach 2.7e-4 (a step's norm is held to the
largest norm yardstick up to that step: step_norm_yard).
*/
#ifndef COMMON_DEBUG_STATE_H
#define COMMON_DEBUG_STATE_H

#include <math.h>
#include "params.h"

#define DUMP_MAGIC 20260209
#define DUMP_VERSION 4  // 1: without activations and stream gradients; 2: without yardsticks; 3: without norms
#define YARDSTICK_K 10.0f    // a number passes within max(floor, YARDSTICK_K x PyTorch float32's error)
#define YARDSTICK_MAX 1e-3f  // a larger stored yardstick is refused: it would leave the test blind

// what a stored tensor is; each test maps a kind to its own trainer's buffers
typedef enum {
    DT_E, DT_A, DT_LNY, DT_S, DT_U, DT_QKV, DT_ATTY, DT_FCH, DT_FCH_GELU, DT_Z, DT_R, DT_X, DT_Y,
    DT_FINAL_S, DT_H, DT_LOGITS, DT_DX, DT_DY, NUM_DUMP_KINDS
} DumpKind;
static const char* const DUMP_KIND_NAMES[NUM_DUMP_KINDS] = {
    "e", "a", "LN(y)", "a+LN(y)", "u", "qkv", "atty", "fch", "fch_gelu", "z", "x+z", "x", "y",
    "LN(x)+LN(y)", "h", "logits", "dx", "dy"};

typedef struct {
    DumpKind kind;
    int k;               // forward: sublayer 0..2L-1, -1 the embedding, 2L the final LN and logits;
                         // backward: the boundary 0..2L
    size_t rows, cols;   // compared: cols of each of rows rows ...
    size_t stride;       // ... stored stride floats apart (cols < stride only for the logits)
    const float* ref;    // the reference data (set by debug_state_read / debug_state_alloc)
    const float* yard;   // its yardstick: PyTorch float32's error on it (0: none)
} DumpTensor;

typedef struct {
    int B, T, steps;
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    int* inputs;     // (B, T)
    int* targets;    // (B, T)
    float* logits;   // (B, T, Vp)
    float loss;
    float* grads;    // num_parameters, checkpoint order
    float* losses;   // (steps)
    float* norms;    // (steps) the global L2 norm of all parameter gradients at each step, before clipping
    int n_fwd, n_bwd;             // forward tensors (the logits last) and stream gradients
    DumpTensor* fwd;              // (n_fwd) forward order
    DumpTensor* bwd;              // (n_bwd) backward order
    float* acts;                  // every forward tensor but the logits, in list order
    float* stream_grads;          // every backward tensor, in list order
    size_t acts_floats, stream_grads_floats;
    // the yardsticks (PyTorch float32's errors), in this order: the forward tensors (list order, the
    // logits last), the loss, the stream gradients (list order), every parameter tensor's gradient
    // (checkpoint order, 0 for an empty tensor), the step losses, the step norms
    float* yards;                 // (n_yards)
    int n_yards;
    const float* loss_yard;       // -> yards
    const float* grad_yards;      // (NUM_PARAMETER_TENSORS) -> yards
    const float* step_yards;      // (steps) -> yards
    const float* norm_yards;      // (steps) -> yards
} DebugState;

static inline DumpTensor dump_tensor(DumpKind kind, int k, size_t rows, size_t cols) {
    DumpTensor t;
    t.kind = kind;
    t.k = k;
    t.rows = rows;
    t.cols = cols;
    t.stride = cols;
    t.ref = NULL;
    t.yard = NULL;
    return t;
}

// the forward tensors of a dump in order (the logits last); returns the count (out may be NULL)
static inline int dump_forward_list(DumpTensor* out, const GPT2Config* cfg, size_t BT) {
    size_t C = cfg->channels;
    NormMode mode = cfg->norm_mode;
    DumpTensor list[16];
    int n = 0, total = 0;
    for (int k = -1; k <= 2 * cfg->num_layers; k++) {
        n = 0;
        if (k == -1) {
            list[n++] = dump_tensor(DT_E, k, BT, C);
        } else if (k == 2 * cfg->num_layers) {
            switch (mode) {  // no default: -Wswitch names a mode this does not handle
                case NORM_PRE:
                case NORM_POST: break;
                case NORM_SIAMESE: list[n++] = dump_tensor(DT_FINAL_S, k, BT, C); break;  // LN(x) + LN(y)
            }
            list[n++] = dump_tensor(DT_H, k, BT, C);
            list[n] = dump_tensor(DT_LOGITS, k, BT, (size_t)cfg->vocab_size);
            list[n++].stride = (size_t)cfg->padded_vocab_size;
        } else {
            switch (mode) {  // the block input side
                case NORM_PRE: list[n++] = dump_tensor(DT_U, k, BT, C); break;
                case NORM_POST: break;  // the block reads the stream itself
                case NORM_SIAMESE:
                    list[n++] = dump_tensor(DT_A, k, BT, C);
                    list[n++] = dump_tensor(DT_LNY, k, BT, C);
                    list[n++] = dump_tensor(DT_S, k, BT, C);
                    list[n++] = dump_tensor(DT_U, k, BT, C);
                    break;
            }
            if (k % 2 == 0) {
                list[n++] = dump_tensor(DT_QKV, k, BT, 3 * C);
                list[n++] = dump_tensor(DT_ATTY, k, BT, C);
            } else {
                list[n++] = dump_tensor(DT_FCH, k, BT, 4 * C);
                list[n++] = dump_tensor(DT_FCH_GELU, k, BT, 4 * C);
            }
            list[n++] = dump_tensor(DT_Z, k, BT, C);
            switch (mode) {  // the update of the stream(s)
                case NORM_PRE: list[n++] = dump_tensor(DT_X, k, BT, C); break;
                case NORM_POST:
                    list[n++] = dump_tensor(DT_R, k, BT, C);
                    list[n++] = dump_tensor(DT_X, k, BT, C);
                    break;
                case NORM_SIAMESE:
                    list[n++] = dump_tensor(DT_X, k, BT, C);
                    list[n++] = dump_tensor(DT_Y, k, BT, C);
                    break;
            }
        }
        if (out) { memcpy(out + total, list, n * sizeof(DumpTensor)); }
        total += n;
    }
    return total;
}

// the stream gradients of a dump in backward order; returns the count (out may be NULL)
static inline int dump_backward_list(DumpTensor* out, const GPT2Config* cfg, size_t BT) {
    int n = 0;
    for (int b = 2 * cfg->num_layers; b >= 0; b--) {
        if (out) { out[n] = dump_tensor(DT_DX, b, BT, cfg->channels); }
        n++;
        if (norm_mode_layout(cfg->norm_mode)->two_streams) {
            if (out) { out[n] = dump_tensor(DT_DY, b, BT, cfg->channels); }
            n++;
        }
    }
    return n;
}

// The folders of a dump directory, checked in turn: one per norm mode (required), then the siamese
// model trained 200 steps (dev/train_gpt2.py, TRAINED_STEPS), whose gradients are partly
// cancellation; data/test has it, the dumps ./test_gpt2 --write makes do not. Returns folder i's
// name and sets *mode to the norm mode its model.bin must hold, or prints that an optional folder
// is skipped and returns NULL when dir does not hold it.
#define NUM_DUMP_FOLDERS (NUM_NORM_MODES + 1)
static inline const char* dump_folder(const char* dir, int i, NormMode* mode) {
    if (i < NUM_NORM_MODES) {
        *mode = (NormMode)i;
        return NORM_MODE_NAMES[i];
    }
    *mode = NORM_SIAMESE;
    const char* folder = "siamese_trained";
    char path[1100];
    snprintf(path, sizeof(path), "%s/%s/model.bin", dir, folder);
    FILE* f = fopen(path, "rb");
    if (!f) {
        printf("[%s] skipped: not in %s\n", folder, dir);
        return NULL;
    }
    fclose(f);
    return folder;
}

// where a tensor sits: "embedding", "layer 1 attn", "final" (forward); "after layer 1 attn" (backward)
static inline void dump_tensor_place(const DumpTensor* t, int L, char* buf, size_t size) {
    int backward = t->kind == DT_DX || t->kind == DT_DY;
    int k = backward ? t->k - 1 : t->k;  // boundary b is the stream after sublayer b - 1
    if (k < 0) {
        snprintf(buf, size, "embedding");
    } else if (k >= 2 * L) {
        snprintf(buf, size, "final");
    } else {
        snprintf(buf, size, "%slayer %d %s", backward ? "after " : "", k / 2, k % 2 == 0 ? "attn" : "mlp");
    }
}

// Where a forward tensor lives in a trainer's activations: the ActivationTensors of train_gpt2.c
// and train_gpt2.cu name and lay out these buffers alike. dump_tensor_source returns the
// buffer and sets *offset (in elements; N = B*T*C). LN(y) is not stored: its source is a+LN(y),
// from which the caller subtracts a (DT_A, same offset).
typedef enum {
    DF_RESX, DF_RESY, DF_LNX, DF_LNSUM, DF_BLOCKIN, DF_QKV, DF_ATTY, DF_FCH, DF_FCH_GELU, DF_BLOCKOUT,
    DF_LNFSUM, DF_LNF, DF_LOGITS, NUM_DUMP_FIELDS
} DumpField;

static inline DumpField dump_tensor_source(const DumpTensor* t, size_t N, size_t* offset) {
    size_t k = t->k < 0 ? 0 : (size_t)t->k, l = k / 2;
    *offset = k * N;
    switch (t->kind) {
        case DT_E: *offset = 0; return DF_RESX;
        case DT_A: return DF_LNX;
        case DT_LNY: case DT_S: case DT_R: return DF_LNSUM;
        case DT_U: return DF_BLOCKIN;
        case DT_QKV: *offset = l * 3 * N; return DF_QKV;
        case DT_ATTY: *offset = l * N; return DF_ATTY;
        case DT_FCH: *offset = l * 4 * N; return DF_FCH;
        case DT_FCH_GELU: *offset = l * 4 * N; return DF_FCH_GELU;
        case DT_Z: return DF_BLOCKOUT;
        case DT_X: *offset = (k + 1) * N; return DF_RESX;
        case DT_Y: *offset = (k + 1) * N; return DF_RESY;
        case DT_FINAL_S: *offset = 0; return DF_LNFSUM;
        case DT_H: *offset = 0; return DF_LNF;
        case DT_LOGITS: *offset = 0; return DF_LOGITS;
        default: fatal("dump tensor kind %d is not a forward tensor", (int)t->kind);
    }
}

// sets every list entry's ref to its place in the data (the logits in ds->logits), and every yardstick
static inline void debug_state_point(DebugState* ds) {
    float* p = ds->acts;
    const float* y = ds->yards;
    for (int i = 0; i < ds->n_fwd; i++) { ds->fwd[i].yard = y++; }
    ds->loss_yard = y++;
    for (int i = 0; i < ds->n_bwd; i++) { ds->bwd[i].yard = y++; }
    ds->grad_yards = y;
    ds->step_yards = y + NUM_PARAMETER_TENSORS;
    ds->norm_yards = ds->step_yards + ds->steps;
    for (int i = 0; i < ds->n_fwd; i++) {
        DumpTensor* t = &ds->fwd[i];
        if (t->kind == DT_LOGITS) {
            t->ref = ds->logits;
        } else {
            t->ref = p;
            p += t->rows * t->stride;
        }
    }
    p = ds->stream_grads;
    for (int i = 0; i < ds->n_bwd; i++) {
        ds->bwd[i].ref = p;
        p += ds->bwd[i].rows * ds->bwd[i].stride;
    }
}

// allocates a dump for a model of config cfg, batch (B, T) and `steps` AdamW steps (contents unset,
// but the yardsticks 0)
static inline void debug_state_alloc(DebugState* ds, const GPT2Config* cfg, size_t num_params, int B, int T, int steps) {
    memset(ds, 0, sizeof(*ds));
    ds->B = B;
    ds->T = T;
    ds->steps = steps;
    size_t BT = (size_t)B * T;
    ds->n_fwd = dump_forward_list(NULL, cfg, BT);
    ds->n_bwd = dump_backward_list(NULL, cfg, BT);
    ds->fwd = (DumpTensor*)malloc_check(ds->n_fwd * sizeof(DumpTensor), "dump tensor list");
    ds->bwd = (DumpTensor*)malloc_check(ds->n_bwd * sizeof(DumpTensor), "dump tensor list");
    dump_forward_list(ds->fwd, cfg, BT);
    dump_backward_list(ds->bwd, cfg, BT);
    for (int i = 0; i < ds->n_fwd; i++) {
        if (ds->fwd[i].kind != DT_LOGITS) { ds->acts_floats += ds->fwd[i].rows * ds->fwd[i].stride; }
    }
    for (int i = 0; i < ds->n_bwd; i++) { ds->stream_grads_floats += ds->bwd[i].rows * ds->bwd[i].stride; }
    ds->inputs = (int*)malloc_check(BT * sizeof(int), "dump inputs");
    ds->targets = (int*)malloc_check(BT * sizeof(int), "dump targets");
    ds->logits = (float*)malloc_check(BT * cfg->padded_vocab_size * sizeof(float), "dump logits");
    ds->grads = (float*)malloc_check(num_params * sizeof(float), "dump grads");
    ds->losses = (float*)malloc_check((steps + 1) * sizeof(float), "dump losses");
    ds->norms = (float*)malloc_check((steps + 1) * sizeof(float), "dump gradient norms");
    ds->acts = (float*)malloc_check(ds->acts_floats * sizeof(float), "dump activations");
    ds->stream_grads = (float*)malloc_check((ds->stream_grads_floats + 1) * sizeof(float), "dump stream gradients");
    ds->n_yards = ds->n_fwd + 1 + ds->n_bwd + NUM_PARAMETER_TENSORS + 2 * steps;
    ds->yards = (float*)calloc_check(ds->n_yards, sizeof(float), "dump yardsticks");
    debug_state_point(ds);
}

static inline float header_float(const int* header, int i) {
    float f;
    memcpy(&f, header + i, sizeof(f));
    return f;
}

// bytes of a dump with the given contents
static inline size_t debug_state_bytes(const DebugState* ds, const GPT2Config* cfg, size_t num_params) {
    size_t BT = (size_t)ds->B * ds->T;
    return 1024 + 4 * (2 * BT + BT * cfg->padded_vocab_size + 1 + num_params + 2 * ds->steps + ds->acts_floats +
                       ds->stream_grads_floats + ds->n_yards);
}

// reads a debug-state dump and checks it against the model it belongs to
static inline void debug_state_read(DebugState* ds, const char* path, const GPT2Config* cfg, size_t num_params) {
    FILE* f = fopen_check(path, "rb");
    long size = file_size_check(f, path);
    if (size < 1024) { fatal("%s: file is truncated (smaller than the header)", path); }
    int header[256];
    fread_check(header, sizeof(int), 256, f, path);
    if (header[0] != DUMP_MAGIC) { fatal("%s is not a debug-state dump (bad magic %d)", path, header[0]); }
    if (header[1] == 1) {
        fatal("%s: dump version 1 has no activations; regenerate it (python dev/train_gpt2.py --write_dumps DIR)", path);
    }
    if (header[1] == 2) {
        fatal("%s: dump version 2 has no yardsticks (PyTorch float32's errors); regenerate it (python dev/train_gpt2.py "
              "--write_dumps DIR, or ./test_gpt2 --write DIR SHAPE)", path);
    }
    if (header[1] == 3) {
        fatal("%s: dump version 3 has no gradient norms of the AdamW steps; regenerate it (python dev/train_gpt2.py "
              "--write_dumps DIR, or ./test_gpt2 --write DIR SHAPE)", path);
    }
    if (header[1] != DUMP_VERSION) { fatal("%s: unsupported dump version %d (this test reads %d)", path, header[1], DUMP_VERSION); }
    int B = header[2], T = header[3], steps = header[6];
    if (B < 1 || T < 1 || T > cfg->max_seq_len || steps < 0 || steps > 1000) {
        fatal("%s: bad sizes in header (B %d, T %d, steps %d)", path, B, T, steps);
    }
    if (header[4] != cfg->vocab_size || header[5] != cfg->padded_vocab_size || header[7] != (int)cfg->norm_mode ||
        header[10] != cfg->num_layers || header[11] != cfg->channels || header[12] != cfg->num_heads) {
        fatal("%s does not belong to its model.bin (vocab %d/%d, mode %d, L %d, C %d, NH %d)", path, header[4], header[5],
              header[7], header[10], header[11], header[12]);
    }
    debug_state_alloc(ds, cfg, num_params, B, T, steps);
    if (header[8] != ds->n_fwd - 1 || header[9] != ds->n_bwd || header[13] != ds->n_yards) {
        fatal("%s: holds %d activations, %d stream gradients and %d yardsticks, expected %d, %d and %d", path, header[8],
              header[9], header[13], ds->n_fwd - 1, ds->n_bwd, ds->n_yards);
    }
    ds->lr = header_float(header, 16);
    ds->beta1 = header_float(header, 17);
    ds->beta2 = header_float(header, 18);
    ds->eps = header_float(header, 19);
    ds->weight_decay = header_float(header, 20);
    ds->grad_clip = header_float(header, 21);
    size_t expected = debug_state_bytes(ds, cfg, num_params);
    if ((size_t)size != expected) { fatal("%s: %ld bytes, expected %zu (truncated or corrupted)", path, size, expected); }
    size_t BT = (size_t)B * T;
    fread_check(ds->inputs, sizeof(int), BT, f, path);
    fread_check(ds->targets, sizeof(int), BT, f, path);
    fread_check(ds->logits, sizeof(float), BT * cfg->padded_vocab_size, f, path);
    fread_check(&ds->loss, sizeof(float), 1, f, path);
    fread_check(ds->grads, sizeof(float), num_params, f, path);
    fread_check(ds->losses, sizeof(float), ds->steps, f, path);
    fread_check(ds->norms, sizeof(float), ds->steps, f, path);
    fread_check(ds->acts, sizeof(float), ds->acts_floats, f, path);
    fread_check(ds->stream_grads, sizeof(float), ds->stream_grads_floats, f, path);
    fread_check(ds->yards, sizeof(float), ds->n_yards, f, path);
    fclose(f);
    for (int i = 0; i < ds->n_yards; i++) {
        if (!(ds->yards[i] >= 0.0f && ds->yards[i] <= YARDSTICK_MAX)) {  // also refuses NaN
            fatal("%s: yardstick %d is %g, outside [0, %g] (corrupted, or a reference that float32 cannot follow)", path,
                  i, ds->yards[i], YARDSTICK_MAX);
        }
    }
    for (int i = 0; i < ds->steps; i++) {
        if (!(ds->norms[i] > 0.0f && isfinite(ds->norms[i]))) {  // the relative error divides by it
            fatal("%s: the gradient norm of step %d is %g, not a positive finite number (corrupted)", path, i, ds->norms[i]);
        }
    }
}

// writes a dump (temporary file, fsync, rename), in the layout debug_state_read reads
static inline void debug_state_write(const DebugState* ds, const char* path, const GPT2Config* cfg, size_t num_params) {
    int header[256];
    memset(header, 0, sizeof(header));
    int ints[14] = {DUMP_MAGIC, DUMP_VERSION, ds->B, ds->T, cfg->vocab_size, cfg->padded_vocab_size, ds->steps,
                    (int)cfg->norm_mode, ds->n_fwd - 1, ds->n_bwd, cfg->num_layers, cfg->channels, cfg->num_heads,
                    ds->n_yards};
    memcpy(header, ints, sizeof(ints));
    float hyper[6] = {ds->lr, ds->beta1, ds->beta2, ds->eps, ds->weight_decay, ds->grad_clip};
    memcpy(header + 16, hyper, sizeof(hyper));
    size_t BT = (size_t)ds->B * ds->T;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(int), 256);
    atomic_write(&af, ds->inputs, sizeof(int), BT);
    atomic_write(&af, ds->targets, sizeof(int), BT);
    atomic_write(&af, ds->logits, sizeof(float), BT * cfg->padded_vocab_size);
    atomic_write(&af, &ds->loss, sizeof(float), 1);
    atomic_write(&af, ds->grads, sizeof(float), num_params);
    atomic_write(&af, ds->losses, sizeof(float), ds->steps);
    atomic_write(&af, ds->norms, sizeof(float), ds->steps);
    atomic_write(&af, ds->acts, sizeof(float), ds->acts_floats);
    atomic_write(&af, ds->stream_grads, sizeof(float), ds->stream_grads_floats);
    atomic_write(&af, ds->yards, sizeof(float), ds->n_yards);
    atomic_commit(&af);
}

static inline void debug_state_free(DebugState* ds) {
    free(ds->inputs);
    free(ds->targets);
    free(ds->logits);
    free(ds->grads);
    free(ds->losses);
    free(ds->norms);
    free(ds->fwd);
    free(ds->bwd);
    free(ds->acts);
    free(ds->stream_grads);
    free(ds->yards);
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

// the tolerance of a number whose PyTorch float32 error is yard, with the test's floor for its kind
static inline float tolerance(float floor, float yard) { return fmaxf(floor, YARDSTICK_K * yard); }

// one number: our error, PyTorch float32's, the tolerance; returns 1 on failure
static inline int report(const char* what, float err, float yard, float floor) {
    float tol = tolerance(floor, yard);
    int ok = err <= tol;  // false for NaN
    printf("  %-10s error %.3e  torch fp32 %.1e  tol %.1e%s  %s\n", what, err, yard, tol, tol > floor ? " (10x fp32)" : "",
           ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

// our version of a dump tensor, as fp32 on the host, laid out like its reference
typedef const float* (*OursFn)(void* ctx, const DumpTensor* t);

// Compares a list of dump tensors in its order (forward or backward), one line per place, each
// tensor as its name, our error and PyTorch float32's (its yardstick):
//     layer 1 attn   a 3.1e-08/2.4e-08  LN(y) 2.9e-08/3.0e-08  a+LN(y) 3.0e-08/2.2e-08 ...
// (a FAIL after a pair marks a tensor over its tolerance, max(floor, 10 x the yardstick)), then a
// summary that names the FIRST tensor over its tolerance and the rest, and the tensors whose
// tolerance the yardstick raised above the floor. Returns the number of tensors over their tolerance.
static inline int report_tensors(const char* what, const DumpTensor* list, int n, int L, OursFn ours, void* ctx,
                                 float floor) {
    printf("  %s (error max|ours - ref| / max|ref|, ours/torch fp32; tol max(%.0e, %.0f x torch fp32)):\n", what, floor,
           YARDSTICK_K);
    int failures = 0, first = -1, worst = 0, raised = 0, loosest = 0;
    float worst_err = -1.0f;
    float* errs = (float*)malloc_check(n * sizeof(float), "tensor errors");
    char place[64], line_place[64] = "";
    for (int i = 0; i < n; i++) {
        const DumpTensor* t = &list[i];
        float err = scaled_max_error(ours(ctx, t), t->ref, t->rows, t->cols, t->stride);
        float tol = tolerance(floor, *t->yard);
        errs[i] = err;
        int ok = err <= tol;  // false for NaN
        dump_tensor_place(t, L, place, sizeof(place));
        if (strcmp(place, line_place) != 0) {
            printf("%s    %-20s", i > 0 ? "\n" : "", place);
            strcpy(line_place, place);
        }
        printf(" %s %.1e/%.1e%s", DUMP_KIND_NAMES[t->kind], err, *t->yard, ok ? "" : " FAIL");
        if (!ok) {
            failures++;
            if (first < 0) { first = i; }
        }
        if (tol > floor) {
            if (raised++ == 0 || *t->yard > *list[loosest].yard) { loosest = i; }
        }
        if (!(err <= worst_err)) { worst_err = err; worst = i; }
    }
    printf("\n");
    if (raised > 0) {
        dump_tensor_place(&list[loosest], L, place, sizeof(place));
        printf("  %s: %d of %d tolerances raised above %.0e by torch fp32's error (loosest %.1e, %s %s)\n", what, raised,
               n, floor, tolerance(floor, *list[loosest].yard), place, DUMP_KIND_NAMES[list[loosest].kind]);
    }
    if (failures == 0) {
        dump_tensor_place(&list[worst], L, place, sizeof(place));
        printf("  %s: %d tensors, worst %.1e (%s %s, torch fp32 %.1e)  ok\n", what, n, worst_err, place,
               DUMP_KIND_NAMES[list[worst].kind], *list[worst].yard);
        free(errs);
        return 0;
    }
    dump_tensor_place(&list[first], L, place, sizeof(place));
    printf("  %s: FIRST DIVERGENCE at %s %s; %d of %d tensors FAIL:", what, place, DUMP_KIND_NAMES[list[first].kind],
           failures, n);
    int named = 0;
    for (int i = first; i < n; i++) {
        const DumpTensor* t = &list[i];
        if (errs[i] <= tolerance(floor, *t->yard)) { continue; }
        if (named++ == 8) { printf(" ..."); break; }
        dump_tensor_place(t, L, place, sizeof(place));
        printf("%s %s %s", named > 1 ? "," : "", place, DUMP_KIND_NAMES[t->kind]);
    }
    printf("\n");
    free(errs);
    return failures;
}

// compares every (non-empty) gradient tensor by name, checkpoint order; returns the failures
static inline int report_gradients(const float* grads, const DebugState* ds, const size_t sizes[NUM_PARAMETER_TENSORS],
                                   float floor) {
    int failures = 0;
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = sizes[i];
        if (n > 0) {
            float err = scaled_max_error(grads + offset, ds->grads + offset, 1, n, n);
            failures += report(PARAM_NAMES[i], err, ds->grad_yards[i], floor);
        }
        offset += n;
    }
    return failures;
}

static inline void report_adamw_settings(const DebugState* ds) {
    printf("  %d AdamW steps (lr %g, betas %g %g, eps %g, wd %g, clip %g): the loss and the gradient norm (before\n"
           "  clipping) of each, ours and the reference's, error relative, ours/torch fp32:\n", ds->steps, ds->lr,
           ds->beta1, ds->beta2, ds->eps, ds->weight_decay, ds->grad_clip);
}

// one number of an AdamW step against the reference's (relative error), printed on the step's line;
// returns 1 on failure. A non-finite number of ours fails whatever the tolerance; an infinite
// floor marks a number printed, not counted.
static inline int report_step_number(const char* what, float ours, float ref, float yard, float floor) {
    if (!isfinite(ours)) {
        printf("  %s %g (ref %.6f) not finite FAIL", what, ours, ref);
        return 1;
    }
    float tol = tolerance(floor, yard), err = fabsf(ours - ref) / fabsf(ref);
    int ok = err <= tol;  // false for NaN
    printf("  %s %.6f ref %.6f error %.1e/%.1e ", what, ours, ref, err, yard);
    if (isinf(tol)) {
        printf("not counted");
    } else {
        printf("tol %.1e %s", tol, ok ? "ok" : "FAIL");
    }
    return !ok;
}

// The yardstick a step's gradient norm is held to: the largest of PyTorch float32's errors on the
// norms of this step and the steps before it. Once a float32 run has drifted from the float64 one,
// its later norms differ by about that much, but a single one can land close by chance: on
// siamese_trained, torch fp32's error on the norm is 2.7e-4 at step 5, 1.8e-6 at step 6 and 8.5e-5
// at step 7, and ours 1.9e-4, 3.8e-5 and 5.6e-5.
static inline float step_norm_yard(const DebugState* ds, int step) {
    float yard = 0.0f;
    for (int s = 0; s <= step; s++) { yard = fmaxf(yard, ds->norm_yards[s]); }
    return yard;
}

// one AdamW step: its loss and its gradient norm (before clipping) against the reference's, on one
// line; returns the failures (0 to 2)
static inline int report_step(const DebugState* ds, int step, float loss, float norm, float loss_floor, float norm_floor) {
    printf("    step %2d", step);
    int failures = report_step_number("loss", loss, ds->losses[step], ds->step_yards[step], loss_floor);
    failures += report_step_number("norm", norm, ds->norms[step], step_norm_yard(ds, step), norm_floor);
    printf("\n");
    return failures;
}

#endif // COMMON_DEBUG_STATE_H
