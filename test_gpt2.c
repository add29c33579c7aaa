/*
test_gpt2.c: checks train_gpt2.c against PyTorch, for every norm mode, layer by layer.

For each folder <dumps>/<mode> (pre, post, siamese), made by `python dev/train_gpt2.py --write_dumps`,
and then <dumps>/siamese_trained (the siamese model trained 200 AdamW steps on the dump batch):
    model.bin         a tiny model (L=3, C=32, NH=2, V=200 padded to 256) in the checkpoint format,
                      whose LayerNorm weights and biases and linear biases are all perturbed (seeded),
                      so that no two LayerNorms compute the same function
    debug_state.bin   a batch (B=2, T=32) and what PyTorch computed on it in float64 (stored as
                      float32): every forward activation, the logits, the loss, the gradients of the
                      residual streams at every sublayer boundary and of every parameter tensor, the
                      losses of 10 AdamW steps (with clipping) on that batch and the global gradient
                      norm (before clipping) of each, and per checked number its yardstick: PyTorch
                      float32's error on it
it loads the checkpoint, runs forward on the stored batch and compares the activations in forward
order (the first one over the tolerance is named: layer, sublayer, tensor; then the rest), the loss,
then runs backward and compares the stream gradients in backward order and every parameter gradient
by name, then takes the same 10 AdamW steps and compares the loss and the global gradient norm of
each (common/debug_state.h). The norm is compared on its own because AdamW is nearly blind to the
scale of the gradient: a clip computed from a norm 1.25x too large leaves every loss within its
tolerance.

Errors are measured per tensor as max|ours - ref| / max|ref| (the largest error relative to the
tensor's scale), the losses relative. The reference is float64, so the error measured is our fp32
rounding alone. A number passes when its error <= max(floor, 10 x its yardstick) (common/debug_state.h
says why; a step's norm is held to the largest yardstick of the norms up to that step, see
step_norm_yard). The floors are about 10x the largest errors seen on the untrained dumps
(activations 1.1e-6, post, layer 1 mlp z; stream gradients 1.2e-6; parameter gradients 1.0e-6; loss
9e-8; step losses 1e-7; step norms 8.2e-8, pre step 2): activations 1e-5, loss 1e-6, stream and
parameter gradients 1e-5, step losses and step norms 1e-6. There every yardstick is under 1e-6 and
the floors decide; on siamese_trained the gradients' yardsticks reach 4.6e-5 and ours are at most
5.4x theirs, and the step norms' reach 2.7e-4 (step 5; ours 1.9e-4).

    ./test_gpt2 [DIR]              check against DIR (default data/test). Exit status 0 only if all pass.
    ./test_gpt2 --write DIR SHAPE [TOKENS]
                                   write reference dumps of this CPU trainer (itself pinned to PyTorch
                                   by the check above) at SHAPE into DIR/<mode>/, for shapes too large
                                   to store; test_gpt2cu DIR checks the GPU against them. SHAPE is
                                   "gpt2" (L 2, C 768, NH 12, V 50257, T 1024, B 1), "odd" (L 2,
                                   C 200, NH 5, V 301, T 80, B 2) or "L,C,NH,V,T,B". TOKENS, the
                                   batch's inputs: "random" (the default: uniform over the
                                   vocabulary), "half" (one token at every second position, so it
                                   fills half the batch; uniform elsewhere) or "distinct" (every
                                   position a different token; needs B*T <= V): the cases of the
                                   embedding gradient, whose work per token is uneven.
*/
#define TESTING
#include "train_gpt2.c"

#include "common/debug_state.h"
#include "common/train_loop.h"  // now_seconds, grad_clip_scale

static const float TOL_ACTS = 1e-5f;
static const float TOL_LOSS = 1e-6f;
static const float TOL_GRADS = 1e-5f;
static const float TOL_STEP_LOSS = 1e-6f;
static const float TOL_STEP_NORM = 1e-6f;  // largest error on the untrained dumps 8.2e-8 (see above)

// ----------------------------------------------------------------------------
// our tensors, by dump kind (common/debug_state.h)

typedef struct {
    GPT2* m;
    float* lny;       // (B, T, C) LN(y), recovered as (a + LN(y)) - a
    float* captured;  // (2L + 1, 2, B, T, C) dx and dy at every boundary, from the backward hook
} CpuTensors;

static const float* cpu_tensor(void* ctx, const DumpTensor* t) {
    CpuTensors* ct = (CpuTensors*)ctx;
    const ActivationTensors* a = &ct->m->acts;
    size_t N = (size_t)ct->m->cur_B * ct->m->cur_T * ct->m->config.channels, k = (size_t)t->k;
    if (t->kind == DT_DX) { return ct->captured + 2 * k * N; }
    if (t->kind == DT_DY) { return ct->captured + (2 * k + 1) * N; }
    const float* fields[NUM_DUMP_FIELDS] = {a->resx, a->resy, a->lnx, a->lnsum, a->blockin, a->qkv, a->atty,
                                            a->fch, a->fch_gelu, a->blockout, a->lnfsum, a->lnf, a->logits};
    size_t offset;
    const float* p = fields[dump_tensor_source(t, N, &offset)] + offset;
    if (t->kind != DT_LNY) { return p; }
    for (size_t i = 0; i < N; i++) { ct->lny[i] = p[i] - a->lnx[offset + i]; }
    return ct->lny;
}

static void capture_stream_grads(void* ctx, int boundary, const float* dx, const float* dy) {
    CpuTensors* ct = (CpuTensors*)ctx;
    size_t N = (size_t)ct->m->cur_B * ct->m->cur_T * ct->m->config.channels;
    memcpy(ct->captured + 2 * boundary * N, dx, N * sizeof(float));
    if (dy) { memcpy(ct->captured + (2 * boundary + 1) * N, dy, N * sizeof(float)); }
}

static void cpu_tensors_init(CpuTensors* ct, GPT2* m) {
    size_t N = (size_t)m->batch_size * m->seq_len * m->config.channels;
    ct->m = m;
    ct->lny = (float*)malloc_check(N * sizeof(float), "LN(y)");
    ct->captured = (float*)calloc_check((2 * (size_t)m->config.num_layers + 1) * 2 * N, sizeof(float), "stream gradients");
    m->stream_grad_hook = capture_stream_grads;
    m->stream_grad_ctx = ct;
}

static void cpu_tensors_free(CpuTensors* ct) {
    free(ct->lny);
    free(ct->captured);
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
    const GPT2Config* cfg = &model.config;
    if (cfg->norm_mode != mode) {
        fatal("%s holds a %s model, expected %s", model_path, NORM_MODE_NAMES[cfg->norm_mode], NORM_MODE_NAMES[mode]);
    }
    DebugState ds;
    debug_state_read(&ds, state_path, cfg, model.num_parameters);
    printf("[%s] L %d C %d NH %d V %d/%d | B %d T %d | %zu parameters\n", folder, cfg->num_layers, cfg->channels,
           cfg->num_heads, cfg->vocab_size, cfg->padded_vocab_size, ds.B, ds.T, model.num_parameters);
    gpt2_allocate(&model, ds.B, ds.T);
    CpuTensors ct;
    cpu_tensors_init(&ct, &model);
    int failures = 0, L = cfg->num_layers;

    // forward: every activation in forward order (the logits last), and the loss
    gpt2_forward(&model, ds.inputs, ds.targets, ds.B, ds.T);
    failures += report_tensors("forward", ds.fwd, ds.n_fwd, L, cpu_tensor, &ct, TOL_ACTS);
    failures += report("loss", fabsf(model.mean_loss - ds.loss) / fabsf(ds.loss), *ds.loss_yard, TOL_LOSS);
    printf("  loss: ours %.7f ref %.7f\n", model.mean_loss, ds.loss);

    // backward: the stream gradients in backward order, then every parameter gradient by name
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1.0f);
    failures += report_tensors("backward", ds.bwd, ds.n_bwd, L, cpu_tensor, &ct, TOL_GRADS);
    failures += report_gradients(model.grads_memory, &ds, model.param_sizes, TOL_GRADS);

    // training: the same AdamW steps, with clipping, on the same batch
    model.stream_grad_hook = NULL;
    report_adamw_settings(&ds);
    for (int step = 0; step < ds.steps; step++) {
        gpt2_forward(&model, ds.inputs, ds.targets, ds.B, ds.T);
        float ours = model.mean_loss;
        gpt2_zero_grad(&model);
        gpt2_backward(&model, 1.0f);
        float norm = gpt2_grad_norm(&model);
        gpt2_update(&model, ds.lr, ds.beta1, ds.beta2, ds.eps, ds.weight_decay, grad_clip_scale(norm, ds.grad_clip),
                    step + 1);
        failures += report_step(&ds, step, ours, norm, TOL_STEP_LOSS, TOL_STEP_NORM);
    }
    cpu_tensors_free(&ct);
    debug_state_free(&ds);
    gpt2_free(&model);
    return failures;
}

// ----------------------------------------------------------------------------
// writing reference dumps at a given shape (./test_gpt2 --write DIR SHAPE)

// the AdamW settings of the written dumps' steps: those of dev/train_gpt2.py's
static const float WRITE_LR = 1e-3f, WRITE_BETA1 = 0.9f, WRITE_BETA2 = 0.95f, WRITE_EPS = 1e-8f, WRITE_WD = 0.1f,
                   WRITE_CLIP = 0.7f;

// every LayerNorm weight 1 + N(0, 0.2), LayerNorm bias N(0, 0.2), linear bias N(0, 0.05): the
// recipe of dev/train_gpt2.py's perturb (not its random numbers), so no two LayerNorms are alike
static void params_perturb(float* params, const size_t sizes[NUM_PARAMETER_TENSORS], uint64_t seed) {
    uint64_t rng = seed;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (!param_tensor_decays(i)) {  // the vectors: LayerNorms and biases
            float std = strncmp(PARAM_NAMES[i], "ln", 2) == 0 ? 0.2f : 0.05f;
            float* noise = (float*)malloc_check((sizes[i] + 1) * sizeof(float), "perturbation");
            random_normal(noise, sizes[i], std, &rng);
            for (size_t j = 0; j < sizes[i]; j++) { params[j] += noise[j]; }
            free(noise);
        }
        params += sizes[i];
    }
}

// copies our tensors of a list into the dump's reference storage
static void store_tensors(const DumpTensor* list, int n, CpuTensors* ct) {
    for (int i = 0; i < n; i++) {
        memcpy((float*)list[i].ref, cpu_tensor(ct, &list[i]), list[i].rows * list[i].stride * sizeof(float));
    }
}

// the progress of --write: one unit per forward and backward pass (the reference pass and each
// AdamW step of each mode), a line after each with the time so far and what the pace says is left
typedef struct {
    int done, total;
    double start;
} WriteProgress;

static void write_progress(WriteProgress* p, NormMode mode, const char* what) {
    p->done++;
    double elapsed = now_seconds() - p->start;
    printf("  [%d/%d] %s: %s, %.0f s", p->done, p->total, NORM_MODE_NAMES[mode], what, elapsed);
    if (p->done < p->total) { printf(", about %.0f s left", elapsed / p->done * (p->total - p->done)); }
    printf("\n");
}

// the batch's input tokens of --write (TOKENS above); the targets stay uniform
static void write_inputs(int* inputs, int n, int V, const char* tokens) {
    if (strcmp(tokens, "half") == 0) {
        for (int i = 0; i < n; i += 2) { inputs[i] = V / 2; }
    } else if (strcmp(tokens, "distinct") == 0) {  // the first n of a random permutation of [0, V)
        int* perm = (int*)malloc_check((size_t)V * sizeof(int), "token permutation");
        uint64_t rng = 7;
        for (int i = 0; i < V; i++) { perm[i] = i; }
        for (int i = 0; i < n; i++) {
            int j = i + (int)(random_u32(&rng) % (uint32_t)(V - i)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
            inputs[i] = perm[i];
        }
        free(perm);
    }
}

static void write_mode(const char* dir, NormMode mode, const int shape[6], const char* tokens, int steps,
                       WriteProgress* progress) {
    int L = shape[0], C = shape[1], NH = shape[2], V = shape[3], T = shape[4], B = shape[5];
    GPT2Config cfg = {T, V, (V + 127) / 128 * 128, L, NH, C, mode};
    GPT2 model;
    gpt2_build_fresh(&model, &cfg, 1337);
    params_perturb(model.params_memory, model.param_sizes, 2000 + (uint64_t)mode);
    char path[1100];
    snprintf(path, sizeof(path), "%s/%s", dir, NORM_MODE_NAMES[mode]);
    ensure_writable_dir(path);
    snprintf(path, sizeof(path), "%s/%s/model.bin", dir, NORM_MODE_NAMES[mode]);
    checkpoint_write(path, &cfg, model.params_memory);

    DebugState ds;
    debug_state_alloc(&ds, &cfg, model.num_parameters, B, T, steps);
    ds.lr = WRITE_LR, ds.beta1 = WRITE_BETA1, ds.beta2 = WRITE_BETA2, ds.eps = WRITE_EPS;
    ds.weight_decay = WRITE_WD, ds.grad_clip = WRITE_CLIP;
    uint64_t rng = 42;
    for (int i = 0; i < B * T; i++) {
        ds.inputs[i] = (int)(random_u32(&rng) % (uint32_t)V);
        ds.targets[i] = (int)(random_u32(&rng) % (uint32_t)V);
    }
    write_inputs(ds.inputs, B * T, V, tokens);
    gpt2_allocate(&model, B, T);
    CpuTensors ct;
    cpu_tensors_init(&ct, &model);
    gpt2_forward(&model, ds.inputs, ds.targets, B, T);
    store_tensors(ds.fwd, ds.n_fwd, &ct);  // the logits entry points at ds.logits
    ds.loss = model.mean_loss;
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1.0f);
    store_tensors(ds.bwd, ds.n_bwd, &ct);
    memcpy(ds.grads, model.grads_memory, model.num_parameters * sizeof(float));
    write_progress(progress, mode, "activations and gradients");
    model.stream_grad_hook = NULL;
    for (int step = 0; step < steps; step++) {
        gpt2_forward(&model, ds.inputs, ds.targets, B, T);
        ds.losses[step] = model.mean_loss;
        gpt2_zero_grad(&model);
        gpt2_backward(&model, 1.0f);
        float norm = gpt2_grad_norm(&model);
        ds.norms[step] = norm;
        gpt2_update(&model, ds.lr, ds.beta1, ds.beta2, ds.eps, ds.weight_decay, grad_clip_scale(norm, ds.grad_clip),
                    step + 1);
        char what[64];
        snprintf(what, sizeof(what), "AdamW step %d of %d", step + 1, steps);
        write_progress(progress, mode, what);
    }
    snprintf(path, sizeof(path), "%s/%s/debug_state.bin", dir, NORM_MODE_NAMES[mode]);
    debug_state_write(&ds, path, &cfg, model.num_parameters);
    printf("wrote %s/%s: L %d C %d NH %d V %d/%d B %d T %d, %s tokens | loss %.6f | %d activations, %d stream gradients, "
           "%d steps\n", dir, NORM_MODE_NAMES[mode], L, C, NH, V, cfg.padded_vocab_size, B, T, tokens, ds.loss, ds.n_fwd,
           ds.n_bwd, steps);
    cpu_tensors_free(&ct);
    debug_state_free(&ds);
    gpt2_free(&model);
}

// "gpt2", "odd" or "L,C,NH,V,T,B" -> shape; fatal on anything else
static void parse_shape(const char* s, int shape[6]) {
    const int gpt2[6] = {2, 768, 12, 50257, 1024, 1}, odd[6] = {2, 200, 5, 301, 80, 2};
    if (strcmp(s, "gpt2") == 0) { memcpy(shape, gpt2, sizeof(gpt2)); return; }
    if (strcmp(s, "odd") == 0) { memcpy(shape, odd, sizeof(odd)); return; }
    char tail;
    if (sscanf(s, "%d,%d,%d,%d,%d,%d%c", &shape[0], &shape[1], &shape[2], &shape[3], &shape[4], &shape[5], &tail) != 6) {
        fatal("bad shape '%s': expected gpt2, odd or L,C,NH,V,T,B (six integers)", s);
    }
    if (shape[0] < 1 || shape[0] > 64 || shape[1] < 1 || shape[1] > 8192 || shape[2] < 1 || shape[1] % shape[2] != 0 ||
        shape[3] < 2 || shape[3] > 1 << 20 || shape[4] < 1 || shape[4] > 8192 || shape[5] < 1 || shape[5] > 64) {
        fatal("bad shape '%s': need 1 <= L <= 64, C <= 8192 a multiple of NH, 2 <= V <= 2^20, 1 <= T <= 8192, 1 <= B <= 64", s);
    }
}

// ----------------------------------------------------------------------------
// recompute (-r 1 and 2): the backward rebuilds GELU outputs (and a, r, u) instead of keeping them
// for every layer. What it rebuilds must be the very floats the forward made, so that losses and
// gradients do not depend on -r in any bit. The check runs the same model and batch with -r 0 (every
// tensor kept) and with -r 1 and 2, and compares, bit for bit: the loss, every parameter gradient,
// and at every sublayer boundary of the backward the tensors just rebuilt against the kept ones.

typedef struct {
    const GPT2* m;    // the model with -r 1 or 2, in its backward pass
    const GPT2* ref;  // the same model after the same passes with -r 0
    int checked, differ;
} RebuiltCheck;

static void rebuilt_compare(RebuiltCheck* rc, const float* rebuilt, const float* kept, size_t n, const char* what,
                            int k) {
    rc->checked++;
    if (memcmp(rebuilt, kept, n * sizeof(float)) != 0) {
        rc->differ++;
        size_t i = 0;
        while (i + 1 < n && memcmp(rebuilt + i, kept + i, sizeof(float)) == 0) { i++; }
        printf("  FAIL -r %d: %s of sublayer %d rebuilt differs from the kept one at %zu: %.9g vs %.9g\n",
               rc->m->recompute, what, k, i, rebuilt[i], kept[i]);
    }
}

// the stream-gradient hook, used here as "sublayer k's backward is done": it has just rebuilt
// sublayer k's a, r and u (-r 2), and the GELU slot holds layer k/2's output (rebuilt at k = 2l + 1)
static void check_rebuilt(void* ctx, int boundary, const float* dx, const float* dy) {
    (void)dx, (void)dy;
    RebuiltCheck* rc = (RebuiltCheck*)ctx;
    const GPT2Config* cfg = &rc->m->config;
    if (boundary == 2 * cfg->num_layers) { return; }  // the final LayerNorms: nothing rebuilt yet
    size_t N = (size_t)rc->m->cur_B * rc->m->cur_T * cfg->channels, k = (size_t)boundary, l = k / 2;
    const ActivationTensors *a = &rc->m->acts, *kept = &rc->ref->acts;
    const NormModeLayout* lay = norm_mode_layout(cfg->norm_mode);
    rebuilt_compare(rc, a->fch_gelu, kept->fch_gelu + l * 4 * N, 4 * N, "GELU(fch)", boundary);
    if (rc->m->recompute < 2) { return; }
    if (lay->two_streams) { rebuilt_compare(rc, a->lnx, kept->lnx + k * N, N, "a = LN(x)", boundary); }
    if (lay->ln_sum) { rebuilt_compare(rc, a->lnsum, kept->lnsum + k * N, N, "r", boundary); }
    if (lay->block_input) { rebuilt_compare(rc, a->blockin, kept->blockin + k * N, N, "u", boundary); }
}

static void recompute_model(GPT2* m, const GPT2Config* cfg, int recompute, int B, int T) {
    gpt2_build_fresh(m, cfg, 1337);
    params_perturb(m->params_memory, m->param_sizes, 3000 + (uint64_t)cfg->norm_mode);
    m->recompute = recompute;
    gpt2_allocate(m, B, T);
}

// shape: 3 layers (sublayers whose slots are shared), C 45 in 3 heads, T 17, B 2: rows and tensors of
// odd lengths, so a tensor kept per layer and its one shared slot start at different alignments (a
// loop whose vector and scalar parts rounded differently would show)
static int test_recompute(void) {
    const int L = 3, C = 45, NH = 3, V = 100, T = 17, B = 2;
    int failures = 0;
    printf("[recompute] -r 1 and -r 2 against -r 0: loss, gradients and rebuilt tensors bit for bit:\n");
    int inputs[B * T], targets[B * T];
    uint64_t rng = 9;
    for (int i = 0; i < B * T; i++) {
        inputs[i] = (int)(random_u32(&rng) % V);
        targets[i] = (int)(random_u32(&rng) % V);
    }
    for (int mode = 0; mode < NUM_NORM_MODES; mode++) {
        GPT2Config cfg = {T, V, (V + 127) / 128 * 128, L, NH, C, (NormMode)mode};
        GPT2 ref;
        recompute_model(&ref, &cfg, 0, B, T);
        gpt2_forward(&ref, inputs, targets, B, T);
        gpt2_zero_grad(&ref);
        gpt2_backward(&ref, 1.0f);
        printf("  %-8s -r 0: %zu activation floats, loss %.7f\n", NORM_MODE_NAMES[mode], ref.num_activations,
               ref.mean_loss);
        for (int r = 1; r <= 2; r++) {
            GPT2 m;
            recompute_model(&m, &cfg, r, B, T);
            RebuiltCheck rc = {&m, &ref, 0, 0};
            m.stream_grad_hook = check_rebuilt;
            m.stream_grad_ctx = &rc;
            gpt2_forward(&m, inputs, targets, B, T);
            gpt2_zero_grad(&m);
            gpt2_backward(&m, 1.0f);
            int same_loss = memcmp(&m.mean_loss, &ref.mean_loss, sizeof(float)) == 0;
            int same_grads = memcmp(m.grads_memory, ref.grads_memory, m.num_parameters * sizeof(float)) == 0;
            int ok = same_loss && same_grads && rc.differ == 0 && rc.checked > 0 &&
                     m.num_activations < ref.num_activations;
            printf("  %-8s -r %d: %zu activation floats | loss %s | gradients %s | %d rebuilt tensors, %d differ  %s\n",
                   NORM_MODE_NAMES[mode], r, m.num_activations, same_loss ? "same" : "DIFFERS",
                   same_grads ? "same" : "DIFFER", rc.checked, rc.differ, ok ? "ok" : "FAIL");
            failures += !ok;
            gpt2_free(&m);
        }
        gpt2_free(&ref);
    }
    return failures;
}

// The tiled matmul (common/matmul_tiled.h, what the model calls) on shapes that hit every edge of
// its tiling (rows and columns that are not multiples of the tile, k not a multiple of the vector
// width, several k blocks, several blocks of rows: 300 and 1000 rows, of columns: 1000), with and
// without a bias (the forward's tiles then start from 0), rows of B read in place and (C 512: rows
// 2 KiB apart) packed, and the plain loops of train_gpt2.c, both against a sum in double. The
// dumps' tiny model alone would not reach all of these.
static int test_matmul_kernels(void) {
    const int shapes[][4] = {{1, 16, 16, 1},    {13, 40, 70, 1},  {7, 32, 300, 0}, {100, 96, 200, 1}, {37, 333, 129, 1},
                             {256, 64, 1000, 1}, {300, 40, 70, 0}, {20, 512, 50, 1}};  // BT, C, OC, bias
    int failures = 0;
    uint64_t rng = 42;
    printf("[matmul] the tiled matmul and the plain loops vs a sum in double:\n");
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int BT = shapes[s][0], C = shapes[s][1], OC = shapes[s][2], has_bias = shapes[s][3];
        size_t n_in = (size_t)BT * C, n_w = (size_t)OC * C, n_out = (size_t)BT * OC;
        float* buf = (float*)malloc_check((4 * n_in + 4 * n_w + 4 * n_out + 4 * (size_t)OC) * sizeof(float), "matmul test");
        float *inp = buf, *w = inp + n_in, *dout = w + n_w, *out = dout + n_out, *bias = out + n_out;
        float *dinp = bias + OC, *dw = dinp + n_in, *db = dw + n_w, *ref_dinp = db + OC, *ref_dw = ref_dinp + n_in;
        float *ref_out = ref_dw + n_w, *ref_db = ref_out + n_out;
        float *plain_out = ref_db + OC, *plain_dinp = plain_out + n_out, *plain_dw = plain_dinp + n_in;
        float *plain_db = plain_dw + n_w;
        random_normal(inp, n_in, 1.0f, &rng);
        random_normal(w, n_w, 1.0f, &rng);
        random_normal(dout, n_out, 1.0f, &rng);
        random_normal(bias, OC, 1.0f, &rng);
        if (!has_bias) { memset(bias, 0, OC * sizeof(float)); }  // the reference below adds 0
        random_normal(dinp, n_in, 1.0f, &rng);  // backward accumulates: start from non-zero gradients
        random_normal(dw, n_w, 1.0f, &rng);
        for (int o = 0; o < OC; o++) { db[o] = 0.5f; }
        memcpy(plain_dinp, dinp, n_in * sizeof(float));
        memcpy(plain_dw, dw, n_w * sizeof(float));
        memcpy(plain_db, db, OC * sizeof(float));
        matmul_forward_plain(plain_out, inp, w, has_bias ? bias : NULL, BT, C, OC);
        matmul_backward_plain(plain_dinp, plain_dw, plain_db, dout, inp, w, BT, C, OC);
        for (size_t i = 0; i < n_out; i++) { out[i] = NAN; }  // the forward overwrites every element
        matmul_forward(out, inp, w, has_bias ? bias : NULL, BT, C, OC);
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
        // the plain loops, held to the same sum in double (they are the definition the reader meets)
        float worst_plain = fmaxf(fmaxf(scaled_max_error(plain_out, ref_out, 1, n_out, n_out),
                                        scaled_max_error(plain_dinp, ref_dinp, 1, n_in, n_in)),
                                  fmaxf(scaled_max_error(plain_dw, ref_dw, 1, n_w, n_w),
                                        scaled_max_error(plain_db, ref_db, 1, OC, OC)));
        int ok = worst <= TOL_GRADS && worst_plain <= TOL_GRADS;  // false for NaN
        printf("  BT %3d C %3d OC %4d%s: out %.1e dinp %.1e dweight %.1e dbias %.1e | plain loops %.1e  %s\n", BT, C,
               OC, has_bias ? "" : " (no bias)", err_out, err_dinp, err_dw, err_db, worst_plain, ok ? "ok" : "FAIL");
        failures += !ok;
        free(buf);
    }
    return failures;
}

// attention_forward and attention_backward (through the tiled matmul, what the model calls) and
// their plain loops against the same sums in double, on shapes with several query blocks of
// ATT_ROWS (T 70, 130), a part block, head sizes 12, 16, 64 and one head; dqkv starts non-zero
// (the backward accumulates). Errors as for the matmul: max|ours - exact| / max|exact| per tensor.
static int test_attention(void) {
    const int shapes[][4] = {{2, 70, 48, 3}, {1, 130, 64, 1}, {3, 5, 24, 2}};  // B, T, C, NH
    int failures = 0;
    uint64_t rng = 7;
    printf("[attention] the tiled attention and the plain loops vs sums in double:\n");
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3], HS = C / NH;
        size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;
        float* buf = (float*)malloc_check((4 * n_qkv + 3 * n_out + 3 * n_att) * sizeof(float), "attention test");
        float *qkv = buf, *dqkv = qkv + n_qkv, *plain_dqkv = dqkv + n_qkv, *ref_dqkv = plain_dqkv + n_qkv;
        float *dout = ref_dqkv + n_qkv, *out = dout + n_out, *plain_out = out + n_out;
        float *att = plain_out + n_out, *plain_att = att + n_att, *datt = plain_att + n_att;
        double* ref = (double*)malloc_check((n_out + 2 * (size_t)T * T) * sizeof(double), "attention reference");
        double *ref_out = ref, *p = ref_out + n_out, *dp = p + (size_t)T * T;
        random_normal(qkv, n_qkv, 1.0f, &rng);
        random_normal(dout, n_out, 1.0f, &rng);
        random_normal(dqkv, n_qkv, 1.0f, &rng);
        memcpy(plain_dqkv, dqkv, n_qkv * sizeof(float));
        for (size_t i = 0; i < n_qkv; i++) { ref_dqkv[i] = dqkv[i]; }
        attention_forward(out, att, qkv, B, T, C, NH);
        attention_forward_plain(plain_out, plain_att, qkv, B, T, C, NH);
        attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH);
        attention_backward_plain(plain_dqkv, datt, dout, qkv, plain_att, B, T, C, NH);
        // the exact sums, per (b, head): p = softmax of the scores, out = p v, and the backward
        double scale = 1.0 / sqrt((double)HS);
        float* exact_dqkv = (float*)malloc_check(n_qkv * sizeof(float), "attention reference");
        memcpy(exact_dqkv, ref_dqkv, n_qkv * sizeof(float));
        double* acc = (double*)calloc_check(n_qkv, sizeof(double), "attention reference");
        for (size_t i = 0; i < n_qkv; i++) { acc[i] = exact_dqkv[i]; }
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                const float* row = qkv + (size_t)b * T * 3 * C + h * HS;  // q_t at row + t 3C, k + C, v + 2C
                double* arow = acc + (size_t)b * T * 3 * C + h * HS;
                for (int t = 0; t < T; t++) {
                    double mx = -INFINITY, sum = 0.0;
                    for (int u = 0; u <= t; u++) {
                        double dot = 0.0;
                        for (int i = 0; i < HS; i++) { dot += (double)row[t * 3 * C + i] * row[u * 3 * C + C + i]; }
                        p[t * T + u] = dot * scale;
                        mx = fmax(mx, p[t * T + u]);
                    }
                    for (int u = 0; u <= t; u++) { p[t * T + u] = exp(p[t * T + u] - mx); sum += p[t * T + u]; }
                    for (int u = 0; u <= t; u++) { p[t * T + u] /= sum; }
                    const float* g = dout + ((size_t)b * T + t) * C + h * HS;
                    double dsum = 0.0;
                    for (int i = 0; i < HS; i++) {
                        double o = 0.0;
                        for (int u = 0; u <= t; u++) { o += p[t * T + u] * row[u * 3 * C + 2 * C + i]; }
                        ref_out[((size_t)b * T + t) * C + h * HS + i] = o;
                    }
                    for (int u = 0; u <= t; u++) {
                        double d = 0.0;
                        for (int i = 0; i < HS; i++) { d += (double)g[i] * row[u * 3 * C + 2 * C + i]; }
                        dp[t * T + u] = d;
                        dsum += p[t * T + u] * d;
                    }
                    for (int u = 0; u <= t; u++) {
                        double dpre = p[t * T + u] * (dp[t * T + u] - dsum) * scale;
                        for (int i = 0; i < HS; i++) {
                            arow[t * 3 * C + i] += dpre * row[u * 3 * C + C + i];              // dq
                            arow[u * 3 * C + C + i] += dpre * row[t * 3 * C + i];              // dk
                            arow[u * 3 * C + 2 * C + i] += p[t * T + u] * g[i];                // dv
                        }
                    }
                }
            }
        }
        for (size_t i = 0; i < n_qkv; i++) { exact_dqkv[i] = (float)acc[i]; }
        float* exact_out = (float*)malloc_check(n_out * sizeof(float), "attention reference");
        for (size_t i = 0; i < n_out; i++) { exact_out[i] = (float)ref_out[i]; }
        float err_out = scaled_max_error(out, exact_out, 1, n_out, n_out);
        float err_dqkv = scaled_max_error(dqkv, exact_dqkv, 1, n_qkv, n_qkv);
        float err_plain = fmaxf(scaled_max_error(plain_out, exact_out, 1, n_out, n_out),
                                scaled_max_error(plain_dqkv, exact_dqkv, 1, n_qkv, n_qkv));
        int ok = err_out <= TOL_ACTS && err_dqkv <= TOL_GRADS && err_plain <= TOL_GRADS;  // false for NaN
        printf("  B %d T %3d C %2d NH %d: out %.1e dqkv %.1e | plain loops %.1e  %s\n", B, T, C, NH, err_out, err_dqkv,
               err_plain, ok ? "ok" : "FAIL");
        failures += !ok;
        free(exact_out);
        free(acc);
        free(exact_dqkv);
        free(ref);
        free(buf);
    }
    return failures;
}

// vec_exp (common/vec_math.h), which GELU and the softmaxes call, against exp in double: every
// 1/64 from -90 to 90 and 100001 points in [-1, 1] (relative error at most 1.5e-7, about one float
// ulp: the largest seen is 7.5e-8; 0 below -87.34, +inf above 88.38), and -inf, +inf, NaN; then
// GELU forward and backward against the tanh formula in double (largest errors seen 5e-8, 1.6e-7).
static int test_vec_exp(void) {
    int failures = 0;
    double worst = 0.0, worst_x = 0.0;
    for (int i = -90 * 64; i <= 90 * 64 + 100001; i++) {
        float x = i <= 90 * 64 ? i / 64.0f : -1.0f + 2.0f * (i - 90 * 64 - 1) / 100000.0f;
        float e = vec_exp(x);
        double ref = exp((double)x);
        if (x < -87.3365479f || x > 88.3762626f) {
            int ok = x < 0 ? e == 0.0f : isinf(e) && e > 0;
            if (!ok) { printf("  vec_exp(%g) = %g: expected %s  FAIL\n", x, e, x < 0 ? "0" : "+inf"); failures++; }
            continue;
        }
        double err = fabs(e - ref) / ref;
        if (!(err <= worst)) { worst = err; worst_x = x; }  // NaN is the worst
    }
    int ok = worst <= 1.5e-7;
    printf("[vec_exp] relative error vs exp in double: worst %.2e at x = %g  %s\n", worst, worst_x, ok ? "ok" : "FAIL");
    failures += !ok;
    int special = vec_exp(-INFINITY) == 0.0f && isinf(vec_exp(INFINITY)) && isnan(vec_exp(NAN));
    printf("  vec_exp(-inf) = 0, vec_exp(+inf) = +inf, vec_exp(NaN) = NaN  %s\n", special ? "ok" : "FAIL");
    failures += !special;
    // GELU against 0.5 x (1 + tanh(u)) and its derivative in double, x from -10 to 10 (scaled errors)
    enum { N = 20001 };
    float* x = (float*)malloc_check(4 * N * sizeof(float), "gelu test");
    float *y = x + N, *dout = y + N, *dx = dout + N;
    for (int i = 0; i < N; i++) { x[i] = -10.0f + 20.0f * i / (N - 1); dout[i] = 1.0f; }
    gelu_forward(y, x, N);
    gelu_backward(dx, x, dout, N);
    double err_y = 0.0, err_dx = 0.0;
    for (int i = 0; i < N; i++) {
        double xd = x[i], u = 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd), th = tanh(u);
        double ref_y = 0.5 * xd * (1.0 + th);
        double ref_dx = 0.5 * (1.0 + th) + 0.5 * xd * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * xd * xd);
        err_y = fmax(err_y, fabs(y[i] - ref_y) / 10.0);  // max |GELU| on [-10, 10] is 10
        err_dx = fmax(err_dx, fabs(dx[i] - ref_dx) / 1.13);  // max GELU' is about 1.13
    }
    free(x);
    int gelu_ok = err_y <= 5e-7 && err_dx <= 5e-7;
    printf("  GELU vs the tanh formula in double: forward %.1e, backward %.1e (of the largest value)  %s\n", err_y,
           err_dx, gelu_ok ? "ok" : "FAIL");
    failures += !gelu_ok;
    return failures;
}

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && strcmp(argv[1], "--write") == 0) {
        if (argc != 4 && argc != 5) {
            fatal("usage: %s --write DIR SHAPE [TOKENS]   (SHAPE: gpt2, odd or L,C,NH,V,T,B; TOKENS: random, half or "
                  "distinct)", argv[0]);
        }
        int shape[6];
        parse_shape(argv[3], shape);
        const char* tokens = argc == 5 ? argv[4] : "random";
        if (strcmp(tokens, "random") != 0 && strcmp(tokens, "half") != 0 && strcmp(tokens, "distinct") != 0) {
            fatal("bad TOKENS '%s': expected random, half or distinct", tokens);
        }
        if (strcmp(tokens, "distinct") == 0 && shape[4] * shape[5] > shape[3]) {
            fatal("distinct tokens need B*T <= V (B*T = %d, V = %d)", shape[4] * shape[5], shape[3]);
        }
        ensure_writable_dir(argv[2]);
        int steps = 3;
        WriteProgress progress = {0, NUM_NORM_MODES * (1 + steps), now_seconds()};
        for (int mode = 0; mode < NUM_NORM_MODES; mode++) {
            write_mode(argv[2], (NormMode)mode, shape, tokens, steps, &progress);
        }
        return 0;
    }
    const char* dir = argc > 1 ? argv[1] : "data/test";
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fatal("usage: %s [dump folder]  |  %s --write DIR SHAPE [TOKENS]", argv[0], argv[0]);
    }
    int failures = test_matmul_kernels() + test_attention() + test_vec_exp();
    failures += test_recompute();
    for (int i = 0; i < NUM_DUMP_FOLDERS; i++) {
        NormMode mode;
        const char* folder = dump_folder(dir, i, &mode);
        if (!folder) { continue; }
        int f = test_mode(dir, folder, mode);
        printf("[%s] %s\n", folder, f == 0 ? "PASSED" : "FAILED");
        failures += f;
    }
    printf(failures == 0 ? "all checks passed\n" : "%d checks FAILED\n", failures);
    return failures == 0 ? 0 : 1;
}
