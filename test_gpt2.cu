/*
test_gpt2.cu: checks train_gpt2.cu against PyTorch, for every norm mode (the GPU twin of test_gpt2.c).

It reads the same dumps as test_gpt2.c, <dumps>/<mode>/{model.bin, debug_state.bin} (made by
`python dev/train_gpt2.py --write_dumps`), runs forward and backward on the stored batch, compares
the logits, the loss and every gradient tensor by name, then takes the same AdamW steps (with
clipping) and compares the losses. It also runs forward and backward twice and requires
bit-identical gradients (no kernel uses atomics). Every mode runs twice: with the fused GELU
epilogues of cuBLASLt, then with the separate GELU kernels (so a failure points at one). Errors are max|ours - torch| / max|torch| per tensor
(common/debug_state.h), relative errors for the losses.

Tolerances. These are EXPECTATIONS, not yet measured: this file has only been compiled, never run
on a GPU. Adjust them (to about 10x the largest error seen) once it has run.
    BF16 build (bf16 activations and weights, fp32 master weights/grads/statistics):
        logits 2e-2, loss 5e-3, gradients 1e-1, step losses 2e-2
    FP32 build (make test_gpt2cu PRECISION=FP32: fp32 everywhere, no TF32; only the order of
    summation differs from PyTorch):
        logits 1e-5, loss 1e-5, gradients 1e-4, step losses 1e-5

Without a usable CUDA device it prints "test_gpt2cu: skipped: ..." and exits 0 (that is what CI
without a GPU sees). Usage: ./test_gpt2cu [dump folder]  (default data/test).
*/
#define TESTING
#include "train_gpt2.cu"

#include "common/debug_state.h"

#ifdef ENABLE_FP32
static const float TOL_LOGITS = 1e-5f;
static const float TOL_LOSS = 1e-5f;
static const float TOL_GRADS = 1e-4f;
static const float TOL_STEP_LOSS = 1e-5f;
#else
static const float TOL_LOGITS = 2e-2f;
static const float TOL_LOSS = 5e-3f;
static const float TOL_GRADS = 1e-1f;
static const float TOL_STEP_LOSS = 2e-2f;
#endif

// the logits of the last forward pass, as fp32 on the host
static void download_logits(float* out, const GPT2* m, size_t count) {
    floatX* tmp = (floatX*)malloc_check(count * sizeof(floatX), "logits copy");
    cudaCheck(cudaMemcpy(tmp, m->ax.logits, count * sizeof(floatX), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i++) { out[i] = (float)tmp[i]; }
    free(tmp);
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
    printf("[%s] L %d C %d NH %d V %d/%d | B %d T %d | %zu parameters | %s\n", mode_name, cfg->num_layers,
           cfg->channels, cfg->num_heads, cfg->vocab_size, cfg->padded_vocab_size, ds.B, ds.T, model.num_parameters,
           PRECISION_NAME);
    gpt2_allocate(&model, ds.B, ds.T);
    int failures = 0;
    size_t BT = (size_t)ds.B * ds.T, Vp = cfg->padded_vocab_size;

    // forward: logits (the V real entries of each row) and loss
    gpt2_forward(&model, ds.inputs, ds.targets, ds.B, ds.T);
    float* logits = (float*)malloc_check(BT * Vp * sizeof(float), "logits");
    download_logits(logits, &model, BT * Vp);
    failures += report("logits", scaled_max_error(logits, ds.logits, BT, cfg->vocab_size, Vp), TOL_LOGITS);
    failures += report("loss", fabsf(model.mean_loss - ds.loss) / fabsf(ds.loss), TOL_LOSS);
    printf("  loss: ours %.7f torch %.7f\n", model.mean_loss, ds.loss);
    free(logits);

    // backward: every gradient tensor by name
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1.0f);
    float* grads = (float*)malloc_check(model.num_parameters * sizeof(float), "gradients");
    cudaCheck(cudaMemcpy(grads, model.grads_memory, model.num_parameters * sizeof(float), cudaMemcpyDeviceToHost));
    failures += report_gradients(grads, ds.grads, model.param_sizes, TOL_GRADS);

    // determinism: the same forward and backward again must give bit-identical gradients (no atomics)
    float* again = (float*)malloc_check(model.num_parameters * sizeof(float), "gradients");
    gpt2_forward(&model, ds.inputs, ds.targets, ds.B, ds.T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1.0f);
    cudaCheck(cudaMemcpy(again, model.grads_memory, model.num_parameters * sizeof(float), cudaMemcpyDeviceToHost));
    int same = memcmp(grads, again, model.num_parameters * sizeof(float)) == 0;
    printf("  %-10s %s\n", "repeat", same ? "bit-identical gradients  ok" : "gradients differ between two runs  FAIL");
    failures += !same;
    free(again);
    free(grads);

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
    cudaCheck(cudaDeviceSynchronize());
    debug_state_free(&ds);
    gpt2_free(&model);
    return failures;
}

int main(int argc, char** argv) {
    const char* dir = argc > 1 ? argv[1] : "data/test";
    if (argc > 2) { fatal("usage: %s [dump folder]", argv[0]); }
    char device[512];
    if (!cuda_device_usable(device, sizeof(device))) {
        printf("test_gpt2cu: skipped: %s\n", device);
        return 0;
    }
    cudaCheck(cudaSetDevice(0));
    cuda_setup();
    printf("device: %s | precision %s\n", device, PRECISION_NAME);
    int failures = 0;
    // every mode twice: with cuBLASLt's fused GELU epilogues (when offered), then with the GELU kernels
    for (int pass = 0; pass < 2; pass++) {
        gelu_fusion = pass == 0 ? -1 : 0;
        const char* how = pass == 0 && gelu_fusion_enabled() ? "GELU fused in cuBLASLt where offered" : "GELU kernels";
        for (int mode = 0; mode < NUM_NORM_MODES; mode++) {
            int f = test_mode(dir, NORM_MODE_NAMES[mode]);
            printf("[%s] (%s) %s\n", NORM_MODE_NAMES[mode], how, f == 0 ? "PASSED" : "FAILED");
            failures += f;
        }
    }
    printf(failures == 0 ? "all checks passed\n" : "%d checks FAILED\n", failures);
    return failures == 0 ? 0 : 1;
}
