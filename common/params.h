/*
common/params.h: the model configuration, the parameter layout, fresh initialisation and the
checkpoint file, shared by train_gpt2.c, train_gpt2.cu and the tests (dev/train_gpt2.py writes
the same format, so checkpoints move freely between the three implementations).

A checkpoint is a 256-int32 header followed by every parameter as float32, in the order of the
table below (doc/formats.md). The layout is the same for all three norm modes; the
tensors that only SiameseNorm needs (the LayerNorms of the two streams) have size 0 in pre and
post mode, so a pre-norm checkpoint is simply shorter. checkpoint_open also reads llm.c's GPT-2
checkpoints (float32 and bf16) as pre-mode models, and llmc_checkpoint_write exports a pre-mode
model in llm.c's float32 format (the section at the end of this file).
*/
#ifndef COMMON_PARAMS_H
#define COMMON_PARAMS_H

#include <math.h>
#include "rng.h"
#include "utils.h"

#define MODEL_MAGIC 20260208
#define MODEL_VERSION 1
#define LLMC_MAGIC 20240326     // llm.c's GPT-2 checkpoint (gpt2_124M.bin and its kin)
#define LLMC_VERSION_FP32 3     // parameters as float32, padded vocabulary
#define LLMC_VERSION_BF16 5     // parameters as bf16, padded vocabulary

// ----------------------------------------------------------------------------
// norm modes

// The mode is recorded in the checkpoint as its number. Adding a mode is a short, checked list
// (dev/MODEL.md, "Adding a norm mode"): this enum and NUM_NORM_MODES; the two tables below (a
// compile-time check counts their rows); then every `switch (mode)` in train_gpt2.c, train_gpt2.cu
// and the tests, which have no default case so that the compilers' -Wswitch (an error in the
// Werror build that CI runs) names each one that does not handle the new mode yet; and the
// PyTorch reference dev/train_gpt2.py, whose dispatch raises on a mode it does not know.
typedef enum { NORM_PRE = 0, NORM_POST = 1, NORM_SIAMESE = 2 } NormMode;
#define NUM_NORM_MODES 3

#ifdef __cplusplus
#define COMPILE_TIME_CHECK(cond, msg) static_assert(cond, msg)
#else
#define COMPILE_TIME_CHECK(cond, msg) _Static_assert(cond, msg)
#endif

static const char* const NORM_MODE_NAMES[] = {"pre", "post", "siamese"};
COMPILE_TIME_CHECK(sizeof(NORM_MODE_NAMES) / sizeof(NORM_MODE_NAMES[0]) == NUM_NORM_MODES, "one name per norm mode");

// What each mode stores. Every mode-dependent size (parameters here, activations in the trainers)
// is read from this table, never from a comparison with one mode.
typedef struct {
    int two_streams;  // a second residual stream Y, with LayerNorms of both streams at every sublayer
                      // input and at the end (lnx*, lny*, lnin / ln1 ln2 lnf as the merge)
    int block_input;  // the block input u is a tensor of its own (pre: LN(x); siamese: LN(a + LN(y)));
                      // post feeds the stream x itself to the block
    int ln_sum;       // the sublayer's main LayerNorm normalises a sum that is kept for its backward
                      // (post: x + z; siamese: a + LN(y)); pre normalises the stream itself
} NormModeLayout;
static const NormModeLayout NORM_MODE_LAYOUTS[] = {
    /* pre     */ {0, 1, 0},
    /* post    */ {0, 0, 1},
    /* siamese */ {1, 1, 1},
};
COMPILE_TIME_CHECK(sizeof(NORM_MODE_LAYOUTS) / sizeof(NORM_MODE_LAYOUTS[0]) == NUM_NORM_MODES, "one layout per norm mode");

static inline const NormModeLayout* norm_mode_layout(NormMode mode) {
    if ((int)mode < 0 || (int)mode >= NUM_NORM_MODES) { fatal("unknown norm mode %d", (int)mode); }
    return &NORM_MODE_LAYOUTS[mode];
}

// returns the mode for "pre", "post" or "siamese", fatal otherwise
static inline NormMode norm_mode_from_name(const char* name) {
    for (int i = 0; i < NUM_NORM_MODES; i++) {
        if (strcmp(name, NORM_MODE_NAMES[i]) == 0) { return (NormMode)i; }
    }
    fatal("unknown norm mode '%s' (expected pre, post or siamese)", name);
}

// ----------------------------------------------------------------------------
// model configuration

typedef struct {
    int max_seq_len;        // maxT, rows of the position embedding
    int vocab_size;         // V, e.g. 50257
    int padded_vocab_size;  // Vp >= V, a multiple of 128 so the output matmul tiles nicely
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
    NormMode norm_mode;
} GPT2Config;

// the config of a fresh model "dN": GPT-2's widths for 12/24/36/48 layers, otherwise C=64N, NH=N
static inline GPT2Config gpt2_config_for_depth(int depth, NormMode mode, int vocab_size, int max_seq_len) {
    if (depth < 1 || depth > 128) { fatal("model depth %d out of range (d1 .. d128)", depth); }
    GPT2Config c;
    c.max_seq_len = max_seq_len;
    c.vocab_size = vocab_size;
    c.padded_vocab_size = (vocab_size + 127) / 128 * 128;
    c.num_layers = depth;
    c.norm_mode = mode;
    switch (depth) {
        case 12: c.channels = 768; c.num_heads = 12; break;
        case 24: c.channels = 1024; c.num_heads = 16; break;
        case 36: c.channels = 1280; c.num_heads = 20; break;
        case 48: c.channels = 1600; c.num_heads = 25; break;
        default: c.channels = 64 * depth; c.num_heads = depth; break;
    }
    return c;
}

// every input (and target, when given) of a forward pass must be a token of the vocabulary
static inline void check_tokens(const int* inputs, const int* targets, int n, int vocab_size) {
    for (int i = 0; i < n; i++) {
        if (inputs[i] < 0 || inputs[i] >= vocab_size) {
            fatal("input token %d at position %d is outside the vocabulary [0, %d)", inputs[i], i, vocab_size);
        }
        if (targets && (targets[i] < 0 || targets[i] >= vocab_size)) {
            fatal("target token %d at position %d is outside the vocabulary [0, %d)", targets[i], i, vocab_size);
        }
    }
}

// c_l = sqrt(2 (l + 1)): how much the Post-Norm stream X scales down block l's output
static inline float siamese_scale(int layer) { return sqrtf(2.0f * (float)(layer + 1)); }

// ----------------------------------------------------------------------------
// the parameter layout

// The parameter tensors in checkpoint order, one row each: X(index, name), with its shape. Per-layer
// tensors are stacked over the L layers; matrices are (out, in). The siamese-only tensors (lnx*,
// lny*, lnfx*, lnfy*) are empty in pre and post mode. From this one list come the indices P_*, the
// names, and the fields of each trainer's ParameterTensors (a pointer per tensor, in this order).
#define PARAMETER_TENSORS(X) \
    X(P_WTE, wte)           /* (Vp, C)      token embedding, and the tied output layer */ \
    X(P_WPE, wpe)           /* (maxT, C)    position embedding */ \
    X(P_LNX1W, lnx1w)       /* (L, C)       siamese: LN of stream X before attention (weight, bias) */ \
    X(P_LNX1B, lnx1b)       /* (L, C) */ \
    X(P_LNY1W, lny1w)       /* (L, C)       siamese: LN of stream Y before attention */ \
    X(P_LNY1B, lny1b)       /* (L, C) */ \
    X(P_LN1W, ln1w)         /* (L, C)       the attention sublayer's main LN (pre: before, post: after the add, */ \
    X(P_LN1B, ln1b)         /* (L, C)       siamese: the block input) */ \
    X(P_QKVW, qkvw)         /* (L, 3C, C)   attention input projection */ \
    X(P_QKVB, qkvb)         /* (L, 3C) */ \
    X(P_ATTPROJW, attprojw) /* (L, C, C)    attention output projection */ \
    X(P_ATTPROJB, attprojb) /* (L, C) */ \
    X(P_LNX2W, lnx2w)       /* (L, C)       the same three LNs for the MLP sublayer */ \
    X(P_LNX2B, lnx2b)       /* (L, C) */ \
    X(P_LNY2W, lny2w)       /* (L, C) */ \
    X(P_LNY2B, lny2b)       /* (L, C) */ \
    X(P_LN2W, ln2w)         /* (L, C) */ \
    X(P_LN2B, ln2b)         /* (L, C) */ \
    X(P_FCW, fcw)           /* (L, 4C, C)   MLP up-projection */ \
    X(P_FCB, fcb)           /* (L, 4C) */ \
    X(P_FCPROJW, fcprojw)   /* (L, C, 4C)   MLP down-projection */ \
    X(P_FCPROJB, fcprojb)   /* (L, C) */ \
    X(P_LNFXW, lnfxw)       /* (C)          siamese: final LN of X */ \
    X(P_LNFXB, lnfxb)       /* (C) */ \
    X(P_LNFYW, lnfyw)       /* (C)          siamese: final LN of Y */ \
    X(P_LNFYB, lnfyb)       /* (C) */ \
    X(P_LNFW, lnfw)         /* (C)          the final LN (after the merge in siamese mode) */ \
    X(P_LNFB, lnfb)         /* (C) */

#define PARAM_INDEX(index, name) index,
#define PARAM_NAME(index, name) #name,
enum { PARAMETER_TENSORS(PARAM_INDEX) NUM_PARAMETER_TENSORS };
static const char* const PARAM_NAMES[NUM_PARAMETER_TENSORS] = { PARAMETER_TENSORS(PARAM_NAME) };

// number of floats in each parameter tensor (shapes: PARAMETER_TENSORS above, dev/MODEL.md,
// "Parameters")
static inline void fill_param_sizes(size_t sizes[NUM_PARAMETER_TENSORS], const GPT2Config* cfg) {
    size_t Vp = cfg->padded_vocab_size, C = cfg->channels, L = cfg->num_layers, maxT = cfg->max_seq_len;
    size_t S = norm_mode_layout(cfg->norm_mode)->two_streams;  // the two streams' LayerNorms exist or are empty
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { sizes[i] = (size_t)-1; }  // a tensor left out below is caught
    sizes[P_WTE] = Vp * C;
    sizes[P_WPE] = maxT * C;
    sizes[P_LNX1W] = S * L * C;
    sizes[P_LNX1B] = S * L * C;
    sizes[P_LNY1W] = S * L * C;
    sizes[P_LNY1B] = S * L * C;
    sizes[P_LN1W] = L * C;
    sizes[P_LN1B] = L * C;
    sizes[P_QKVW] = L * 3 * C * C;
    sizes[P_QKVB] = L * 3 * C;
    sizes[P_ATTPROJW] = L * C * C;
    sizes[P_ATTPROJB] = L * C;
    sizes[P_LNX2W] = S * L * C;
    sizes[P_LNX2B] = S * L * C;
    sizes[P_LNY2W] = S * L * C;
    sizes[P_LNY2B] = S * L * C;
    sizes[P_LN2W] = L * C;
    sizes[P_LN2B] = L * C;
    sizes[P_FCW] = L * 4 * C * C;
    sizes[P_FCB] = L * 4 * C;
    sizes[P_FCPROJW] = L * C * 4 * C;
    sizes[P_FCPROJB] = L * C;
    sizes[P_LNFXW] = S * C;
    sizes[P_LNFXB] = S * C;
    sizes[P_LNFYW] = S * C;
    sizes[P_LNFYB] = S * C;
    sizes[P_LNFW] = C;
    sizes[P_LNFB] = C;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        if (sizes[i] == (size_t)-1) { fatal("fill_param_sizes: no size for %s", PARAM_NAMES[i]); }
    }
}

static inline size_t count_parameters(const GPT2Config* cfg) {
    size_t sizes[NUM_PARAMETER_TENSORS];
    fill_param_sizes(sizes, cfg);
    size_t n = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { n += sizes[i]; }
    return n;
}

// A range [lo, hi) of the flat parameters (all of them, or one rank's shard: common/dist.h) cut
// at the tensor boundaries. AdamW runs tensor by tensor, since weight decay is per tensor
// (param_tensor_decays), so both trainers' updates walk these pieces.
typedef struct {
    int tensor;    // which tensor (P_WTE, ...)
    size_t start;  // its first parameter, as an index into all parameters
    size_t n;      // how many (at least 1)
} ParamSlice;

// the non-empty parts of [lo, hi) in each tensor, in tensor order; returns how many there are
static inline int param_slices(const size_t sizes[NUM_PARAMETER_TENSORS], size_t lo, size_t hi,
                               ParamSlice slices[NUM_PARAMETER_TENSORS]) {
    int count = 0;
    size_t offset = 0;  // where tensor i starts
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t start = offset > lo ? offset : lo, end = offset + sizes[i] < hi ? offset + sizes[i] : hi;
        offset += sizes[i];
        if (start >= end) { continue; }
        slices[count].tensor = i;
        slices[count].start = start;
        slices[count].n = end - start;
        count++;
    }
    return count;
}

// AdamW weight decay applies to the matrices and embeddings, not to biases and LayerNorms
static inline int param_tensor_decays(int i) {
    return i == P_WTE || i == P_WPE || i == P_QKVW || i == P_ATTPROJW || i == P_FCW || i == P_FCPROJW;
}

// is this a LayerNorm weight (initialised to 1)?
static inline int param_tensor_is_ln_weight(int i) {
    return i == P_LNX1W || i == P_LNY1W || i == P_LN1W || i == P_LNX2W || i == P_LNY2W || i == P_LN2W ||
           i == P_LNFXW || i == P_LNFYW || i == P_LNFW;
}

// ----------------------------------------------------------------------------
// fresh initialisation, GPT-2's recipe for every norm mode (dev/MODEL.md): weights N(0, 0.02),
// the two residual output projections N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weight 1, bias 0.
// The padded vocabulary rows of wte are 0 (they are never used as inputs nor as targets).

static inline void params_init_fresh(float* params, const GPT2Config* cfg, uint64_t seed) {
    size_t sizes[NUM_PARAMETER_TENSORS];
    fill_param_sizes(sizes, cfg);
    uint64_t rng = seed ? seed : 1;
    float std_proj = 0.02f / sqrtf(2.0f * (float)cfg->num_layers);
    float* p = params;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        size_t n = sizes[i];
        if (i == P_WTE) {
            size_t used = (size_t)cfg->vocab_size * cfg->channels;
            random_normal(p, used, 0.02f, &rng);
            memset(p + used, 0, (n - used) * sizeof(float));
        } else if (i == P_WPE || i == P_QKVW || i == P_FCW) {
            random_normal(p, n, 0.02f, &rng);
        } else if (i == P_ATTPROJW || i == P_FCPROJW) {
            random_normal(p, n, std_proj, &rng);
        } else {
            float value = param_tensor_is_ln_weight(i) ? 1.0f : 0.0f;
            for (size_t j = 0; j < n; j++) { p[j] = value; }
        }
        p += n;
    }
}

// ----------------------------------------------------------------------------
// reading and writing checkpoints

// checks every header field; `path` names the file in the error
static inline GPT2Config checkpoint_config_from_header(const int header[256], const char* path) {
    if (header[0] != MODEL_MAGIC) { fatal("%s is not a model checkpoint (bad magic %d)", path, header[0]); }
    if (header[1] != MODEL_VERSION) { fatal("%s: unsupported checkpoint version %d (expected %d)", path, header[1], MODEL_VERSION); }
    GPT2Config c;
    c.max_seq_len = header[2];
    c.vocab_size = header[3];
    c.num_layers = header[4];
    c.num_heads = header[5];
    c.channels = header[6];
    c.padded_vocab_size = header[7];
    if (header[8] < 0 || header[8] >= NUM_NORM_MODES) { fatal("%s: unknown norm mode %d in header", path, header[8]); }
    c.norm_mode = (NormMode)header[8];
    if (c.max_seq_len < 1 || c.max_seq_len > (1 << 20) || c.vocab_size < 1 || c.vocab_size > (1 << 24) ||
        c.num_layers < 1 || c.num_layers > 1024 || c.num_heads < 1 || c.channels < 1 || c.channels > (1 << 16) ||
        c.channels % c.num_heads != 0 || c.padded_vocab_size < c.vocab_size || c.padded_vocab_size % 128 != 0 ||
        c.padded_vocab_size - c.vocab_size >= 128) {
        fatal("%s: inconsistent model sizes in header (maxT %d, V %d, Vp %d, L %d, NH %d, C %d)", path,
              c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers, c.num_heads, c.channels);
    }
    return c;
}

// An open checkpoint file, header read and checked, positioned at the parameters. It is either
// ours (MODEL_MAGIC, float32) or llm.c's GPT-2 (LLMC_MAGIC, float32 or bf16; see below), which
// loads as a pre-mode model.
typedef struct {
    FILE* f;
    const char* path;
    GPT2Config config;
    int bf16;  // 1: the parameters are stored as bf16 (llm.c version 5), 0: as float32
} CheckpointFile;

static inline GPT2Config llmc_config_from_header(const int header[256], const char* path, int* bf16);

// opens a checkpoint, validates header and size (ck->config says what it holds)
static inline void checkpoint_open(CheckpointFile* ck, const char* path) {
    FILE* f = fopen_check(path, "rb");
    long size = file_size_check(f, path);
    if (size < 1024) { fatal("%s: file is truncated (%ld bytes, smaller than the header)", path, size); }
    int header[256];
    fread_check(header, sizeof(int), 256, f, path);
    ck->f = f;
    ck->path = path;
    ck->bf16 = 0;
    if (header[0] == LLMC_MAGIC) {
        ck->config = llmc_config_from_header(header, path, &ck->bf16);
    } else {
        ck->config = checkpoint_config_from_header(header, path);
    }
    size_t expected = 1024 + (ck->bf16 ? 2 : sizeof(float)) * count_parameters(&ck->config);
    if ((size_t)size != expected) {
        fatal("%s: file has %ld bytes but its header describes %zu (truncated or corrupted)", path, size, expected);
    }
}

// a NaN or Inf weight makes every step of a run skipped and every sample garbage, so checkpoints
// holding one are refused on load, naming the tensor (`path` names the file in the error)
static inline void params_check_finite(const float* params, const GPT2Config* cfg, const char* path) {
    size_t sizes[NUM_PARAMETER_TENSORS];
    fill_param_sizes(sizes, cfg);
    const float* p = params;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        for (size_t j = 0; j < sizes[i]; j++) {
            if (!isfinite(p[j])) {
                fatal("%s: parameter tensor %s holds %s at element %zu of %zu; refusing to use this checkpoint", path,
                      PARAM_NAMES[i], isnan(p[j]) ? "NaN" : "Inf", j, sizes[i]);
            }
        }
        p += sizes[i];
    }
}

// reads every parameter (as float32, in the table's order) into `params`, closes the file, and
// checks that every weight is finite
static inline void checkpoint_read_params(CheckpointFile* ck, float* params) {
    size_t n = count_parameters(&ck->config);
    if (!ck->bf16) {
        fread_check(params, sizeof(float), n, ck->f, ck->path);
    } else {
        // bf16 is the upper half of a float32: read a chunk of 16-bit words, widen it in place from
        // the back (the words sit in the first half of the chunk's float space)
        const size_t chunk = 1 << 20;
        for (size_t i = 0; i < n; i += chunk) {
            size_t m = n - i < chunk ? n - i : chunk;
            unsigned char* words = (unsigned char*)(params + i);
            fread_check(words, sizeof(uint16_t), m, ck->f, ck->path);
            for (size_t j = m; j-- > 0;) {
                uint16_t word;
                memcpy(&word, words + 2 * j, sizeof(word));
                uint32_t bits = (uint32_t)word << 16;
                memcpy(params + i + j, &bits, sizeof(float));
            }
        }
    }
    fclose(ck->f);
    ck->f = NULL;
    params_check_finite(params, &ck->config, ck->path);
}

// a header whose entries 2..7 hold the model's sizes (the same places in our format and llm.c's)
static inline void checkpoint_header_sizes(int header[256], const GPT2Config* cfg) {
    memset(header, 0, 256 * sizeof(int));
    header[2] = cfg->max_seq_len;
    header[3] = cfg->vocab_size;
    header[4] = cfg->num_layers;
    header[5] = cfg->num_heads;
    header[6] = cfg->channels;
    header[7] = cfg->padded_vocab_size;
}

// header + float32 parameters, atomically (temporary file, fsync, rename)
static inline void checkpoint_write_file(const char* path, const int header[256], const GPT2Config* cfg,
                                         const float* params) {
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(int), 256);
    atomic_write(&af, params, sizeof(float), count_parameters(cfg));
    atomic_commit(&af);
}

// writes our checkpoint: header + parameters, atomically
static inline void checkpoint_write(const char* path, const GPT2Config* cfg, const float* params) {
    int header[256];
    checkpoint_header_sizes(header, cfg);
    header[0] = MODEL_MAGIC;
    header[1] = MODEL_VERSION;
    header[8] = (int)cfg->norm_mode;
    checkpoint_write_file(path, header, cfg, params);
}

// ----------------------------------------------------------------------------
// llm.c's GPT-2 checkpoints
//
// A pre-mode model is GPT-2, and so is llm.c's model: same tensors, same roles. llm.c's file
// (written by its train_gpt2.py: gpt2_124M.bin in float32, gpt2_124M_bf16.bin in bf16) is a
// 256-int32 header, [0] magic 20240326, [1] version (3: float32, 5: bf16), [2] maxT, [3] V, [4] L,
// [5] NH, [6] C, [7] Vp (the vocabulary padded to a multiple of 128, pad rows of wte zero), then
// the 16 tensors wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb,
// fcprojw, fcprojb, lnfw, lnfb with the same shapes as ours. Our table in pre mode holds exactly
// these, in this order (the siamese-only tensors between them have size 0), so the parameter
// bytes of a float32 llm.c file and of our pre-mode checkpoint are the same: only the header
// differs. checkpoint_open reads llm.c files as pre-mode models; llmc_checkpoint_write exports.

// the config of an llm.c header (always pre mode); *bf16 says how the parameters are stored
static inline GPT2Config llmc_config_from_header(const int header[256], const char* path, int* bf16) {
    if (header[1] != LLMC_VERSION_FP32 && header[1] != LLMC_VERSION_BF16) {
        fatal("%s: llm.c checkpoint version %d is not supported (3: float32, 5: bf16, both with a padded vocabulary)",
              path, header[1]);
    }
    *bf16 = header[1] == LLMC_VERSION_BF16;
    int ours[256];  // the same sizes in our header, so that both formats pass the same checks
    memset(ours, 0, sizeof(ours));
    ours[0] = MODEL_MAGIC;
    ours[1] = MODEL_VERSION;
    for (int i = 2; i <= 7; i++) { ours[i] = header[i]; }
    ours[8] = NORM_PRE;
    return checkpoint_config_from_header(ours, path);
}

// writes a pre-mode model as llm.c's float32 checkpoint (version 3), atomically
static inline void llmc_checkpoint_write(const char* path, const GPT2Config* cfg, const float* params) {
    if (cfg->norm_mode != NORM_PRE) {
        fatal("cannot export a %s-mode model to llm.c: llm.c's GPT-2 is a pre-mode model",
              NORM_MODE_NAMES[cfg->norm_mode]);
    }
    int header[256];
    checkpoint_header_sizes(header, cfg);
    header[0] = LLMC_MAGIC;
    header[1] = LLMC_VERSION_FP32;
    checkpoint_write_file(path, header, cfg, params);
}

#endif // COMMON_PARAMS_H
