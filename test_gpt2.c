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

#include "common/debug_state.h"

static const float TOL_LOGITS = 5e-6f;
static const float TOL_LOSS = 1e-6f;
static const float TOL_GRADS = 1e-5f;
static const float TOL_STEP_LOSS = 2e-6f;

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
    failures += report_gradients(model.grads_memory, ds.grads, model.param_sizes, TOL_GRADS);

    // training: the same AdamW steps, with clipping, on the same batch
    report_adamw_settings(&ds);
    for (int step = 0; step < ds.steps; step++) {
        gpt2_forward(&model, ds.inputs, ds.targets, ds.B, ds.T);
        float ours = model.mean_loss;
        gpt2_zero_grad(&model);
        gpt2_backward(&model, 1.0f);
        float norm = gpt2_grad_norm(&model);
        gpt2_update(&model, ds.lr, ds.beta1, ds.beta2, ds.eps, ds.weight_decay, grad_clip_scale(norm, ds.grad_clip),
                    step + 1);
        failures += report_step_loss(step, ours, ds.losses[step], norm, TOL_STEP_LOSS);
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
        float* buf = (float*)malloc_check((3 * n_in + 3 * n_w + 3 * n_out + 3 * (size_t)OC) * sizeof(float), "matmul test");
        float *inp = buf, *w = inp + n_in, *dout = w + n_w, *out = dout + n_out, *bias = out + n_out;
        float *dinp = bias + OC, *dw = dinp + n_in, *db = dw + n_w, *ref_dinp = db + OC, *ref_dw = ref_dinp + n_in;
        float *ref_out = ref_dw + n_w, *ref_db = ref_out + n_out;
        random_normal(inp, n_in, 1.0f, &rng);
        random_normal(w, n_w, 1.0f, &rng);
        random_normal(dout, n_out, 1.0f, &rng);
        random_normal(bias, OC, 1.0f, &rng);
        random_normal(dinp, n_in, 1.0f, &rng);  // backward accumulates: start from non-zero gradients
        random_normal(dw, n_w, 1.0f, &rng);
        for (int o = 0; o < OC; o++) { db[o] = 0.5f; }
        matmul_forward(out, inp, w, bias, BT, C, OC);
        // the exact results, summed in double (the gradients on top of their starting values)
        for (int m = 0; m < BT; m++) {
            for (int o = 0; o < OC; o++) {
                double ref = bias[o];
                for (int k = 0; k < C; k++) { ref += (double)inp[(size_t)m * C + k] * w[(size_t)o * C + k]; }
                ref_out[(size_t)m * OC + o] = (float)ref;
            }
            for (int k = 0; k < C; k++) {
                double ref = dinp[(size_t)m * C + k];
                for (int o = 0; o < OC; o++) { ref += (double)dout[(size_t)m * OC + o] * w[(size_t)o * C + k]; }
                ref_dinp[(size_t)m * C + k] = (float)ref;
            }
        }
        for (int o = 0; o < OC; o++) {
            double refb = db[o];
            for (int m = 0; m < BT; m++) { refb += dout[(size_t)m * OC + o]; }
            ref_db[o] = (float)refb;
            for (int k = 0; k < C; k++) {
                double ref = dw[(size_t)o * C + k];
                for (int m = 0; m < BT; m++) { ref += (double)dout[(size_t)m * OC + o] * inp[(size_t)m * C + k]; }
                ref_dw[(size_t)o * C + k] = (float)ref;
            }
        }
        matmul_backward(dinp, dw, db, dout, inp, w, BT, C, OC);
        // errors are max|ours - exact| / max|exact| over each tensor, as for the gradients below
        float err_out = scaled_max_error(out, ref_out, 1, n_out, n_out);
        float err_dinp = scaled_max_error(dinp, ref_dinp, 1, n_in, n_in);
        float err_dw = scaled_max_error(dw, ref_dw, 1, n_w, n_w);
        float err_db = scaled_max_error(db, ref_db, 1, OC, OC);
        // fp32 sums of up to 1000 terms: the largest error seen is 1.2e-6; a wrong tile edge or k
        // block gives errors of order 1
        float worst = fmaxf(fmaxf(err_out, err_dinp), fmaxf(err_dw, err_db));
        int ok = worst <= TOL_GRADS;  // false for NaN
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
