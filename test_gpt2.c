/*
test_gpt2.c: checks train_gpt2.c against PyTorch, for every norm mode.

For each folder <dumps>/<mode> (pre, post, siamese), made by `python dev/train_gpt2.py --write_dumps`:
    model.bin         a tiny model (L=3, C=32, NH=2, V=200 padded to 256) in the checkpoint format
    debug_state.bin   a batch, PyTorch's logits, loss and the gradient of every parameter tensor,
                      and the losses of 10 AdamW steps (with clipping) on that batch
it loads the checkpoint, runs forward and backward on the stored batch, compares the logits, the
loss and every gradient tensor by name, then takes the same 10 AdamW steps and compares the losses.

Errors are measured per tensor as max|ours - torch| / max|torch| (the largest error relative to the
tensor's scale). Tolerances, for fp32 on both sides (summation order is the only difference), are
about 10x the largest error seen (logits 3e-7, gradients 1.1e-6, step losses 1.9e-7):
    logits 5e-6, loss 1e-6 (relative), gradients 1e-5, step losses 2e-6 (relative).

Usage: ./test_gpt2 [dump folder]   (default data/test). Exit status 0 only if everything passes.
*/
#define TESTING
#include "train_gpt2.c"

#define DUMP_MAGIC 20260209
#define DUMP_VERSION 1

static const float TOL_LOGITS = 5e-6f;
static const float TOL_LOSS = 1e-6f;
static const float TOL_GRADS = 1e-5f;
static const float TOL_STEP_LOSS = 2e-6f;

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

static float header_float(const int* header, int i) {
    float f;
    memcpy(&f, header + i, sizeof(f));
    return f;
}

// reads a debug-state dump and checks it against the model it belongs to
static void debug_state_read(DebugState* ds, const char* path, const GPT2Config* cfg, size_t num_params) {
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

static void debug_state_free(DebugState* ds) {
    free(ds->inputs);
    free(ds->targets);
    free(ds->logits);
    free(ds->grads);
    free(ds->losses);
}

// max|got - ref| / max|ref| over n floats with stride handling for (rows, used of stride) layouts
static float scaled_max_error(const float* got, const float* ref, size_t rows, size_t used, size_t stride) {
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

static int report(const char* what, float err, float tol) {
    int ok = err <= tol;  // false for NaN
    printf("  %-10s error %.3e  (tol %.0e)  %s\n", what, err, tol, ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
}

// runs every check for one norm mode; returns the number of failures
static int test_mode(const char* dir, const char* mode_name) {
    char model_path[1100], state_path[1100];
    snprintf(model_path, sizeof(model_path), "%s/%s/model.bin", dir, mode_name);
    snprintf(state_path, sizeof(state_path), "%s/%s/debug_state.bin", dir, mode_name);
    GPT2 model;
    gpt2_build_from_checkpoint(&model, model_path);
    const GPT2Config* cfg = &model.config;
    if (strcmp(NORM_MODE_NAMES[cfg->norm_mode], mode_name) != 0) {
        fatal("%s holds a %s model, expected %s", model_path, NORM_MODE_NAMES[cfg->norm_mode], mode_name);
    }
    DebugState ds;
    debug_state_read(&ds, state_path, cfg, model.num_parameters);
    printf("[%s] L %d C %d NH %d V %d/%d | B %d T %d | %zu parameters\n", mode_name, cfg->num_layers, cfg->channels,
           cfg->num_heads, cfg->vocab_size, cfg->padded_vocab_size, ds.B, ds.T, model.num_parameters);
    gpt2_allocate(&model, ds.B, ds.T);
    int failures = 0;
    size_t BT = (size_t)ds.B * ds.T;

    // forward: logits (the V real entries of each row) and loss
    gpt2_forward(&model, ds.inputs, ds.targets, ds.B, ds.T);
    failures += report("logits", scaled_max_error(model.acts.logits, ds.logits, BT, cfg->vocab_size,
                                                  cfg->padded_vocab_size), TOL_LOGITS);
    failures += report("loss", fabsf(model.mean_loss - ds.loss) / fabsf(ds.loss), TOL_LOSS);
    printf("  loss: ours %.7f torch %.7f\n", model.mean_loss, ds.loss);

    // backward: every gradient tensor by name
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1.0f);
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = model.param_sizes[i];
        if (n > 0) {
            failures += report(PARAM_NAMES[i], scaled_max_error(model.grads_memory + offset, ds.grads + offset, 1, n, n), TOL_GRADS);
        }
        offset += n;
    }

    // training: the same AdamW steps, with clipping, on the same batch
    printf("  %d AdamW steps (lr %g, betas %g %g, eps %g, wd %g, clip %g):\n", ds.steps, ds.lr, ds.beta1, ds.beta2,
           ds.eps, ds.weight_decay, ds.grad_clip);
    for (int step = 0; step < ds.steps; step++) {
        gpt2_forward(&model, ds.inputs, ds.targets, ds.B, ds.T);
        float ours = model.mean_loss;
        gpt2_zero_grad(&model);
        gpt2_backward(&model, 1.0f);
        float norm = gpt2_grad_norm(&model);
        gpt2_update(&model, ds.lr, ds.beta1, ds.beta2, ds.eps, ds.weight_decay, grad_clip_scale(norm, ds.grad_clip),
                    step + 1);
        float err = fabsf(ours - ds.losses[step]) / fabsf(ds.losses[step]);
        int ok = err <= TOL_STEP_LOSS;
        printf("    step %2d loss ours %.6f torch %.6f | norm %.4f | error %.2e %s\n", step, ours, ds.losses[step], norm,
               err, ok ? "ok" : "FAIL");
        failures += !ok;
    }
    debug_state_free(&ds);
    gpt2_free(&model);
    return failures;
}

// The blocked matmul kernels against a plain double-precision loop, on shapes that hit every edge
// of their tiling (rows and columns that are not multiples of the tile, k not a multiple of the
// vector width, several k blocks). The dumps' tiny model alone would not reach all of these.
static int test_matmul_kernels(void) {
    const int shapes[][3] = {{1, 16, 16}, {13, 40, 70}, {7, 32, 300}, {100, 96, 200}, {37, 333, 129}, {256, 64, 1000}};
    int failures = 0;
    uint64_t rng = 42;
    printf("[matmul] blocked kernels vs a plain loop:\n");
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int BT = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        size_t n_in = (size_t)BT * C, n_w = (size_t)OC * C, n_out = (size_t)BT * OC;
        float* buf = (float*)malloc_check((3 * n_in + 3 * n_w + 2 * n_out + 2 * (size_t)OC) * sizeof(float), "matmul test");
        float *inp = buf, *w = inp + n_in, *dout = w + n_w, *out = dout + n_out, *bias = out + n_out;
        float *dinp = bias + OC, *dw = dinp + n_in, *db = dw + n_w, *ref_dinp = db + OC, *ref_dw = ref_dinp + n_in;
        random_normal(inp, n_in, 1.0f, &rng);
        random_normal(w, n_w, 1.0f, &rng);
        random_normal(dout, n_out, 1.0f, &rng);
        random_normal(bias, OC, 1.0f, &rng);
        random_normal(dinp, n_in, 1.0f, &rng);  // backward accumulates: start from non-zero gradients
        random_normal(dw, n_w, 1.0f, &rng);
        memcpy(ref_dinp, dinp, n_in * sizeof(float));
        memcpy(ref_dw, dw, n_w * sizeof(float));
        for (int o = 0; o < OC; o++) { db[o] = 0.5f; }
        matmul_forward(out, inp, w, bias, BT, C, OC);
        matmul_backward(dinp, dw, db, dout, inp, w, BT, C, OC);
        // errors are max|ours - exact| / max|exact| over each tensor, as for the gradients below
        double err_out = 0.0, err_dinp = 0.0, err_dw = 0.0, err_db = 0.0;
        double max_out = 0.0, max_dinp = 0.0, max_dw = 0.0, max_db = 0.0;
        for (int m = 0; m < BT; m++) {
            for (int o = 0; o < OC; o++) {
                double ref = bias[o];
                for (int k = 0; k < C; k++) { ref += (double)inp[(size_t)m * C + k] * w[(size_t)o * C + k]; }
                err_out = fmax(err_out, fabs(out[(size_t)m * OC + o] - ref));
                max_out = fmax(max_out, fabs(ref));
            }
            for (int k = 0; k < C; k++) {
                double ref = ref_dinp[(size_t)m * C + k];
                for (int o = 0; o < OC; o++) { ref += (double)dout[(size_t)m * OC + o] * w[(size_t)o * C + k]; }
                err_dinp = fmax(err_dinp, fabs(dinp[(size_t)m * C + k] - ref));
                max_dinp = fmax(max_dinp, fabs(ref));
            }
        }
        for (int o = 0; o < OC; o++) {
            double refb = 0.5;
            for (int m = 0; m < BT; m++) { refb += dout[(size_t)m * OC + o]; }
            err_db = fmax(err_db, fabs(db[o] - refb));
            max_db = fmax(max_db, fabs(refb));
            for (int k = 0; k < C; k++) {
                double ref = ref_dw[(size_t)o * C + k];
                for (int m = 0; m < BT; m++) { ref += (double)dout[(size_t)m * OC + o] * inp[(size_t)m * C + k]; }
                err_dw = fmax(err_dw, fabs(dw[(size_t)o * C + k] - ref));
                max_dw = fmax(max_dw, fabs(ref));
            }
        }
        err_out /= max_out;
        err_dinp /= max_dinp;
        err_dw /= max_dw;
        err_db /= max_db;
        // fp32 sums of up to 1000 terms: the largest error seen is 1.2e-6; a wrong tile edge or k
        // block gives errors of order 1
        double worst = fmax(fmax(err_out, err_dinp), fmax(err_dw, err_db));
        int ok = worst <= TOL_GRADS;
        printf("  BT %3d C %3d OC %4d: out %.1e dinp %.1e dweight %.1e dbias %.1e  %s\n", BT, C, OC, err_out, err_dinp,
               err_dw, err_db, ok ? "ok" : "FAIL");
        failures += !ok;
        free(buf);
    }
    return failures;
}

int main(int argc, char** argv) {
    const char* dir = argc > 1 ? argv[1] : "data/test";
    if (argc > 2) { fatal("usage: %s [dump folder]", argv[0]); }
    int failures = test_matmul_kernels();
    for (int mode = 0; mode < NUM_NORM_MODES; mode++) {
        int f = test_mode(dir, NORM_MODE_NAMES[mode]);
        printf("[%s] %s\n", NORM_MODE_NAMES[mode], f == 0 ? "PASSED" : "FAILED");
        failures += f;
    }
    printf(failures == 0 ? "all checks passed\n" : "%d checks FAILED\n", failures);
    return failures == 0 ? 0 : 1;
}
