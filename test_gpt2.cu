/*
test_gpt2.cu: checks train_gpt2.cu against reference dumps, for every norm mode, layer by layer (the
GPU twin of test_gpt2.c).

It reads the same dumps as test_gpt2.c, <dumps>/<mode>/{model.bin, debug_state.bin}: the stored
PyTorch ones (data/test, tiny: C=32, T=32) or reference dumps the CPU trainer writes at realistic
shapes, e.g.
    ./test_gpt2 --write /tmp/ref_gpt2 gpt2 && ./test_gpt2cu /tmp/ref_gpt2     C 768, NH 12, T 1024, V 50257
    ./test_gpt2 --write /tmp/ref_odd odd && ./test_gpt2cu /tmp/ref_odd        C 200, NH 5, T 80, V 301
It runs forward on the stored batch without targets and compares every activation in forward order
(the logits last), naming the first one over the tolerance (layer, sublayer, tensor) and then the
rest; runs forward with targets, which leaves dL/dlogits in place of the logits (the fused
classifier), and compares the loss, and dlogits against softmax minus one-hot over B*T computed in
double from the logits of the first pass; runs backward and compares the stream gradients dx, dy
at every sublayer boundary (backward order) and every parameter gradient by name; then takes the
same AdamW steps (with clipping) and compares the loss and the global gradient norm (before
clipping) of each, on the step's line (the norm on its own: AdamW is nearly blind to the
gradient's scale, so a wrong clip barely moves the losses). It also runs forward and backward
again with the loss scale 1/2 and requires gradients bit-identical to half the first ones (no
kernel uses atomics, and the scale is exact: every operation of the backward pass is linear in the
loss). Every mode runs with cuBLASLt's fused GELU backward epilogue and with the GELU kernel in
its place (so a failure points at one). Errors are max|ours - ref| / max|ref| per tensor
(common/debug_state.h), relative errors for the losses; a number passes within max(tolerance below,
10 x PyTorch float32's error on it), as in test_gpt2.c. It also checks <dumps>/siamese_trained
when present (data/test has it).

Tolerances. A number passes within max(floor, 10 x PyTorch float32's error on it), as in
test_gpt2.c; the floors below are per build.
    FP32 build (make test_gpt2cu PRECISION=FP32: fp32 everywhere, no TF32; the CPU trainer's fp32
    errors against the float64 references are about 1e-6):
        activations 2e-5, loss 1e-5, stream and parameter gradients 1e-4, step losses 1e-5,
        step gradient norms 1e-5 (largest measured through the layer 8.2e-8, as the CPU trainer's;
        on an H100 7.8e-7: a GPU's GEMM rounding enters the norm averaged over all gradients).
        Largest errors measured on an H100 (data/test and the two shapes of dev/gpu_check.sh's
        test_shapes, every mode, both GELU paths): activations 1.9e-6, loss 9.0e-8, stream
        gradients 3.6e-6, parameter gradients 1.7e-5, step losses 7.2e-7, dlogits 5.2e-8
    BF16 build (bf16 activations and weights, fp32 master weights/grads/statistics). PyTorch
    float32's error says nothing about bf16 rounding, so the floors come from the errors of this
    build measured through the CPU execution layer (tests/cudacpu, whose GEMM is exact: what it
    measures is the rounding at our bf16 storage points) on data/test, both GELU paths, with a
    margin of about 3x for a GPU's own rounding:
        activations 3e-2 (largest measured 1.2e-2), loss 1e-3 (3.3e-4), stream and parameter
        gradients 4e-2 (1.3e-2), step losses 1e-3 (1.2e-4); step gradient norms 3e-2, about 10x
        the largest measured (2.6e-3, siamese_trained step 0; 1.9e-3 on the untrained dumps).
        Largest errors measured on an H100 (as for FP32 above), each under its floor: activations
        1.4e-2 (odd dumps, post, final h), loss 3.8e-4, stream gradients 1.1e-2, parameter
        gradients 1.5e-2, step losses 3.8e-4 (siamese_trained step 0: the loss above), step
        gradient norms 2.5e-3, dlogits 2.4e-3
    dlogits are checked against a reference computed from our own logits, so the floors are those
    of the classifier alone: FP32 1e-6 (measured 3.0e-8, 5.2e-8 on an H100: a few roundings of
    fp32, and a GPU's expf differs from the host's by an ulp or two), BF16 8e-3 (one rounding to
    bf16, 2^-9 relative to the entry, here relative to the largest entry: measured 2.0e-3, 2.4e-3
    on an H100).
    Some numbers a bf16 computation cannot determine at all: in a trained model (siamese_trained)
    most gradients are small differences of much larger terms, and rounding those terms to bf16
    leaves an error of the order of the gradient itself (measured through the layer: 25 of 28
    parameter gradients with errors 0.2 to 5.3 of their max|ref|, stream gradients up to 0.16).
    A bf16 build's error on a number is estimated as PyTorch float32's error on it scaled by the
    ratio of the two unit roundoffs (2^-8 / 2^-24 = 2^16); where that estimate exceeds 0.1 (all of
    the above, none of the numbers of the untrained dumps), the number is printed but not counted,
    and so are the step losses and norms after the first AdamW step of a dump with such gradients
    (the update follows the gradient's direction). What a trained model's bf16 gradients can be
    checked for, the FP32 build checks against the same dump.
Without a usable CUDA device it prints "./test_gpt2cu (bf16): skipped: ..." and exits 0 (that is
what CI without a GPU sees). TRAIN_GPT2CU_SYNC_CHECK=1 waits for the GPU after every launch, so a
kernel fault names the launch at fault (cuda_common.cuh). Usage: ./test_gpt2cu [dump folder]
(default data/test).
*/
#define TESTING
#include "train_gpt2.cu"

#include "common/debug_state.h"
#include "common/train_loop.h"  // grad_clip_scale

// the global L2 norm of all gradients and an AdamW step of all parameters (the trainer works on
// ranges: a rank's shard)
static float gpt2_grad_norm(GPT2* m) { return (float)sqrt(gpt2_grad_sumsq(m, 0, m->num_parameters)); }
static void gpt2_update(GPT2* m, float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                        int t) {
    gpt2_update_range(m, lr, beta1, beta2, eps, weight_decay, grad_scale, t, 0, m->num_parameters);
}

#ifdef ENABLE_FP32
static const float TOL_ACTS = 2e-5f;
static const float TOL_LOSS = 1e-5f;
static const float TOL_GRADS = 1e-4f;
static const float TOL_STEP_LOSS = 1e-5f;
static const float TOL_STEP_NORM = 1e-5f;  // largest measured: layer 8.2e-8, H100 7.8e-7 (header)
static const float TOL_DLOGITS = 1e-6f;
#else
static const float TOL_ACTS = 3e-2f;
static const float TOL_LOSS = 1e-3f;
static const float TOL_GRADS = 4e-2f;
static const float TOL_STEP_LOSS = 1e-3f;  // the step-0 loss is the loss above: the same floor
static const float TOL_STEP_NORM = 3e-2f;  // largest measured through the layer 2.6e-3 (header)
static const float TOL_DLOGITS = 8e-3f;
#endif

// Can this build determine a number whose PyTorch float32 error is `yard`? Always in FP32; in BF16
// only where the scaled estimate of a bf16 computation's error, yard x 2^16, is at most 0.1 (see
// the header comment).
static int determinable(float yard) {
#ifdef ENABLE_FP32
    (void)yard;
    return 1;
#else
    return yard * 65536.0f <= 0.1f;
#endif
}
#define NOT_DETERMINABLE "not determinable in " PRECISION_NAME ": printed, not counted"

// report_tensors over the determinable tensors of a list, then, printed only, over the others
static int report_tensors_determinable(const char* what, const DumpTensor* list, int n, int L, OursFn ours, void* ctx,
                                       float floor, int* undetermined) {
    DumpTensor* sure = (DumpTensor*)malloc_check((n + 1) * sizeof(DumpTensor), "tensor list");
    DumpTensor* unsure = (DumpTensor*)malloc_check((n + 1) * sizeof(DumpTensor), "tensor list");
    int ns = 0, nu = 0;
    for (int i = 0; i < n; i++) {
        if (determinable(*list[i].yard)) { sure[ns++] = list[i]; } else { unsure[nu++] = list[i]; }
    }
    int failures = ns > 0 ? report_tensors(what, sure, ns, L, ours, ctx, floor) : 0;
    if (nu > 0) {
        char label[128];
        snprintf(label, sizeof(label), "%s, %d tensors %s", what, nu, NOT_DETERMINABLE);
        report_tensors(label, unsure, nu, L, ours, ctx, INFINITY);
    }
    *undetermined += nu;
    free(sure);
    free(unsure);
    return failures;
}

// one number through report() where it is determinable, else printed only
static int report_determinable(const char* what, float err, float yard, float floor, int* undetermined) {
    if (determinable(yard)) { return report(what, err, yard, floor); }
    printf("  %-10s error %.3e  torch fp32 %.1e  %s\n", what, err, yard, NOT_DETERMINABLE);
    (*undetermined)++;
    return 0;
}

// ----------------------------------------------------------------------------
// our tensors, by dump kind (common/debug_state.h), downloaded to the host as fp32

typedef struct {
    GPT2* m;
    float* host;      // the tensor last asked for
    float* host2;     // scratch for LN(y) = (a + LN(y)) - a
    floatX* hostx;    // the floatX download
    float* captured;  // (2L + 1, 2, B, T, C) dx and dy at every boundary, from the backward hook
} GpuTensors;

static void download(float* out, floatX* tmp, const floatX* src, size_t count) {
    cudaCheck(cudaMemcpy(tmp, src, count * sizeof(floatX), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; i++) { out[i] = (float)tmp[i]; }
}

static const float* gpu_tensor(void* ctx, const DumpTensor* t) {
    GpuTensors* gt = (GpuTensors*)ctx;
    const ActivationTensors* acts = &gt->m->acts;
    size_t N = (size_t)gt->m->cur_B * gt->m->cur_T * gt->m->config.channels, k = (size_t)t->k;
    if (t->kind == DT_DX) { return gt->captured + 2 * k * N; }
    if (t->kind == DT_DY) { return gt->captured + (2 * k + 1) * N; }
    const floatX* fields[NUM_DUMP_FIELDS] = {acts->resx, acts->resy, acts->lnx, acts->lnsum, acts->blockin, acts->qkv, acts->atty,
                                             acts->fch, acts->fch_gelu, acts->blockout, acts->lnfsum, acts->lnf, acts->logits};
    size_t offset, count = t->rows * t->stride;
    download(gt->host, gt->hostx, fields[dump_tensor_source(t, N, &offset)] + offset, count);
    if (t->kind == DT_LNY) {
        download(gt->host2, gt->hostx, acts->lnx + offset, count);
        for (size_t i = 0; i < count; i++) { gt->host[i] -= gt->host2[i]; }
    }
    return gt->host;
}

static void capture_stream_grads(void* ctx, int boundary, const float* dx, const float* dy) {
    GpuTensors* gt = (GpuTensors*)ctx;
    size_t N = (size_t)gt->m->cur_B * gt->m->cur_T * gt->m->config.channels;
    cudaCheck(cudaMemcpy(gt->captured + 2 * boundary * N, dx, N * sizeof(float), cudaMemcpyDeviceToHost));
    if (dy) { cudaCheck(cudaMemcpy(gt->captured + (2 * boundary + 1) * N, dy, N * sizeof(float), cudaMemcpyDeviceToHost)); }
}

static void gpu_tensors_init(GpuTensors* gt, GPT2* m) {
    size_t BT = (size_t)m->batch_size * m->seq_len, C = m->config.channels, Vp = m->config.padded_vocab_size;
    size_t largest = BT * (Vp > 4 * C ? Vp : 4 * C);
    gt->m = m;
    gt->host = (float*)malloc_check(largest * sizeof(float), "tensor download");
    gt->host2 = (float*)malloc_check(BT * C * sizeof(float), "tensor download");
    gt->hostx = (floatX*)malloc_check(largest * sizeof(floatX), "tensor download");
    gt->captured = (float*)calloc_check((2 * (size_t)m->config.num_layers + 1) * 2 * BT * C, sizeof(float), "stream gradients");
    m->stream_grad_hook = capture_stream_grads;
    m->stream_grad_ctx = gt;
}

static void gpu_tensors_free(GpuTensors* gt) {
    free(gt->host);
    free(gt->host2);
    free(gt->hostx);
    free(gt->captured);
}

// dL/dlogits as the forward pass with targets left them, against (softmax - one-hot) / BT
// computed in double from `logits` (ours, of a forward pass without targets on the same batch):
// max|ours - ref| / max|ref| over all rows, padding included (there ref = 0)
static float dlogits_error(GpuTensors* gt, const float* logits, const int* targets) {
    GPT2* m = gt->m;
    size_t BT = (size_t)m->cur_B * m->cur_T, V = m->config.vocab_size, Vp = m->config.padded_vocab_size;
    download(gt->host, gt->hostx, m->acts.logits, BT * Vp);
    double worst = 0.0, scale = 0.0;
    for (size_t r = 0; r < BT; r++) {
        const float* l = logits + r * Vp;
        double mx = -INFINITY, sum = 0.0;
        for (size_t i = 0; i < V; i++) { mx = fmax(mx, l[i]); }
        for (size_t i = 0; i < V; i++) { sum += exp(l[i] - mx); }
        for (size_t i = 0; i < Vp; i++) {
            double ref = i < V ? exp(l[i] - mx) / sum : 0.0;
            ref = (ref - (i == (size_t)targets[r] ? 1.0 : 0.0)) / BT;
            worst = fmax(worst, fabs(gt->host[r * Vp + i] - ref));  // fmax drops a NaN: count it below
            if (isnan(gt->host[r * Vp + i])) { worst = INFINITY; }
            scale = fmax(scale, fabs(ref));
        }
    }
    return (float)(worst / scale);
}

// ----------------------------------------------------------------------------
// the check

// runs every check on one dump folder, whose model must be of norm mode `mode`; returns the failures
static int test_mode(const char* dir, const char* folder, NormMode mode) {
    char model_path[1100], state_path[1100];
    snprintf(model_path, sizeof(model_path), "%s/%s/model.bin", dir, folder);
    snprintf(state_path, sizeof(state_path), "%s/%s/debug_state.bin", dir, folder);
    GPT2 model;
    gpt2_build_from_checkpoint(&model, model_path);
    gpt2_upload_params(&model);
    const GPT2Config* cfg = &model.config;
    if (cfg->norm_mode != mode) {
        fatal("%s holds a %s model, expected %s", model_path, NORM_MODE_NAMES[cfg->norm_mode], NORM_MODE_NAMES[mode]);
    }
    DebugState ds;
    debug_state_read(&ds, state_path, cfg, model.num_parameters);
    printf("[%s] L %d C %d NH %d V %d/%d | B %d T %d | %zu parameters | %s\n", folder, cfg->num_layers,
           cfg->channels, cfg->num_heads, cfg->vocab_size, cfg->padded_vocab_size, ds.B, ds.T, model.num_parameters,
           PRECISION_NAME);
    gpt2_allocate(&model, ds.B, ds.T);
    GpuTensors gt;
    gpu_tensors_init(&gt, &model);
    int failures = 0, L = cfg->num_layers;

    // forward without targets: every activation in forward order (the logits last); then with
    // targets: the loss, and dlogits (written over the logits) against ours of the first pass
    gpt2_forward(&model, ds.inputs, NULL, ds.B, ds.T);
    int undetermined = 0;  // numbers this build cannot determine (see determinable)
    failures += report_tensors_determinable("forward", ds.fwd, ds.n_fwd, L, gpu_tensor, &gt, TOL_ACTS, &undetermined);
    size_t n_logits = (size_t)ds.B * ds.T * cfg->padded_vocab_size;
    float* logits = (float*)malloc_check(n_logits * sizeof(float), "logits");
    download(logits, gt.hostx, model.acts.logits, n_logits);
    gpt2_forward(&model, ds.inputs, ds.targets, ds.B, ds.T);
    failures += report_determinable("loss", fabsf(model.mean_loss - ds.loss) / fabsf(ds.loss), *ds.loss_yard, TOL_LOSS,
                                    &undetermined);
    printf("  loss: ours %.7f ref %.7f\n", model.mean_loss, ds.loss);
    failures += report("dlogits", dlogits_error(&gt, logits, ds.targets), 0.0f, TOL_DLOGITS);
    free(logits);

    // backward: the stream gradients in backward order, then every parameter gradient by name
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1.0f);
    failures += report_tensors_determinable("backward", ds.bwd, ds.n_bwd, L, gpu_tensor, &gt, TOL_GRADS, &undetermined);
    model.stream_grad_hook = NULL;
    float* grads = (float*)malloc_check(model.num_parameters * sizeof(float), "gradients");
    cudaCheck(cudaMemcpy(grads, model.grads_memory, model.num_parameters * sizeof(float), cudaMemcpyDeviceToHost));
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {  // report_gradients, tensor by tensor
        size_t n = model.param_sizes[i];
        if (n > 0) {
            float err = scaled_max_error(grads + offset, ds.grads + offset, 1, n, n);
            failures += report_determinable(PARAM_NAMES[i], err, ds.grad_yards[i], TOL_GRADS, &undetermined);
        }
        offset += n;
    }

    // determinism and the loss scale: the same forward and backward again, at loss scale 1/2, must
    // give exactly half the gradients, bit for bit (no atomics; halving is exact in every operation)
    float* again = (float*)malloc_check(model.num_parameters * sizeof(float), "gradients");
    gpt2_forward(&model, ds.inputs, ds.targets, ds.B, ds.T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 0.5f);
    cudaCheck(cudaMemcpy(again, model.grads_memory, model.num_parameters * sizeof(float), cudaMemcpyDeviceToHost));
    size_t differ = 0;
    for (size_t i = 0; i < model.num_parameters; i++) {
        float half = 0.5f * grads[i];
        differ += memcmp(&half, &again[i], sizeof(float)) != 0;
    }
    printf("  %-10s %s", "repeat", differ == 0 ? "loss scale 1/2: bit-identical to half the gradients  ok\n" : "");
    if (differ > 0) { printf("loss scale 1/2: %zu gradients are not half the first run's  FAIL\n", differ); }
    failures += differ > 0;
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
        // after an update from gradients this build cannot determine, the losses and norms are printed only
        int counted = step == 0 || undetermined == 0;
        float norm_floor = counted && determinable(step_norm_yard(&ds, step)) ? TOL_STEP_NORM : INFINITY;
        failures += report_step(&ds, step, ours, norm, counted ? TOL_STEP_LOSS : INFINITY, norm_floor);
    }
    if (undetermined > 0) {
        printf("  %d numbers %s; step losses and norms after step 0 printed, not counted\n", undetermined,
               NOT_DETERMINABLE);
    }
    cudaCheck(cudaDeviceSynchronize());
    gpu_tensors_free(&gt);
    debug_state_free(&ds);
    gpt2_free(&model);
    return failures;
}

int main(int argc, char** argv) {
    const char* dir = argc > 1 ? argv[1] : "data/test";
    if (argc > 2) { fatal("usage: %s [dump folder]", argv[0]); }
    char device[512];
    if (!cuda_device_usable(device, sizeof(device))) {
        printf("%s (%s): skipped: %s\n", argv[0], PRECISION_NAME, device);
        return 0;
    }
    cudaCheck(cudaSetDevice(0));
    cuda_setup();
    printf("device: %s | precision %s\n", device, PRECISION_NAME);
    int failures = 0;
    // every mode with cuBLASLt's fused GELU backward epilogue (when offered), then with the GELU kernel
    for (int pass = 0; pass < 2; pass++) {
        gelu_fusion = pass == 0;
        const char* how = gelu_fusion ? "GELU fused in cuBLASLt where offered" : "GELU kernels";
        for (int i = 0; i < NUM_DUMP_FOLDERS; i++) {
            NormMode mode;
            const char* folder = dump_folder(dir, i, &mode);
            if (!folder) { continue; }
            int f = test_mode(dir, folder, mode);
            printf("[%s] (%s) %s\n", folder, how, f == 0 ? "PASSED" : "FAILED");
            failures += f;
        }
    }
    cuda_teardown();
    printf(failures == 0 ? "all checks passed\n" : "%d checks FAILED\n", failures);
    return failures == 0 ? 0 : 1;
}
