/*
common/train_loop.h: the training loop that train_gpt2.c (CPU) and train_gpt2.cu (GPU) share.

Everything here is host-side glue that never touches the model's arithmetic: the command line, the
output folder, the data, resuming, evaluation, sampling, checkpoints, the step loop and its log,
and data-parallel training over several processes (common/dist.h: mpirun -np N; the summing of
gradients, the sharded optimizer and the gathered checkpoints are all here, for both trainers).
The model's math (forward, backward, AdamW) stays inline in each trainer; the loop reaches it only
through the small table of functions below, which each trainer fills with its own implementations.

A trainer's main() reads, in order (train_gpt2.c's; train_gpt2.cu's also sets up its GPU):

    TrainRun run;
    train_run_setup(&run, argc, argv);      // flags, output folder (read only), data; which model to build
    GPT2 model;                             // the trainer's own model type
    if (run.fresh) gpt2_build_fresh(&model, &run.fresh_config, run.args.seed);
    else           gpt2_build_from_checkpoint(&model, run.model_path);   // -e FILE, or the resume's
    train_run_attach_model(&run, &model.config, model.num_parameters, "...");  // checks, prints
    model.opt_lo = run.opt_lo;              // AdamW's moments: all parameters, or this rank's shard (ZeRO-1)
    model.opt_hi = run.opt_hi;
    gpt2_allocate(&model, run.args.B, run.args.T);
    run.adamw.beta1 = 0.9f;                 // AdamW's betas and epsilon (its weight decay is -c)
    run.adamw.beta2 = 0.95f;
    run.adamw.eps = 1e-8f;
    TrainerOps ops = { .forward = ..., };   // the trainer's functions
    train_run_loop(&run, &ops, &model);     // claims the output folder; steps, evaluation, sampling, checkpoints
    train_run_free(&run);
    gpt2_free(&model);

One optimizer step (train_run_loop) reads: zero the gradients; grad_accum micro-batches of forward
and backward (the gradients accumulate); the gradients summed over the ranks and their global norm
(train_reduce_gradients); the learning rate of the step (learning_rate_at, -K) and the clip
(grad_clip_scale, GRAD_CLIP); AdamW (train_update). A step whose loss or norm is not finite skips
the update (nonfinite_step, common/train_common.h). The tests' build of a trainer (-DTEST_HOOKS)
puts the faults of common/test_hooks.h in front of the trainer's functions; a trainer built by
`make` has none.
*/
#ifndef COMMON_TRAIN_LOOP_H
#define COMMON_TRAIN_LOOP_H

#include <math.h>
#include "rng.h"
#include "dist.h"
#include "eval.h"
#include "train_common.h"

// What the loop needs from a trainer: functions of its model, struct GPT2 (each trainer defines
// it). Every function that returns a pointer returns host memory that stays valid until the next
// call of that function.
typedef struct GPT2 GPT2;
typedef struct {
    // forward pass on host tokens (B, T); returns the mean cross-entropy loss when targets are given
    float (*forward)(GPT2* model, const int* inputs, const int* targets, int B, int T);
    // backward of the last forward pass (with targets), ACCUMULATING loss_scale * dL/dparams
    void (*backward)(GPT2* model, float loss_scale);
    void (*zero_grad)(GPT2* model);
    // the sum of the squares of gradients [lo, hi), in double
    double (*grad_sumsq)(GPT2* model, size_t lo, size_t hi);
    // one AdamW step (t is 1-based) of parameters [lo, hi) on the gradients multiplied by grad_scale
    void (*update)(GPT2* model, float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                   int t, size_t lo, size_t hi);
    // row `row` (b * T + t of the last forward pass) of the logits, padded_vocab_size floats; the
    // last forward pass must have had no targets (the CUDA trainer's classifier overwrites the
    // logits of one with targets by their gradient)
    const float* (*logits_row)(GPT2* model, size_t row);
    // the cross-entropy loss of every position (B * T floats) of the last forward pass with targets
    // (the multiple-choice eval, common/eval.h)
    const float* losses;
    // the fp32 weights (all num_parameters of them; at least those whose moments the trainer holds
    // are current) and the AdamW moments it holds (parameters [opt_lo, opt_hi) of TrainRun), for a
    // checkpoint
    const float* (*weights)(GPT2* model);
    void (*moments)(GPT2* model, const float** m, const float** v);
    // copies AdamW moments of parameters [opt_lo, opt_hi) into the optimizer (resume)
    void (*load_moments)(GPT2* model, const float* m, const float* v);
    // several ranks: the gradient buffer (num_parameters floats) the ranks sum, and the weights the
    // forward pass reads (working_bytes each), which a sharded update changes and the ranks gather
    // (both in GPU memory in the CUDA trainer, padded with zeros to Dist.padded elements:
    // common/dist.h moves them with NCCL or through the host)
    float* grads;
    void* working_weights;
    size_t working_bytes;
    // waits for queued work before a clock is read (NULL on the CPU, where nothing is queued)
    void (*sync)(GPT2* model);
    // peak FLOP/s of the device, for the MFU column of the step line (0: no MFU column)
    double peak_flops;
} TrainerOps;

// AdamW's hyperparameters but the learning rate: main() sets the betas and epsilon, train_run_setup
// the weight decay (-c, applied to the tensors param_tensor_decays marks)
typedef struct {
    float beta1, beta2;  // decay rates of the first and second moment
    float eps;           // added to the root of the second moment
    float weight_decay;  // decoupled weight decay
} AdamWSettings;

// the state of one run that is not the model's
typedef struct {
    TrainArgs args;
    int have_output;           // -o given
    int resume_step;           // the step resumed from (-y 1), -1 for a new run
    RunData data;              // the data folder: tokenizer, arithmetic or not
    int fresh;                 // the model is a fresh one (-e dN...), else a checkpoint
    GPT2Config fresh_config;   // the fresh model's configuration
    char model_path[1100];     // the checkpoint to build the model from (resume or -e FILE)
    char state_path[1100];     // the state file to resume from
    const GPT2Config* config;  // the model's, once attached
    size_t num_parameters;
    DataLoader train_loader, val_loader;
    int have_val;
    int grad_accum;            // micro-batches per optimizer step, on each rank
    Dist dist;                 // the ranks of a multi-process run (one rank without mpirun)
    size_t opt_lo, opt_hi;     // the parameters whose AdamW moments this rank holds (all but with ZeRO-1)
    AdamWSettings adamw;
    EvalSet eval;              // the multiple-choice eval (-H), when have_eval
    int have_eval;
    int* eval_inputs;          // (B, T) its rows and their targets
    int* eval_targets;
} TrainRun;

// ----------------------------------------------------------------------------
// the learning rate and the gradient clip of a step

// the global gradient norm is clipped to this (as torch's clip_grad_norm_(params, 1.0))
#define GRAD_CLIP 1.0f

// The learning rate of (0-based) step `step`. It depends on the step and the flags alone, so a
// resumed run continues its schedule exactly. During the -u warmup steps it rises linearly,
// (step + 1) / -u times -l; after them -K decides, with lr = -l, f = -q, N = -x:
//   cosine    lr * (f + (1 - f) * (1 + cos(pi p)) / 2)  with p = (step - u) / (N - u)
//   linear    lr * (f + (1 - f) * (1 - p))              (the same p)
//   constant  lr
//   wsd       warmup, stable, decay: lr until step D = N - round(-w * N) (not before the warmup
//             ends), then lr * (f + (1 - f) * (1 - sqrt(p))) with p = (step - D) / (N - D): the
//             decay drops fastest at its start and flattens towards f * lr
// p never reaches 1 (the last step is N - 1), so the learning rate of the last step is a little
// above f * lr, as in the cosine schedule of llm.c.
static inline int wsd_decay_start(const TrainArgs* a) {
    int start = a->max_steps - (int)lround((double)a->wsd_decay_frac * a->max_steps);
    return start > a->warmup_steps ? start : a->warmup_steps;
}

static inline float learning_rate_at(const TrainArgs* a, int step) {
    float lr = a->learning_rate, f = a->final_lr_frac;
    if (step < a->warmup_steps) { return lr * (float)(step + 1) / (float)a->warmup_steps; }
    int decay_start = a->lr_schedule == LR_WSD ? wsd_decay_start(a) : a->warmup_steps;
    if (a->lr_schedule == LR_CONSTANT || step < decay_start || a->max_steps <= decay_start) { return lr; }
    float p = (float)(step - decay_start) / (float)(a->max_steps - decay_start);
    float left;  // the part of the way from f * lr to lr still left: 1 at p = 0, 0 at p = 1
    switch (a->lr_schedule) {
        case LR_COSINE: left = 0.5f * (1.0f + cosf((float)M_PI * p)); break;
        case LR_LINEAR: left = 1.0f - p; break;
        default: left = 1.0f - sqrtf(p); break;  // LR_WSD
    }
    return lr * (f + (1.0f - f) * left);
}

// the factor that clips the gradient to norm GRAD_CLIP (1 when it is below), as torch's
// clip_grad_norm_; it reaches AdamW as grad_scale, the gradients in memory stay as they are
static inline float grad_clip_scale(float norm, float clip) {
    float coef = clip / (norm + 1e-6f);
    return coef < 1.0f ? coef : 1.0f;
}

// start-up notes on flags that do not do what they may seem to: a warmup longer than the run,
// -w with a schedule other than wsd, -q with constant, -n or -nk without an output folder
static inline void start_up_notes(const TrainArgs* a) {
    if (a->warmup_steps > a->max_steps) {
        printf("note: warmup -u %d is longer than the run -x %d: the learning rate ends at %g, not at -l %g\n",
               a->warmup_steps, a->max_steps, learning_rate_at(a, a->max_steps - 1), a->learning_rate);
    }
    if (a->wsd_decay_frac_given && a->lr_schedule != LR_WSD) {
        printf("note: -w %g is ignored: it sets the decay of -K wsd, and the schedule is -K %s\n", a->wsd_decay_frac,
               LR_SCHEDULE_NAMES[a->lr_schedule]);
    }
    if (a->final_lr_frac_given && a->lr_schedule == LR_CONSTANT) {
        printf("note: -q %g is ignored: -K constant does not decay\n", a->final_lr_frac);
    }
    if (a->output_dir[0] == '\0' && a->checkpoint_every > 0) {
        printf("note: -n %d is ignored: without an output folder -o no checkpoint is written\n", a->checkpoint_every);
    }
    if (a->output_dir[0] == '\0' && a->keep_checkpoints > 0) {
        printf("note: -nk %d is ignored: without an output folder -o no checkpoint is written\n", a->keep_checkpoints);
    }
}

// a resumed run with another -x than the one its checkpoints were written with: the schedule is
// stretched or squeezed, so the learning rate jumps at the resume; says by how much
static inline void lr_schedule_resume_note(const TrainState* st, const TrainArgs* a) {
    if (st->max_steps > 0 && st->max_steps != a->max_steps && st->step < a->max_steps) {
        TrainArgs planned = *a;
        planned.max_steps = st->max_steps;
        printf("note: the run was planned with -x %d; with -x %d the learning rate at step %d is %.3e, not %.3e\n",
               st->max_steps, a->max_steps, st->step + 1, learning_rate_at(a, st->step),
               learning_rate_at(&planned, st->step));
    }
}

// flags, the output folder and the data folder; decides which model main() builds. Call it first
// in main() on the CPU: it may run the program again with OMP_WAIT_POLICY set (train_common.h).
static inline void train_run_setup(TrainRun* r, int argc, char** argv) {
    openmp_wait_passively(argv);  // OpenMP threads that sleep while they wait, unless the user chose
    setvbuf(stdout, NULL, _IOLBF, 0);  // one step line at a time, also into a pipe or a file
    memset(r, 0, sizeof(*r));
    dist_init(&r->dist);  // one of several ranks under mpirun (the others print nothing)
    r->args = args_defaults();
    args_parse(&r->args, argc, argv);
    r->adamw.weight_decay = r->args.weight_decay;
    start_up_notes(&r->args);
    r->have_output = r->args.output_dir[0] != '\0';
    // the output folder, read only (train_run_loop creates and locks it, so a run that fails to
    // start leaves nothing there): resume from it, or refuse to overwrite an earlier run in it; the
    // data folder: the default dataset (made by rank 0), the tokenizer, arithmetic
    if (r->dist.rank == 0) {
        r->resume_step = output_dir_inspect(&r->args);
        run_data_prepare(&r->data, &r->args);
    }
    dist_broadcast_int(&r->dist, &r->resume_step);  // the other ranks wait for rank 0 here
    if (r->dist.rank > 0) { run_data_prepare(&r->data, &r->args); }
    // the model: the checkpoint to resume from, a fresh model (-e dN, dNcC or dNcChH) whose
    // vocabulary is the tokenizer's (257 for the arithmetic data), else GPT-2's, or a checkpoint file
    if (r->resume_step >= 0) {
        checkpoint_paths(r->args.output_dir, r->resume_step, r->model_path, r->state_path, sizeof(r->model_path));
    } else if (args_fresh_config(&r->args, run_data_vocab_size(&r->data), &r->fresh_config)) {
        r->fresh = 1;
    } else {
        snprintf(r->model_path, sizeof(r->model_path), "%s", r->args.init);
    }
    if (r->args.norm_mode_given && !r->fresh) {
        printf("note: -N %s is ignored: the model comes from a checkpoint, which carries its own norm mode\n",
               r->args.norm_mode);
    }
}

// The multiple-choice eval of -H (common/eval.h), at every validation: the file is read and checked
// here, before the run starts, against the model's vocabulary and -t (an example longer than -t is
// an error; the default file, which belongs to the arithmetic data, is left out with a note).
// Returns whether it runs.
static inline int train_eval_init(TrainRun* r) {
    const TrainArgs* a = &r->args;
    if (a->eval_file[0] == '\0' || a->val_every <= 0) { return 0; }
    EvalSet* e = &r->eval;
    eval_set_load(e, a->eval_file, r->config->vocab_size, a->eval_file_given ? a->T : 0);
    if (e->longest > a->T) {
        printf("note: no multiple-choice eval: %s needs -t >= %d\n", a->eval_file, e->longest);
        eval_set_free(e);
        return 0;
    }
    r->eval_inputs = (int*)malloc_check((size_t)a->B * a->T * sizeof(int), "eval inputs");
    r->eval_targets = (int*)malloc_check((size_t)a->B * a->T * sizeof(int), "eval targets");
    printf("multiple-choice eval: %s, %d examples, %ld completions, mean loss of each completion\n", a->eval_file,
           e->num_examples, e->num_rows);
    return 1;
}

// the model is built (not yet allocated): checks the flags against it, opens the data, and prints
// the model and batch lines. `batch_note` ends the batch line (the CPU's thread count, say).
static inline void train_run_attach_model(TrainRun* r, const GPT2Config* cfg, size_t num_parameters,
                                          const char* batch_note) {
    TrainArgs* a = &r->args;
    r->config = cfg;
    r->num_parameters = num_parameters;
    args_check_model(a, cfg);
    // several ranks: of every `ranks` windows of B*T tokens of the data each reads its own (the
    // ranks of a step read the windows one process reads), and the parameters are cut into one
    // shard per rank (common/dist.h)
    Dist* d = &r->dist;
    long per_micro = (long)a->B * a->T * d->size;
    if (!a->total_batch_given) { a->total_batch = per_micro; }  // -d not given: no accumulation
    if (a->total_batch % per_micro != 0) {
        fatal("total batch -d %ld does not split over %d ranks: it must be a multiple of B*T*ranks = %d*%d*%d = %ld",
              a->total_batch, d->size, a->B, a->T, d->size, per_micro);
    }
    dist_attach(d, num_parameters);
    int sharded = d->size > 1 && a->zero_stage == 1;
    r->opt_lo = sharded ? d->lo : 0;
    r->opt_hi = sharded ? d->hi : num_parameters;
    dataloader_init(&r->train_loader, a->train_pattern, a->B, a->T, cfg->vocab_size, d->rank, d->size);
    run_data_order(&r->train_loader, a);  // -S: the batches start at a seeded position
    r->have_val = a->val_pattern[0] != '\0' && a->val_every > 0;
    if (r->have_val) {
        dataloader_init(&r->val_loader, a->val_pattern, a->B, a->T, cfg->vocab_size, 0, 1);
        // one pass at most: more batches than the data holds would average repeats
        long windows = dataloader_windows(&r->val_loader);
        if (a->val_batches > windows) {
            printf("note: -m %d is more than the validation data holds: %ld batches of B*T = %ld tokens, each once\n",
                   a->val_batches, windows, dataloader_window(&r->val_loader));
            a->val_batches = (int)windows;
        }
    }
    r->have_eval = train_eval_init(r);
    if (!r->data.tokenizer.loaded && a->sample_every > 0) { tokenizer_print_notice(&r->data.tokenizer, stdout); }
    r->grad_accum = (int)(a->total_batch / per_micro);
    printf("model: %s | L %d | C %d | NH %d | V %d (padded %d) | max T %d | %zu parameters\n",
           NORM_MODE_NAMES[cfg->norm_mode], cfg->num_layers, cfg->channels, cfg->num_heads, cfg->vocab_size,
           cfg->padded_vocab_size, cfg->max_seq_len, num_parameters);
    char ranks[96] = "";
    if (d->size > 1) {
        snprintf(ranks, sizeof(ranks), " | %d ranks (AdamW state %s)", d->size,
                 sharded ? "sharded, ZeRO-1" : "on every rank");
    }
    printf("batch: B %d | T %d | total %ld tokens | grad accum %d%s%s\n", a->B, a->T, a->total_batch, r->grad_accum,
           ranks, batch_note);
}

static inline void train_run_free(TrainRun* r) {
    if (r->have_eval) {
        eval_set_free(&r->eval);
        free(r->eval_inputs);
        free(r->eval_targets);
    }
    tokenizer_free(&r->data.tokenizer);
    dataloader_free(&r->train_loader);
    if (r->have_val) { dataloader_free(&r->val_loader); }
    dist_free(&r->dist);
}

// ----------------------------------------------------------------------------
// evaluation and sampling, through the trainer's forward pass

// the mean loss over the first `batches` batches of the loader; with several ranks, rank r
// evaluates batches r, r + ranks, ... and the losses are added in batch order, as one process does
static inline float train_evaluate(const TrainerOps* ops, GPT2* model, DataLoader* loader, int B, int T, int batches,
                                   Dist* d) {
    dataloader_reset(loader);
    double* losses = (double*)calloc_check((size_t)batches, sizeof(double), "validation losses");
    for (int i = 0; i < batches; i++) {
        dataloader_next_batch(loader);
        if (i % d->size == d->rank) { losses[i] = ops->forward(model, loader->inputs, loader->targets, B, T); }
    }
    dist_share(d, losses, batches);
    double sum = 0.0;
    for (int i = 0; i < batches; i++) { sum += losses[i]; }
    free(losses);
    return (float)(sum / batches);
}

// samples `n` tokens after an end-of-text prompt, one full forward pass per token over a window of
// at most T tokens (there is no KV cache: this is for a glimpse of the model, not for speed)
static inline void train_sample_text(const TrainerOps* ops, GPT2* model, const GPT2Config* cfg, Tokenizer* tok, int T,
                                     int n, uint64_t* rng) {
    int V = cfg->vocab_size;
    int* seq = (int*)malloc_check((size_t)(n + 1) * sizeof(int), "sample tokens");
    float* probs = (float*)malloc_check((size_t)V * sizeof(float), "sample probabilities");
    seq[0] = tokenizer_prompt_token(tok, V);
    TokenPrinter tp;
    token_printer_init_escaped(&tp, tok, stdout);  // control bytes and invalid UTF-8 as \xNN
    printf("generating:\n---\n");
    for (int i = 1; i <= n; i++) {
        int start = i > T ? i - T : 0;
        int len = i - start;
        ops->forward(model, seq + start, NULL, 1, len);
        const float* logits = ops->logits_row(model, (size_t)(len - 1));
        float maxval = -INFINITY, sum = 0.0f;
        for (int j = 0; j < V; j++) { if (logits[j] > maxval) { maxval = logits[j]; } }
        for (int j = 0; j < V; j++) { probs[j] = expf(logits[j] - maxval); sum += probs[j]; }
        for (int j = 0; j < V; j++) { probs[j] /= sum; }
        seq[i] = sample_from_probs(probs, V, random_f32(rng));
        token_printer_put(&tp, seq[i]);
    }
    token_printer_flush(&tp);
    printf("\n---\n");
    free(seq);
    free(probs);
}

// the ArithGreedyFn of common/arithmetic.h: next[b] = the most likely token after the first
// lengths[b] tokens of row b of tokens (B, T). Its context is also the multiple-choice eval's.
typedef struct {
    const TrainerOps* ops;
    GPT2* model;
    int vocab_size;
} GreedyContext;

// the EvalLossesFn of common/eval.h: one forward pass with targets, its losses
static inline const float* train_eval_losses(void* ctx, const int* inputs, const int* targets, int B, int T) {
    GreedyContext* g = (GreedyContext*)ctx;
    g->ops->forward(g->model, inputs, targets, B, T);
    return g->ops->losses;
}

// the multiple-choice eval: each rank evaluates its contiguous share of the examples (as
// dist_shard cuts parameters), the right answers are summed over the ranks
static inline long train_eval_choices(TrainRun* r, GreedyContext* g) {
    size_t lo, hi;
    dist_shard((size_t)r->eval.num_examples, r->dist.rank, r->dist.size, &lo, &hi);
    // rows of the longest example's tokens (at most -t): the forward passes read no padding beyond
    int correct = eval_run(&r->eval, (int)lo, (int)hi, train_eval_losses, g, r->args.B, r->eval.longest,
                           r->eval_inputs, r->eval_targets);
    return lround(dist_sum(&r->dist, (double)correct));
}

static inline void train_greedy_next(void* ctx, const int* tokens, int B, int T, const int* lengths, int* next) {
    GreedyContext* g = (GreedyContext*)ctx;
    g->ops->forward(g->model, tokens, NULL, B, T);
    for (int b = 0; b < B; b++) {
        const float* logits = g->ops->logits_row(g->model, (size_t)b * T + lengths[b] - 1);
        int best = 0;
        for (int j = 1; j < g->vocab_size; j++) { if (logits[j] > logits[best]) { best = j; } }
        next[b] = best;
    }
}

// writes the checkpoint pair of `st->step` (state first, model second: common/state.h). With
// several ranks every rank's shard of the weights and moments is gathered on rank 0, which writes.
static inline void train_write_checkpoint(TrainRun* r, const TrainerOps* ops, GPT2* model, const TrainState* st) {
    Dist* d = &r->dist;
    const float* w = ops->weights(model);
    const float *m, *v;
    ops->moments(model, &m, &v);
    float* gathered = NULL;
    if (d->size > 1) {
        size_t n = r->num_parameters, skip = d->lo - r->opt_lo;  // this rank's shard within what it holds
        if (d->rank == 0) { gathered = (float*)malloc_check(3 * n * sizeof(float), "gathered checkpoint"); }
        dist_gather_to_root(d, w + d->lo, gathered);
        dist_gather_to_root(d, m + skip, gathered ? gathered + n : NULL);
        dist_gather_to_root(d, v + skip, gathered ? gathered + 2 * n : NULL);
        w = gathered;
        m = gathered ? gathered + n : NULL;
        v = gathered ? gathered + 2 * n : NULL;
    }
    if (d->rank == 0) {
        char model_path[1100], state_path[1100];
        checkpoint_paths(r->args.output_dir, st->step, model_path, state_path, sizeof(model_path));
        state_write(state_path, st, m, v);
        checkpoint_write(model_path, r->config, w);
        remove_old_checkpoints(r->args.output_dir, r->args.keep_checkpoints);
        printf("wrote %s and %s\n", model_path, state_path);
    }
    free(gathered);
}

// reads the state file of a resume: every rank reads it (the output folder is at the same path on
// every machine) and keeps the moments of the parameters it holds
static inline void train_read_state(TrainRun* r, const TrainerOps* ops, GPT2* model, TrainState* st) {
    size_t n = r->num_parameters;
    float* m = (float*)malloc_check(2 * n * sizeof(float), "AdamW moments (resume)");
    state_read(r->state_path, st, m, m + n, n);
    ops->load_moments(model, m + r->opt_lo, m + n + r->opt_lo);
    free(m);
}

// One optimizer step's gradients, summed over the ranks (reduce-scatter: in rank order on the host
// path, in NCCL's order with NCCL, common/dist.h), then their global norm (squares summed over each rank's shard, then over the ranks in rank order). With
// one rank this is the norm of the gradients. With -z 0 the summed shards go to every rank.
static inline float train_reduce_gradients(TrainRun* r, const TrainerOps* ops, GPT2* model) {
    Dist* d = &r->dist;
    float* grads = d->size > 1 ? ops->grads : NULL;
    dist_reduce_scatter(d, grads);
    float norm = (float)sqrt(dist_sum(d, ops->grad_sumsq(model, d->lo, d->hi)));
    if (r->opt_hi - r->opt_lo == r->num_parameters) { dist_all_gather(d, grads, sizeof(float)); }
    return norm;
}

// one AdamW step (t is 1-based): of the parameters whose moments this rank holds; a rank holding a
// shard then hands its updated weights to the others
static inline void train_update(TrainRun* r, const TrainerOps* ops, GPT2* model, float lr, float grad_scale, int t) {
    const AdamWSettings* w = &r->adamw;
    ops->update(model, lr, w->beta1, w->beta2, w->eps, w->weight_decay, grad_scale, t, r->opt_lo, r->opt_hi);
    if (r->opt_hi - r->opt_lo < r->num_parameters) {
        dist_all_gather(&r->dist, ops->working_weights, ops->working_bytes);
    }
}

// model FLOPs of one training token (forward + backward): 6 per parameter, plus attention's
// q.k^T and att.v (12 L C T: 2 matmuls x 2 flops x 3 for forward + backward, per layer)
static inline double train_flops_per_token(const TrainRun* r) {
    return 6.0 * (double)r->num_parameters + 12.0 * r->config->num_layers * (double)r->config->channels * r->args.T;
}

// ----------------------------------------------------------------------------
// how long the run will take, said once the first steps are timed

#define ESTIMATE_STEPS 5  // steps timed before the estimate, after the run's first (caches, libraries warm up)

typedef struct {
    int first_step;        // the run's first step (0, or the step resumed from), not timed
    int steps_timed;
    double step_seconds;   // summed over the timed steps
    double eval_seconds;   // the first evaluation (validation loss and accuracy), -1 before it
} RunEstimate;

// called after each step with its time; after ESTIMATE_STEPS timed steps prints the estimate: the
// steps left at their mean time, plus the evaluations left at the time the first one took
static inline void run_estimate_step(RunEstimate* e, const TrainRun* r, int evaluates, int step, double seconds) {
    const TrainArgs* a = &r->args;
    if (step == e->first_step || e->steps_timed >= ESTIMATE_STEPS) { return; }
    e->step_seconds += seconds;
    if (++e->steps_timed < ESTIMATE_STEPS || r->dist.rank != 0) { return; }
    int steps_left = a->max_steps - (step + 1);
    if (steps_left == 0) { return; }  // a run of ESTIMATE_STEPS + 1 steps: nothing left to estimate
    // evaluations at the steps step+1..max_steps that are multiples of -v, and at the last
    int evals_left = !evaluates ? 0 : a->max_steps / a->val_every - step / a->val_every +
                                          (a->max_steps % a->val_every != 0);
    double eval = e->eval_seconds > 0 ? e->eval_seconds : 0.0;
    double left = steps_left * (e->step_seconds / e->steps_timed) + evals_left * eval;
    char evals[96] = "";
    if (evals_left > 0) { snprintf(evals, sizeof(evals), ", %d evaluations at %.1f s", evals_left, eval); }
    long s = lround(left);
    char total[48] = "";
    if (s >= 60) { snprintf(total, sizeof(total), " (%ld min %02ld s)", s / 60, s % 60); }
    printf("run will take about %ld s more%s: %d steps at %.0f ms%s; sampling and checkpoints not counted\n", s, total,
           steps_left, 1000.0 * e->step_seconds / e->steps_timed, evals);
}

// the step line on stdout and in main.log: loss, gradient norm, learning rate, time, throughput
// and, where the trainer knows its device's peak (ops->peak_flops), the model FLOPs utilisation
static inline void train_report_step(Logger* lg, const TrainRun* r, const TrainerOps* ops, int step, double loss,
                                     float norm, float lr, double seconds) {
    const TrainArgs* a = &r->args;
    double ms = seconds * 1000.0, tok_s = a->total_batch / seconds;
    char mfu_line[64] = "", mfu_log[64] = "";
    if (ops->peak_flops > 0) {
        double mfu = 100.0 * train_flops_per_token(r) * (double)a->total_batch / seconds / ops->peak_flops;
        snprintf(mfu_line, sizeof(mfu_line), " | MFU %.1f%%", mfu);
        snprintf(mfu_log, sizeof(mfu_log), " mfu=%.2f", mfu);
    }
    printf("step %d/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms | %.0f tok/s%s\n", step + 1, a->max_steps, loss, norm,
           lr, ms, tok_s, mfu_line);
    logger_line(lg, "step=%d train_loss=%.6f norm=%.4f lr=%.4e ms=%.2f tok_per_s=%.0f%s", step + 1, loss, norm, lr, ms,
                tok_s, mfu_log);
}

// ----------------------------------------------------------------------------
// the loop

#ifdef TEST_HOOKS
#include "test_hooks.h"  // test builds only: faults the tests plant (TRAIN_GPT2_NAN_STEPS)
#endif

// Runs the steps from the resumed step (or 0) to -x: at every evaluation step the validation loss,
// the multiple-choice accuracy and the arithmetic accuracy, at every sampling step a sample, at
// every checkpoint step a checkpoint, and between them one optimizer step of grad_accum
// micro-batches, gradient clipping and AdamW.
static inline void train_run_loop(TrainRun* r, const TrainerOps* ops, GPT2* model) {
    const TrainArgs* a = &r->args;
    const GPT2Config* cfg = r->config;
    if (!(r->adamw.beta2 > 0.0f && r->adamw.eps > 0.0f)) { fatal("train_run_loop: main() set no AdamW betas and eps"); }
#ifdef TEST_HOOKS
    TrainerOps hooked = test_hooks_wrap(ops, r->resume_step >= 0 ? r->resume_step : 0);
    ops = &hooked;
#endif
    // the run starts: rank 0 creates the output folder and holds its lock from here on
    if (r->dist.rank == 0) { output_dir_claim(a, r->resume_step); }
    // arithmetic data: exact-match accuracy on held-out problems at every validation
    ArithEval arith_eval;
    int have_arith = run_arith_eval_init(&arith_eval, &r->data, a, cfg);
    GreedyContext greedy = {ops, model, cfg->vocab_size};

    // the training state: fresh, or read back with the optimizer moments and the data position
    TrainState st;
    memset(&st, 0, sizeof(st));
    st.num_parameters = (long)r->num_parameters;
    st.sample_rng = a->seed;
    if (r->resume_step >= 0) {
        train_read_state(r, ops, model, &st);
        resume_check_state(&st, a, r->state_path, r->resume_step);
        lr_schedule_resume_note(&st, a);
        dataloader_set_position(&r->train_loader, st.shard_index, st.shard_offset);
        printf("resumed from %s at step %d\n", r->model_path, st.step);
        if (st.step >= a->max_steps) {
            // nothing to do: the loop below runs no step, and everything is freed as after a run
            printf("note: the run is already complete (step %d, -x %d); nothing to do\n", st.step, a->max_steps);
        }
    }
    st.max_steps = a->max_steps;  // the schedule the checkpoints of this run follow
    st.B = a->B;
    st.T = a->T;
    st.total_batch = a->total_batch;
    Logger logger;
    logger_init(&logger, r->dist.rank == 0 ? a->output_dir : "", a->resume);  // rank 0 alone logs
    int evaluates = r->have_val || have_arith || r->have_eval;
    RunEstimate estimate = {st.step, 0, 0.0, -1.0};
    // the device may hold queued work no step has waited for (the model's upload, an evaluation):
    // the next step's clock starts only once it is done
    int queued = 1;

    for (int step = st.step; step <= a->max_steps; step++) {
        int last = step == a->max_steps;
        // at the step we resumed from, evaluation, sampling and the checkpoint already happened
        if (step != r->resume_step) {
            if (evaluates && (step % a->val_every == 0 || last)) {
                queued = 1;
                double eval_start = now_seconds();
                float val_loss = r->have_val ? train_evaluate(ops, model, &r->val_loader, a->B, a->T, a->val_batches,
                                                              &r->dist) : 0.0f;
                long eval_correct = r->have_eval ? train_eval_choices(r, &greedy) : 0;
                run_report_evaluation(&logger, step, last, r->have_val, val_loss, eval_correct,
                                      r->have_eval ? r->eval.num_examples : 0, have_arith ? &arith_eval : NULL,
                                      train_greedy_next, &greedy);
                if (estimate.eval_seconds < 0) { estimate.eval_seconds = now_seconds() - eval_start; }
            }
            if (r->dist.rank == 0 && a->sample_every > 0 && a->gen_tokens > 0 &&
                ((step > 0 && step % a->sample_every == 0) || last)) {
                queued = 1;
                train_sample_text(ops, model, cfg, &r->data.tokenizer, a->T, a->gen_tokens, &st.sample_rng);
            }
            if (r->have_output && step > 0 && (last || (a->checkpoint_every > 0 && step % a->checkpoint_every == 0))) {
                queued = 1;
                st.step = step;
                st.shard_index = r->train_loader.shard_index;
                st.shard_offset = r->train_loader.shard_offset;
                train_write_checkpoint(r, ops, model, &st);
            }
        }
        if (last) { break; }

        // one optimizer step: grad_accum micro-batches (on every rank), the gradients summed over
        // the ranks, the step's learning rate and clip, then AdamW. The device waits (ops->sync) are those of the clock: one
        // where the step ends, and one before it starts only when something else ran in between.
        if (ops->sync && queued) { ops->sync(model); }
        double t0 = now_seconds();
        ops->zero_grad(model);
        double loss = 0.0;
        int micro_total = r->grad_accum * r->dist.size;  // over all ranks
        for (int micro = 0; micro < r->grad_accum; micro++) {
            dataloader_next_batch(&r->train_loader);
            loss += ops->forward(model, r->train_loader.inputs, r->train_loader.targets, a->B, a->T) / micro_total;
            ops->backward(model, 1.0f / micro_total);
        }
        loss = dist_sum(&r->dist, loss);
        float norm = train_reduce_gradients(r, ops, model);
        float lr = learning_rate_at(a, step);
        if (isfinite(loss) && isfinite(norm)) {
            st.nonfinite_in_a_row = 0;
            st.updates++;
            train_update(r, ops, model, lr, grad_clip_scale(norm, GRAD_CLIP), st.updates);
            if (ops->sync) { ops->sync(model); }
            queued = 0;
            double seconds = now_seconds() - t0;
            train_report_step(&logger, r, ops, step, loss, norm, lr, seconds);
            run_estimate_step(&estimate, r, evaluates, step, seconds);
        } else {
            nonfinite_step(&logger, a, &st, step, loss, norm);  // skip the update; several in a row stop the run
        }
    }

    logger_free(&logger);
    if (have_arith) { arith_eval_free(&arith_eval); }
}

#endif // COMMON_TRAIN_LOOP_H
