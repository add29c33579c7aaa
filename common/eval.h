/*
common/eval.h: a multiple-choice evaluation (HellaSwag style) in llm.c's eval file format, shared by
train_gpt2.c and train_gpt2.cu (C/C++ common subset).

An example is a context and a few completions, one of them right (its label). The model reads
context + completion once per completion; a completion's score is the mean cross-entropy of its
own tokens (each predicted from everything before it, the first one from the last context token),
and the answer is the completion with the lowest mean loss (the first of equal ones). Accuracy is
the share of examples answered right. This is llm.c's HellaSwag evaluation ("completion style",
length-normalised: dev/data/hellaswag.py prints it as acc_norm).

The file (written by llm.c's dev/data/data_common.py write_evalfile, by our dev/data/hellaswag.py,
and by eval_writer_* below):

    header: 256 int32   [0] magic 20240522, [1] version 1, [2] number of examples N,
                        [3] the longest example in bytes; the rest 0
    then N examples, each a stream of uint16:
        65535                   start of an example
        bytes                   the example's size in bytes, these first fields included
        index                   0, 1, ... N-1 in file order
        label                   the right completion, 0 .. num_completions-1
        num_completions         (HellaSwag: 4)
        context length, then the context's tokens
        per completion: its length, then its tokens

The trainer reads the whole file at start-up and checks all of it (eval_set_load): the header, every
field of every example, every token id against the model's vocabulary, and that context +
completion fit in the -t T of the run. Any fault is one error line before the run starts.

Batching. Each completion is one row of T tokens: the context, the completion, then token 0 as
padding (the model is causal: nothing after the completion changes its losses). The trainers take
T = the longest context + completion of the file (e->longest, at most their -t), so a short eval
costs no more than its tokens. Rows are packed B at a time in file order, so an example's
completions may straddle two forward passes, and any B works. The targets are the next tokens, 0
past the completion; only the completion's positions are read. With several ranks each takes a
contiguous share of the examples (eval_run's range) and the counts of right answers are added up.
*/
#ifndef COMMON_EVAL_H
#define COMMON_EVAL_H

#include "utils.h"

#define EVAL_MAGIC 20240522
#define EVAL_VERSION 1
#define EVAL_HEADER_INTS 256
#define EVAL_START 65535        // the first uint16 of every example
#define EVAL_EXAMPLE_FIELDS 5   // start, bytes, index, label, num_completions

typedef struct {
    int label;
    int num_completions;
    long first_row;      // its completions are rows first_row .. first_row + num_completions - 1
} EvalExample;

typedef struct {
    long context;        // offsets into EvalSet.stream
    int context_length;
    long completion;
    int completion_length;
} EvalRow;

typedef struct {
    char path[1024];
    uint16_t* stream;    // the file after its header
    int num_examples;
    long num_rows;       // completions of all examples
    EvalExample* examples;
    EvalRow* rows;
    int longest;         // tokens of the longest context + completion
    double* row_loss;    // (num_rows) the mean loss of each completion, of the last eval_run
    int correct;         // of the last eval_run (this process's range)
} EvalSet;

// the tokens [from, from + count) of the stream of example i are ids of the vocabulary
static inline void eval_check_tokens(const EvalSet* e, int i, long from, int count, int vocab_size) {
    for (long q = from; q < from + count; q++) {
        if (e->stream[q] >= vocab_size) {
            fatal("eval file %s: example %d: token id %d is not below the vocabulary size %d", e->path, i, e->stream[q],
                  vocab_size);
        }
    }
}

// Reads and checks the file at `path` for a model of `vocab_size` tokens read in rows of T tokens
// (T 0: any length; e->longest then says how long the rows must be). Every fault ends the program
// with one line that names the file and the example.
static inline void eval_set_load(EvalSet* e, const char* path, int vocab_size, int T) {
    memset(e, 0, sizeof(*e));
    snprintf(e->path, sizeof(e->path), "%s", path);
    FILE* f = fopen_check(path, "rb");
    long size = file_size_check(f, path);
    if (size < (long)(EVAL_HEADER_INTS * sizeof(int32_t))) {
        fatal("eval file %s: %ld bytes, shorter than its %zu-byte header", path, size,
              EVAL_HEADER_INTS * sizeof(int32_t));
    }
    int32_t header[EVAL_HEADER_INTS];
    fread_check(header, sizeof(int32_t), EVAL_HEADER_INTS, f, path);
    if (header[0] != EVAL_MAGIC) { fatal("eval file %s: bad magic %d (expected %d)", path, header[0], EVAL_MAGIC); }
    if (header[1] != EVAL_VERSION) { fatal("eval file %s: version %d, expected %d", path, header[1], EVAL_VERSION); }
    if (header[2] < 1 || header[2] > 65535) {
        fatal("eval file %s: %d examples (1 to 65535: the index field has 16 bits)", path, header[2]);
    }
    long body = size - (long)(EVAL_HEADER_INTS * sizeof(int32_t));
    if (body % 2 != 0) { fatal("eval file %s: an odd number of bytes after the header (%ld)", path, body); }
    long n = body / 2;  // uint16 values
    e->stream = (uint16_t*)malloc_check((size_t)n * sizeof(uint16_t), "eval file");
    fread_check(e->stream, sizeof(uint16_t), (size_t)n, f, path);
    fclose(f);
    e->num_examples = header[2];
    e->examples = (EvalExample*)malloc_check((size_t)e->num_examples * sizeof(EvalExample), "eval examples");

    // first pass: the examples' own fields; counts the rows
    const uint16_t* s = e->stream;
    long pos = 0, longest_bytes = 0;
    for (int i = 0; i < e->num_examples; i++) {
        if (pos + EVAL_EXAMPLE_FIELDS + 1 > n) {
            fatal("eval file %s is truncated: it ends in example %d of %d", path, i, e->num_examples);
        }
        if (s[pos] != EVAL_START) {
            fatal("eval file %s: example %d does not start with %d (found %d)", path, i, EVAL_START, s[pos]);
        }
        long bytes = s[pos + 1], end = pos + bytes / 2;
        if (s[pos + 2] != (uint16_t)i) { fatal("eval file %s: example %d has index %d", path, i, s[pos + 2]); }
        int label = s[pos + 3], K = s[pos + 4];
        if (K < 1) { fatal("eval file %s: example %d has no completions", path, i); }
        if (label >= K) { fatal("eval file %s: example %d: label %d, but %d completions", path, i, label, K); }
        if (bytes % 2 != 0 || bytes < 2 * (EVAL_EXAMPLE_FIELDS + 1)) {
            fatal("eval file %s: example %d: size %ld bytes is impossible", path, i, bytes);
        }
        if (end > n) { fatal("eval file %s is truncated: example %d of %d is cut off", path, i, e->num_examples); }
        // the lengths must add up to the size the example states
        long p = pos + EVAL_EXAMPLE_FIELDS;
        // the context (c -1), then the completions; -1 once a length field lies past the end
        for (int c = -1; c < K && p >= 0; c++) { p = p < end ? p + 1 + s[p] : -1; }
        if (p != end) {
            fatal("eval file %s: example %d: its lengths do not add up to its size of %ld bytes", path, i, bytes);
        }
        e->examples[i].label = label;
        e->examples[i].num_completions = K;
        e->examples[i].first_row = e->num_rows;
        e->num_rows += K;
        if (bytes > longest_bytes) { longest_bytes = bytes; }
        pos = end;
    }
    if (pos != n) { fatal("eval file %s: %ld bytes after its last example", path, 2 * (n - pos)); }
    if (header[3] != longest_bytes) {
        fatal("eval file %s: header says the longest example has %d bytes, it has %ld", path, header[3], longest_bytes);
    }

    // second pass: the rows, their lengths and tokens
    e->rows = (EvalRow*)malloc_check((size_t)e->num_rows * sizeof(EvalRow), "eval rows");
    e->row_loss = (double*)calloc_check((size_t)e->num_rows, sizeof(double), "eval losses");
    pos = 0;
    for (int i = 0; i < e->num_examples; i++) {
        long p = pos + EVAL_EXAMPLE_FIELDS;
        int context_length = s[p];
        if (context_length < 1) { fatal("eval file %s: example %d has an empty context", path, i); }
        long context = p + 1;
        eval_check_tokens(e, i, context, context_length, vocab_size);
        p = context + context_length;
        for (int c = 0; c < e->examples[i].num_completions; c++) {
            EvalRow* r = &e->rows[e->examples[i].first_row + c];
            r->context = context;
            r->context_length = context_length;
            r->completion_length = s[p];
            r->completion = p + 1;
            if (r->completion_length < 1) { fatal("eval file %s: example %d: completion %d is empty", path, i, c); }
            eval_check_tokens(e, i, r->completion, r->completion_length, vocab_size);
            int length = context_length + r->completion_length;
            if (T > 0 && length > T) {
                fatal("eval file %s: example %d, completion %d: context and completion are %d tokens, more than -t %d",
                      path, i, c, length, T);
            }
            if (length > e->longest) { e->longest = length; }
            p = r->completion + r->completion_length;
        }
        pos = p;
    }
}

static inline void eval_set_free(EvalSet* e) {
    free(e->stream);
    free(e->examples);
    free(e->rows);
    free(e->row_loss);
    memset(e, 0, sizeof(*e));
}

// Row r of the eval as a row of a (B, T) batch: inputs are the context, the completion and 0s;
// targets the next token of each position, 0 where there is none.
static inline void eval_fill_row(const EvalSet* e, long r, int T, int* inputs, int* targets) {
    const EvalRow* row = &e->rows[r];
    const uint16_t* s = e->stream;
    int n = row->context_length + row->completion_length;
    for (int t = 0; t < T; t++) {
        int at = t < row->context_length ? s[row->context + t]
                 : t < n                 ? s[row->completion + t - row->context_length]
                                         : 0;
        inputs[t] = at;
        if (t > 0) { targets[t - 1] = t < n ? at : 0; }
    }
    targets[T - 1] = 0;
}

// the mean loss of row r's completion, from the per-position losses of its batch row (T floats):
// the completion's tokens are the targets of positions context_length - 1 .. n - 2
static inline double eval_row_mean_loss(const EvalSet* e, long r, const float* losses) {
    const EvalRow* row = &e->rows[r];
    double sum = 0.0;
    for (int i = 0; i < row->completion_length; i++) { sum += losses[row->context_length - 1 + i]; }
    return sum / row->completion_length;
}

// example i's answer: its completion of the lowest mean loss in row_loss (the first of equal ones)
static inline int eval_prediction(const EvalSet* e, int i) {
    const EvalExample* x = &e->examples[i];
    int best = 0;
    for (int c = 1; c < x->num_completions; c++) {
        if (e->row_loss[x->first_row + c] < e->row_loss[x->first_row + best]) { best = c; }
    }
    return best;
}

// what the evaluation needs from a trainer: a forward pass with targets on host tokens (B, T) that
// returns the losses of every position (B * T floats, host memory valid until the next call)
typedef const float* (*EvalLossesFn)(void* ctx, const int* inputs, const int* targets, int B, int T);

// Evaluates examples [lo, hi) in batches of B rows of T >= e->longest tokens (`inputs` and
// `targets` hold B * T ints each); returns how many of them the model answers right (also in
// e->correct).
static inline int eval_run(EvalSet* e, int lo, int hi, EvalLossesFn losses_fn, void* ctx, int B, int T,
                           int* inputs, int* targets) {
    e->correct = 0;
    if (lo >= hi) { return 0; }
    long first = e->examples[lo].first_row;
    long end = e->examples[hi - 1].first_row + e->examples[hi - 1].num_completions;
    for (long r0 = first; r0 < end; r0 += B) {
        int rows = end - r0 < B ? (int)(end - r0) : B;
        for (int b = 0; b < B; b++) {
            if (b < rows) {
                eval_fill_row(e, r0 + b, T, inputs + (size_t)b * T, targets + (size_t)b * T);
            } else {  // past the last row: a row of 0s, whose losses nobody reads
                memset(inputs + (size_t)b * T, 0, (size_t)T * sizeof(int));
                memset(targets + (size_t)b * T, 0, (size_t)T * sizeof(int));
            }
        }
        const float* losses = losses_fn(ctx, inputs, targets, B, T);
        for (int b = 0; b < rows; b++) { e->row_loss[r0 + b] = eval_row_mean_loss(e, r0 + b, losses + (size_t)b * T); }
    }
    for (int i = lo; i < hi; i++) { e->correct += eval_prediction(e, i) == e->examples[i].label; }
    return e->correct;
}

// ----------------------------------------------------------------------------
// writing an eval file: eval_writer_add for each example, then eval_writer_commit (atomically)

typedef struct {
    uint16_t* stream;
    size_t used, cap;
    int num_examples;
    long longest_bytes;
} EvalWriter;

static inline void eval_writer_put(EvalWriter* w, long v) {
    if (v < 0 || v > 65535) { fatal("eval file: value %ld does not fit in 16 bits", v); }
    if (w->used == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 4096;
        uint16_t* grown = (uint16_t*)realloc(w->stream, w->cap * sizeof(uint16_t));
        if (grown == NULL) { fatal("out of memory writing an eval file"); }
        w->stream = grown;
    }
    w->stream[w->used++] = (uint16_t)v;
}

// one example: its context (n_context tokens), K completions (completions[c], lengths[c] tokens)
// and the index of the right one
static inline void eval_writer_add(EvalWriter* w, const int* context, int n_context, int K,
                                   const int* const* completions, const int* lengths, int label) {
    if (w->num_examples >= 65535) { fatal("eval file: more than 65535 examples do not fit its index field"); }
    size_t start = w->used;
    eval_writer_put(w, EVAL_START);
    eval_writer_put(w, 0);  // the size, below
    eval_writer_put(w, w->num_examples);
    eval_writer_put(w, label);
    eval_writer_put(w, K);
    eval_writer_put(w, n_context);
    for (int i = 0; i < n_context; i++) { eval_writer_put(w, context[i]); }
    for (int c = 0; c < K; c++) {
        eval_writer_put(w, lengths[c]);
        for (int i = 0; i < lengths[c]; i++) { eval_writer_put(w, completions[c][i]); }
    }
    long bytes = 2 * (long)(w->used - start);
    if (bytes > 65535) {
        fatal("eval file: example %d has %ld bytes, more than its size field holds", w->num_examples, bytes);
    }
    w->stream[start + 1] = (uint16_t)bytes;
    if (bytes > w->longest_bytes) { w->longest_bytes = bytes; }
    w->num_examples++;
}

static inline void eval_writer_commit(EvalWriter* w, const char* path) {
    int32_t header[EVAL_HEADER_INTS];
    memset(header, 0, sizeof(header));
    header[0] = EVAL_MAGIC;
    header[1] = EVAL_VERSION;
    header[2] = w->num_examples;
    header[3] = (int32_t)w->longest_bytes;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(int32_t), EVAL_HEADER_INTS);
    atomic_write(&af, w->stream, sizeof(uint16_t), w->used);
    atomic_commit(&af);
    free(w->stream);
    memset(w, 0, sizeof(*w));
}

#endif // COMMON_EVAL_H
