/*
common/args.h: the command line shared by train_gpt2 (CPU) and train_gpt2cu (GPU).

Flags are llm.c-style pairs "-x VALUE" (one letter, then its value). Every value is parsed
strictly (no trailing characters, no overflow) and checked for range here, so that an absurd flag
ends the program with a one-line error before any memory is allocated. Checks that need the
model (T against its maximum sequence length) happen once the model is known: args_check_model.
*/
#ifndef COMMON_ARGS_H
#define COMMON_ARGS_H

#include <limits.h>
#include "arithmetic.h"
#include "params.h"

// a run stops after this many consecutive steps with a non-finite loss or gradient norm
#define MAX_NONFINITE_STEPS 5

// the learning-rate schedules of -K (their formulas: learning_rate_at in common/train_loop.h)
typedef enum { LR_COSINE, LR_LINEAR, LR_CONSTANT, LR_WSD, NUM_LR_SCHEDULES } LrSchedule;
static const char* const LR_SCHEDULE_NAMES[NUM_LR_SCHEDULES] = {"cosine", "linear", "constant", "wsd"};

typedef struct {
    const char* train_pattern;  // -i  training token shards (glob)
    const char* val_pattern;    // -j  validation token shards (glob), "" = no validation
    const char* init;           // -e  checkpoint path, or a fresh model: dN, dNcC, dNcChH (see args_fresh_shape)
    const char* norm_mode;      // -N  norm mode of a fresh model: pre | post | siamese
    int norm_mode_given;        //     -N was on the command line (a checkpoint's own mode overrides it)
    const char* output_dir;     // -o  folder for the log file and checkpoints, "" = none
    int B;                      // -b  micro-batch size (sequences)
    int T;                      // -t  sequence length
    long total_batch;           // -d  tokens per optimizer step, -1 = B*T (no accumulation)
    int total_batch_given;      //     -d was given (without it, several ranks take B*T each: B*T*ranks)
    float learning_rate;        // -l  peak learning rate
    int warmup_steps;           // -u  linear warmup steps
    float final_lr_frac;        // -q  lr at the end of the decay, as a fraction of -l
    int final_lr_frac_given;    //     -q was given (-K constant has no decay: a note says so)
    LrSchedule lr_schedule;     // -K  cosine | linear | constant | wsd (after the warmup)
    float wsd_decay_frac;       // -w  wsd: the final fraction of the -x steps that decays
    int wsd_decay_frac_given;   //     -w was given (another -K than wsd ignores it: a note says so)
    float weight_decay;         // -c  AdamW weight decay (matrices and embeddings only)
    int max_steps;              // -x  optimizer steps
    int val_every;              // -v  validation every N steps, 0 = never
    int val_batches;            // -m  batches per validation
    int sample_every;           // -s  sample text every N steps, 0 = never
    int gen_tokens;             // -g  tokens to generate when sampling
    int checkpoint_every;       // -n  checkpoint every N steps (and at the end), 0 = only at the end
    int resume;                 // -y  1 = resume from the newest checkpoint in -o
    int keep_checkpoints;       // -nk keep only the newest N checkpoints, 0 = keep all
    int arith_problems;         // -k  held-out problems for the arithmetic accuracy, 0 = none
    const char* eval_file;      // -H  multiple-choice eval file (llm.c's HellaSwag format, common/eval.h), "" = none
    int eval_file_given;        //     -H was on the command line (the default belongs to the arithmetic data)
    unsigned long long seed;    // -S  seed of fresh initialisation, sampling and (when given) the data order
    int seed_given;             //     -S was given: the training batches start at a seed-dependent position
    int zero_stage;             // -z  with several ranks: 1 = AdamW state sharded over them (ZeRO-1), 0 = not
    int recompute;              // -r  activations rebuilt in the backward instead of kept: 0 none, 1 GELU,
                                //     2 GELU and the LayerNorm outputs, 3 (train_gpt2cu only) also stream Y
                                //     between checkpoints (same results, bit for bit); 0 to RECOMPUTE_MAX
} TrainArgs;

// -r's highest level: 2 in train_gpt2.c; train_gpt2.cu defines 3 before it includes this header
#ifndef RECOMPUTE_MAX
#define RECOMPUTE_MAX 2
#endif

// defaults shared by both trainers; each trainer may change some before parsing. They train a
// small model on the default dataset (synthetic additions, common/arithmetic.h) to about 100%
// held-out accuracy in a minute or two on a 2-core CPU: a 3-layer model of 64 channels, 1500 steps
// of 16 x 60 tokens (60 = 6 problems of 10 tokens, so that every row starts with the newline
// before a problem), lr 3e-3 with 50 warmup steps and a cosine decay to 3e-4, validation loss and
// held-out accuracy every 250 steps. Chosen by measurement: doc/data.md, "What the default run gives".
static inline TrainArgs args_defaults(void) {
    TrainArgs a;
    // the default dataset: synthetic additions, generated on first use (common/arithmetic.h)
    a.train_pattern = ARITH_DEFAULT_TRAIN;
    a.val_pattern = ARITH_DEFAULT_VAL;
    a.init = "d3c64h4";  // 3 layers, C 64, 4 heads: 0.24M parameters with the 257 byte tokens (d12 is GPT-2 124M)
    a.norm_mode = "siamese";
    a.norm_mode_given = 0;
    a.output_dir = "";
    a.B = 16;
    a.T = 60;  // a multiple of the default problems' 10 tokens (ARITH_PAD in common/arithmetic.h)
    a.total_batch = -1;
    a.total_batch_given = 0;
    a.learning_rate = 3e-3f;
    a.warmup_steps = 50;
    a.final_lr_frac = 0.1f;
    a.final_lr_frac_given = 0;
    a.lr_schedule = LR_COSINE;
    a.wsd_decay_frac = 0.2f;
    a.wsd_decay_frac_given = 0;
    a.weight_decay = 0.0f;
    a.max_steps = 1500;
    a.val_every = 250;
    a.val_batches = 20;
    a.sample_every = 500;
    a.gen_tokens = 64;
    a.checkpoint_every = 0;
    a.resume = 0;
    a.keep_checkpoints = 0;
    a.arith_problems = 256;
    a.eval_file = ARITH_DEFAULT_CHOICES;
    a.eval_file_given = 0;
    a.seed = 1337;
    a.seed_given = 0;
    a.zero_stage = 1;
    a.recompute = 1;  // as llm.c
    return a;
}

static inline void args_usage(const char* prog, const TrainArgs* d) {
    printf("Usage: %s [options]\n", prog);
    printf("Trains a GPT-2 with Pre-Norm, Post-Norm or SiameseNorm residual streams.\n");
    printf("Options (defaults in brackets):\n");
    printf("  -i <glob>   train token shards [%s]\n", d->train_pattern);
    printf("              (the default, synthetic additions, is generated when missing)\n");
    printf("  -j <glob>   val token shards, \"\" for none [%s]\n", d->val_pattern);
    printf("  -e <init>   checkpoint file, or a fresh model dN, dNcC or dNcChH [%s]\n", d->init);
    printf("              (N layers; d12/d24/d36/d48 alone: GPT-2 124M/350M/774M/1558M widths, other dN:\n");
    printf("              C=64N, NH=N; cC sets the channels, hH the heads, default max(1, C/64);\n");
    printf("              e.g. d24c128h4: 24 layers, C=128, 4 heads)\n");
    printf("              (a fresh model's vocabulary: the data's tokenizer.bin, else GPT-2's 50257)\n");
    printf("  -N <mode>   norm mode of a fresh model: pre | post | siamese [%s]\n", d->norm_mode);
    printf("  -S <int>    seed (>= 1) of a fresh model, of sampling and of the data order [%llu, data in order]\n",
           d->seed);
    printf("              (with -S the training batches start at a position chosen by the seed)\n");
    printf("  -o <dir>    output folder for main.log and checkpoints, \"\" for none [%s]\n", d->output_dir);
    printf("  -b <int>    micro-batch size [%d]\n", d->B);
    printf("  -t <int>    sequence length [%d]\n", d->T);
    printf("  -d <int>    total batch in tokens, -1 for B*T (B*T*ranks with mpirun) [%ld]\n", d->total_batch);
    printf("  -l <float>  peak learning rate [%g]\n", d->learning_rate);
    printf("  -u <int>    warmup steps [%d]\n", d->warmup_steps);
    printf("  -K <name>   learning-rate schedule after the warmup: cosine | linear | constant | wsd [%s]\n",
           LR_SCHEDULE_NAMES[d->lr_schedule]);
    printf("              (cosine, linear: from -l down to -q times -l at step -x; constant: -l; wsd: -l,\n");
    printf("              then down to -q times -l over the last -w of the steps, along 1 - sqrt)\n");
    printf("  -q <float>  final learning rate as a fraction of -l (cosine, linear, wsd) [%g]\n", d->final_lr_frac);
    printf("  -w <float>  wsd: the fraction of the -x steps at the end that decays [%g]\n", d->wsd_decay_frac);
    printf("  -c <float>  weight decay [%g]\n", d->weight_decay);
    printf("  -x <int>    number of optimizer steps [%d]\n", d->max_steps);
    printf("  -v <int>    validate every N steps, 0 = never [%d]\n", d->val_every);
    printf("  -m <int>    validation batches, at most one pass over the data [%d]\n", d->val_batches);
    printf("  -s <int>    sample every N steps, 0 = never [%d]\n", d->sample_every);
    printf("  -g <int>    tokens to generate when sampling [%d]\n", d->gen_tokens);
    printf("  -k <int>    arithmetic data: held-out problems for the accuracy at each validation [%d]\n", d->arith_problems);
    printf("  -H <file>   multiple-choice eval at each validation (llm.c's HellaSwag file), \"\" for none [%s]\n",
           d->eval_file);
    printf("              (the default belongs to the arithmetic data: with -i, only when given)\n");
    printf("  -n <int>    checkpoint every N steps (and at the end), 0 = only at the end [%d]\n", d->checkpoint_every);
    printf("  -y <0|1>    resume from the newest complete checkpoint in -o [%d]\n", d->resume);
    printf("  -nk <int>   keep only the newest N checkpoints, 0 = keep all [%d]\n", d->keep_checkpoints);
    printf("  -z <0|1>    several ranks (mpirun): 1 shards AdamW's state over them (ZeRO-1) [%d]\n", d->zero_stage);
#if RECOMPUTE_MAX >= 3
    printf("  -r <0..3>   recompute in the backward instead of keeping: 1 the GELU outputs, 2 also the LayerNorm\n");
    printf("              outputs, 3 also stream Y (siamese) but at about sqrt(2L+1) of the 2L+1 sublayer\n");
    printf("              boundaries (less activation memory, the same results bit for bit) [%d]\n", d->recompute);
#else
    printf("  -r <0..2>   recompute in the backward instead of keeping: 1 the GELU outputs, 2 also the LayerNorm\n");
    printf("              outputs (less activation memory, the same results bit for bit) [%d]\n", d->recompute);
#endif
    printf("  -h          this help\n");
}

// strict parsing: the whole string must be a number in [lo, hi]
static inline long parse_long_flag(const char* flag, const char* s, long lo, long hi) {
    char* end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') { fatal("%s expects an integer, got '%s'", flag, s); }
    if (v < lo || v > hi) { fatal("%s %ld is out of range [%ld, %ld]", flag, v, lo, hi); }
    return v;
}

static inline float parse_float_flag(const char* flag, const char* s, double lo, double hi) {
    char* end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v)) { fatal("%s expects a number, got '%s'", flag, s); }
    if (v < lo || v > hi) { fatal("%s %g is out of range [%g, %g]", flag, v, lo, hi); }
    return (float)v;
}

// -K: the schedule of that name, else a fatal error naming the choices
static inline LrSchedule lr_schedule_from_name(const char* name) {
    for (int i = 0; i < NUM_LR_SCHEDULES; i++) {
        if (strcmp(name, LR_SCHEDULE_NAMES[i]) == 0) { return (LrSchedule)i; }
    }
    fatal("-K: unknown learning-rate schedule '%s' (cosine, linear, constant or wsd)", name);
    return LR_COSINE;
}

// A fresh model's shape on the command line, -e:
//     dN        N layers; GPT-2's widths for d12/d24/d36/d48, otherwise C = 64N with NH = N heads
//     dNcC      N layers of C channels, NH = max(1, C/64) heads (head size 64 where C allows)
//     dNcChH    N layers of C channels and H heads
// (lower-case letters, decimal numbers). A file of that name is a checkpoint, as any other -e.
typedef struct {
    int layers, channels, heads;  // 0 channels and heads: GPT-2's widths for this depth
} FreshShape;

// reads the decimal number at *p (advancing it); -1 when there is none. Numbers of more than 9
// digits read as 10^9 (out of every range, so they are reported as such).
static inline long args_shape_number(const char** p) {
    long v = 0;
    int digits = 0;
    for (; **p >= '0' && **p <= '9'; (*p)++) {
        v = ++digits > 9 ? 1000000000L : v * 10 + (**p - '0');
    }
    return digits ? v : -1;
}

// parses `init` into *s; returns 0 when it is not a fresh shape (then it is a checkpoint path).
// A shape that cannot be built (zero, too large, C not divisible by the heads) is fatal.
static inline int args_fresh_shape(const char* init, FreshShape* s) {
    memset(s, 0, sizeof(*s));
    const char* p = init;
    if (*p++ != 'd') { return 0; }
    long L = args_shape_number(&p), C = -1, NH = -1;  // -1: not given
    if (L < 0) { return 0; }
    if (*p == 'c') {
        p++;
        if ((C = args_shape_number(&p)) < 0) { return 0; }
        if (*p == 'h') {
            p++;
            if ((NH = args_shape_number(&p)) < 0) { return 0; }
        }
    }
    if (*p != '\0' || file_exists(init)) { return 0; }
    if (L < 1 || L > 128) { fatal("-e %s: %ld layers is out of range [1, 128]", init, L); }
    if (C != -1) {
        if (C < 1 || C > 16384) { fatal("-e %s: %ld channels is out of range [1, 16384]", init, C); }
        if (NH == -1) { NH = C >= 64 ? C / 64 : 1; }
        if (NH < 1 || NH > C) { fatal("-e %s: %ld heads is out of range [1, %ld] (at most one per channel)", init, NH, C); }
        if (C % NH != 0) { fatal("-e %s: %ld channels do not split into %ld heads (C %% NH = %ld)", init, C, NH, C % NH); }
    } else {
        C = NH = 0;
    }
    s->layers = (int)L;
    s->channels = (int)C;
    s->heads = (int)NH;
    return 1;
}

// parses argv into *a (which holds the defaults); -h prints usage and exits 0
static inline void args_parse(TrainArgs* a, int argc, char** argv) {
    TrainArgs defaults = *a;
    for (int i = 1; i < argc; i++) {
        const char* flag = argv[i];
        if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) { args_usage(argv[0], &defaults); exit(0); }
        if (flag[0] != '-' || strlen(flag) < 2) { fatal("unexpected argument '%s' (see -h)", flag); }
        if (i + 1 >= argc) { fatal("flag %s needs a value (see -h)", flag); }
        const char* v = argv[++i];
        if (strcmp(flag, "-nk") == 0) { a->keep_checkpoints = (int)parse_long_flag(flag, v, 0, INT_MAX); continue; }
        if (strlen(flag) != 2) { fatal("unknown flag %s (see -h)", flag); }
        char c = flag[1];
        switch (c) {
            case 'i': a->train_pattern = v; break;
            case 'j': a->val_pattern = v; break;
            case 'e': a->init = v; break;
            case 'N': norm_mode_from_name(v); a->norm_mode = v; a->norm_mode_given = 1; break;
            case 'o': a->output_dir = v; break;
            case 'b': a->B = (int)parse_long_flag(flag, v, 1, 1 << 16); break;
            case 't': a->T = (int)parse_long_flag(flag, v, 1, 1 << 20); break;
            case 'd': a->total_batch = parse_long_flag(flag, v, -1, 1L << 40); break;
            case 'l': a->learning_rate = parse_float_flag(flag, v, 0.0, 10.0); break;
            case 'u': a->warmup_steps = (int)parse_long_flag(flag, v, 0, INT_MAX); break;
            case 'q': a->final_lr_frac = parse_float_flag(flag, v, 0.0, 1.0); a->final_lr_frac_given = 1; break;
            case 'K': a->lr_schedule = lr_schedule_from_name(v); break;
            case 'w': a->wsd_decay_frac = parse_float_flag(flag, v, 0.0, 1.0); a->wsd_decay_frac_given = 1; break;
            case 'c': a->weight_decay = parse_float_flag(flag, v, 0.0, 10.0); break;
            case 'x': a->max_steps = (int)parse_long_flag(flag, v, 1, 99999999); break;  // 8-digit checkpoint names
            case 'v': a->val_every = (int)parse_long_flag(flag, v, 0, INT_MAX); break;
            case 'm': a->val_batches = (int)parse_long_flag(flag, v, 1, INT_MAX); break;
            case 's': a->sample_every = (int)parse_long_flag(flag, v, 0, INT_MAX); break;
            case 'g': a->gen_tokens = (int)parse_long_flag(flag, v, 0, 1 << 20); break;
            case 'k': a->arith_problems = (int)parse_long_flag(flag, v, 0, 1 << 20); break;
            case 'H': a->eval_file = v; a->eval_file_given = 1; break;
            case 'n': a->checkpoint_every = (int)parse_long_flag(flag, v, 0, INT_MAX); break;
            case 'y': a->resume = (int)parse_long_flag(flag, v, 0, 1); break;
            case 'z': a->zero_stage = (int)parse_long_flag(flag, v, 0, 1); break;
            case 'r': a->recompute = (int)parse_long_flag(flag, v, 0, RECOMPUTE_MAX); break;
            case 'S': a->seed = (unsigned long long)parse_long_flag(flag, v, 1, LONG_MAX); a->seed_given = 1; break;  // 0 would seed like 1
            default: fatal("unknown flag %s (see -h)", flag);
        }
    }
    if (a->train_pattern[0] == '\0') { fatal("-i is empty: it takes the training shards (a glob pattern, quoted)"); }
    if (a->init[0] == '\0') { fatal("-e is empty: it takes a checkpoint file or a fresh model dN, dNcC or dNcChH"); }
    long bt = (long)a->B * a->T;
    if (bt > (1L << 24)) { fatal("micro-batch B*T = %ld tokens is too large (at most %ld)", bt, 1L << 24); }
    a->total_batch_given = a->total_batch != -1;
    if (a->total_batch == -1) { a->total_batch = bt; }
    if (a->total_batch == 0 || a->total_batch % bt != 0) {
        fatal("total batch -d %ld must be a positive multiple of B*T = %d*%d = %ld", a->total_batch, a->B, a->T, bt);
    }
    if (a->total_batch / bt > (1L << 20)) {  // the trainers count micro-batches in an int
        fatal("total batch -d %ld needs %ld micro-batches of B*T = %ld per step (at most %ld)", a->total_batch,
              a->total_batch / bt, bt, 1L << 20);
    }
    FreshShape shape;
    args_fresh_shape(a->init, &shape);  // an impossible fresh shape ends the program here
    if (a->resume && a->output_dir[0] == '\0') { fatal("-y 1 needs an output folder -o to resume from"); }
    // the file names in it ("/model_XXXXXXXX.bin.tmp", "/main.log") must fit the 1024-byte path buffers
    if (strlen(a->output_dir) > 1000) {
        fatal("output folder -o is too long (%zu characters, at most 1000)", strlen(a->output_dir));
    }
}

// checks that need the model: the sequence length and the token vocabulary
static inline void args_check_model(const TrainArgs* a, const GPT2Config* cfg) {
    if (a->T > cfg->max_seq_len) {
        fatal("sequence length -t %d exceeds the model's maximum sequence length %d", a->T, cfg->max_seq_len);
    }
}

// the config of the fresh model -e asks for, with the vocabulary of the data and the norm mode
// of -N; returns 0 when -e is a checkpoint path
static inline int args_fresh_config(const TrainArgs* a, int vocab_size, GPT2Config* cfg) {
    FreshShape s;
    if (!args_fresh_shape(a->init, &s)) { return 0; }
    *cfg = gpt2_config_for_depth(s.layers, norm_mode_from_name(a->norm_mode), vocab_size, 1024);
    if (s.channels > 0) {
        cfg->channels = s.channels;
        cfg->num_heads = s.heads;
    }
    return 1;
}

#endif // COMMON_ARGS_H
