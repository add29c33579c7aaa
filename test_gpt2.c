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

int main(int argc, char** argv) {
    const char* dir = argc > 1 ? argv[1] : "data/test";
    if (argc > 2) { fatal("usage: %s [dump folder]", argv[0]); }
    int failures = 0;
    for (int mode = 0; mode < NUM_NORM_MODES; mode++) {
        int f = test_mode(dir, NORM_MODE_NAMES[mode]);
        printf("[%s] %s\n", NORM_MODE_NAMES[mode], f == 0 ? "PASSED" : "FAILED");
        failures += f;
    }
    printf(failures == 0 ? "all checks passed\n" : "%d checks FAILED\n", failures);
    return failures == 0 ? 0 : 1;
}
