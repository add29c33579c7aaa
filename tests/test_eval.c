/*
tests/test_eval.c: the multiple-choice eval (common/eval.h) and the arithmetic data's eval file.

  * the writer's bytes are llm.c's eval format, spelled out here value by value from the format's
    description (header of 256 int32: magic, version, examples, longest example in bytes; per
    example 65535, its bytes, its index, label, number of completions, context, completions)
  * a written file reads back: every row's inputs are context + completion + 0s and its targets
    the next tokens (0s past the completion)
  * scoring against a fake model whose loss at a position is a weight of its target token: each
    completion's mean loss and each answer as computed here from the examples alone; the same
    counts for B 1, 2, 3, 4, 7 and 64 (an example's completions straddle batches), and for the
    examples split into 2 and 3 contiguous shares (as ranks get them) added up; equal losses
    answer the first completion
  * bad files end with one error line: missing, shorter than the header, wrong magic or version,
    no examples or more than the index field holds, truncated, a bad start marker or index,
    lengths that do not add up to the size, bytes after the last example, a wrong longest-example
    field, a label out of range, an empty context or completion, a token id >= the vocabulary,
    context + completion longer than T
  * the arithmetic file: made with the default dataset, and alone for a dataset without it (the
    same bytes); ARITH_CHOICE_EXAMPLES held-out problems, context "\na+b=", four distinct
    completions in the dataset's format, the right one the sum and at the label, the others sums
    of +-1, +-2, +-10, +-20, +-100; every label place used; the same bytes twice; every format
*/
#define _DEFAULT_SOURCE  // M_PI in common/rng.h, next to the POSIX functions harness.h asks for
#include "harness.h"

#include "common/arithmetic.h"
#include "common/eval.h"

// ----------------------------------------------------------------------------
// a few examples, written and read back

#define NX 7
#define V 50
#define T 12

typedef struct {
    int context[8], n_context;
    int comp[5][6], lengths[5], K;
    int label;
} Example;

// K from 1 to 5, contexts of 1 to 6 tokens, completions of 1 to 6; the longest is 12 = T tokens
static Example examples[NX] = {
    {{3, 4, 5}, 3, {{7}, {8, 9}, {10, 11, 12}, {13}}, {1, 2, 3, 1}, 4, 2},
    {{1}, 1, {{2, 2}, {3, 3}}, {2, 2}, 2, 0},
    {{6, 6, 6, 6, 6, 6}, 6, {{1, 2, 3, 4, 5, 6}, {49}, {0, 0}}, {6, 1, 2}, 3, 1},
    {{20, 21}, 2, {{22}}, {1}, 1, 0},
    {{30, 31, 32, 33}, 4, {{34, 35}, {36}, {37, 38, 39}, {40}, {41, 42}}, {2, 1, 3, 1, 2}, 5, 4},
    {{9, 8}, 2, {{7, 7, 7}, {6, 6, 6}, {5, 5, 5}, {4, 4, 4}}, {3, 3, 3, 3}, 4, 3},
    {{44}, 1, {{45}, {46}, {47}, {48}}, {1, 1, 1, 1}, 4, 1},
};

static void write_examples(const char* path) {
    EvalWriter w;
    memset(&w, 0, sizeof(w));
    for (int i = 0; i < NX; i++) {
        const int* comps[5];
        for (int c = 0; c < examples[i].K; c++) { comps[c] = examples[i].comp[c]; }
        eval_writer_add(&w, examples[i].context, examples[i].n_context, examples[i].K, comps, examples[i].lengths,
                        examples[i].label);
    }
    eval_writer_commit(&w, path);
}

static void test_format_bytes(void) {
    // two examples spelled out in the format's words
    int ctx0[2] = {5, 6}, a0[1] = {7}, b0[2] = {8, 9};
    int ctx1[1] = {300}, a1[3] = {1, 2, 3};
    const int* comps0[2] = {a0, b0};
    const int* comps1[1] = {a1};
    int len0[2] = {1, 2}, len1[1] = {3};
    EvalWriter w;
    memset(&w, 0, sizeof(w));
    eval_writer_add(&w, ctx0, 2, 2, comps0, len0, 1);
    eval_writer_add(&w, ctx1, 1, 1, comps1, len1, 0);
    eval_writer_commit(&w, tmpdir_path("spelled.bin"));
    // example 0: 65535, bytes, index 0, label 1, 2 completions, context 2: 5 6, 1: 7, 2: 8 9 (13 values)
    // example 1: 65535, bytes, index 1, label 0, 1 completion, context 1: 300, 3: 1 2 3 (11 values)
    uint16_t want[24] = {65535, 26, 0, 1, 2, 2, 5, 6, 1, 7, 2, 8, 9, 65535, 22, 1, 0, 1, 1, 300, 3, 1, 2, 3};
    FILE* f = fopen(tmpdir_path("spelled.bin"), "rb");
    int32_t header[256];
    uint16_t body[32];
    size_t got_header = fread(header, 4, 256, f), got = fread(body, 2, 32, f);
    fclose(f);
    int zeros = 1;
    for (int i = 4; i < 256; i++) { zeros = zeros && header[i] == 0; }
    CHECK(got_header == 256 && header[0] == 20240522 && header[1] == 1 && header[2] == 2 && header[3] == 26 && zeros,
          "header: magic %d version %d examples %d longest %d, rest zero %d", header[0], header[1], header[2], header[3],
          zeros);
    CHECK(got == 24 && memcmp(body, want, sizeof(want)) == 0, "the examples' values differ from the format (%zu values)",
          got);
}

static void test_read_back(void) {
    write_examples(tmpdir_path("x.bin"));
    EvalSet e;
    eval_set_load(&e, tmpdir_path("x.bin"), V, T);
    long rows = 0;
    for (int i = 0; i < NX; i++) { rows += examples[i].K; }
    CHECK(e.num_examples == NX && e.num_rows == rows && e.longest == 12, "examples %d rows %ld longest %d",
          e.num_examples, e.num_rows, e.longest);
    int ok = 1;
    for (int i = 0; i < NX && ok; i++) {
        const Example* x = &examples[i];
        ok = e.examples[i].label == x->label && e.examples[i].num_completions == x->K;
        for (int c = 0; c < x->K && ok; c++) {
            int inputs[T], targets[T], want[T + 1];
            memset(want, 0, sizeof(want));
            memcpy(want, x->context, x->n_context * sizeof(int));
            memcpy(want + x->n_context, x->comp[c], x->lengths[c] * sizeof(int));
            eval_fill_row(&e, e.examples[i].first_row + c, T, inputs, targets);
            for (int t = 0; t < T && ok; t++) {
                int next = t + 1 < x->n_context + x->lengths[c] ? want[t + 1] : 0;
                ok = inputs[t] == want[t] && targets[t] == next;
                if (!ok) {
                    printf("  example %d completion %d position %d: input %d target %d\n", i, c, t, inputs[t], targets[t]);
                }
            }
        }
    }
    CHECK(ok, "rows read back differ from the examples written");
    eval_set_free(&e);
}

// ----------------------------------------------------------------------------
// scoring with a fake model

static float weight[V];

typedef struct {
    float losses[64 * T];
    int calls;
} Fake;

// the loss at a position is the weight of its target token
static const float* fake_losses(void* ctx, const int* inputs, const int* targets, int B, int Tt) {
    Fake* f = (Fake*)ctx;
    (void)inputs;
    for (int i = 0; i < B * Tt; i++) { f->losses[i] = weight[targets[i]]; }
    f->calls++;
    return f->losses;
}

// the expected answers, from the examples alone: the completion of the lowest mean weight
static int expected_correct(int lo, int hi, double* means) {
    int correct = 0;
    long row = 0;
    for (int i = 0; i < hi; i++) {
        int best = 0;
        for (int c = 0; c < examples[i].K; c++, row++) {
            double sum = 0.0;
            for (int j = 0; j < examples[i].lengths[c]; j++) { sum += weight[examples[i].comp[c][j]]; }
            means[row] = sum / examples[i].lengths[c];
            if (means[row] < means[row - c + best]) { best = c; }
        }
        if (i >= lo) { correct += best == examples[i].label; }
    }
    return correct;
}

static void test_scoring(void) {
    EvalSet e;
    eval_set_load(&e, tmpdir_path("x.bin"), V, T);
    int inputs[64 * T], targets[64 * T];
    double means[64];
    uint64_t rng = 7;
    for (int trial = 0; trial < 20; trial++) {
        for (int v = 0; v < V; v++) { weight[v] = 0.5f + random_f32(&rng); }
        weight[0] = trial % 2 ? 100.0f : 0.0f;  // the padding target: wrong positions read show up
        int want = expected_correct(0, NX, means);
        int Bs[6] = {1, 2, 3, 4, 7, 64};
        for (int k = 0; k < 6; k++) {
            Fake fake = {{0}, 0};
            for (long r = 0; r < e.num_rows; r++) { e.row_loss[r] = -1.0; }  // a row left out shows
            int got = eval_run(&e, 0, NX, fake_losses, &fake, Bs[k], T, inputs, targets);
            int same = 1;
            for (long r = 0; r < e.num_rows; r++) { same = same && fabs(e.row_loss[r] - means[r]) < 1e-6; }
            CHECK(got == want && same && fake.calls == (int)((e.num_rows + Bs[k] - 1) / Bs[k]),
                  "trial %d B %d: %d right (expected %d), mean losses %s, %d forward passes", trial, Bs[k], got, want,
                  same ? "right" : "WRONG", fake.calls);
        }
        // contiguous shares of 2 and 3 ranks (dist_shard's cut), added up
        for (int ranks = 2; ranks <= 3; ranks++) {
            int sum = 0, sum_want = 0;
            for (int r = 0; r < ranks; r++) {
                int share = (NX + ranks - 1) / ranks, lo = r * share < NX ? r * share : NX;
                int hi = lo + share < NX ? lo + share : NX;
                Fake fake = {{0}, 0};
                sum += eval_run(&e, lo, hi, fake_losses, &fake, 3, T, inputs, targets);
                sum_want += expected_correct(lo, hi, means);
            }
            CHECK(sum == want && sum_want == want, "trial %d, %d ranks: %d right in all (expected %d)", trial, ranks, sum,
                  want);
        }
    }
    // equal losses: the first completion is the answer
    for (int v = 0; v < V; v++) { weight[v] = 1.0f; }
    int label0 = 0;
    for (int i = 0; i < NX; i++) { label0 += examples[i].label == 0; }
    Fake fake = {{0}, 0};
    int got = eval_run(&e, 0, NX, fake_losses, &fake, 4, T, inputs, targets);
    CHECK(got == label0, "equal losses: %d right, expected the %d examples whose label is 0", got, label0);
    eval_set_free(&e);
}

// ----------------------------------------------------------------------------
// bad files

static const char* bad_path;
static int bad_vocab = V, bad_T = T;
static void load_bad(void* arg) {
    (void)arg;
    EvalSet e;
    eval_set_load(&e, bad_path, bad_vocab, bad_T);
}

static unsigned char good[4096];
static size_t good_size;

// a copy of the good file with `n` bytes at `offset` replaced (n 0: cut to `offset` bytes)
static const char* damaged(const char* name, long offset, const void* bytes, size_t n) {
    static unsigned char copy[4096];
    memcpy(copy, good, good_size);
    size_t size = good_size;
    if (n == 0) { size = (size_t)offset; } else { memcpy(copy + offset, bytes, n); }
    write_bytes(tmpdir_path(name), copy, size);
    return tmpdir_path(name);
}

// a file of one example's values (a header with its size as the longest)
static const char* write_raw(const char* name, const uint16_t* values, int n) {
    unsigned char bytes[1024 + 64];
    int32_t header[256];
    memset(header, 0, sizeof(header));
    header[0] = 20240522;
    header[1] = 1;
    header[2] = 1;
    header[3] = 2 * n;
    memcpy(bytes, header, 1024);
    memcpy(bytes + 1024, values, 2 * (size_t)n);
    write_bytes(tmpdir_path(name), bytes, 1024 + 2 * (size_t)n);
    return tmpdir_path(name);
}

static void put16(const char* name, const char* what, long value_index, uint16_t v, const char* needle) {
    bad_path = damaged(name, 1024 + 2 * value_index, &v, 2);
    expect_fatal(what, load_bad, NULL, "eval file", needle, NULL);
}

static void test_bad_files(void) {
    FILE* f = fopen(tmpdir_path("x.bin"), "rb");
    good_size = fread(good, 1, sizeof(good), f);
    fclose(f);
    // example 0 (values 0..19): 65535, 40, 0, label 2, K 4, 3: 3 4 5, 1: 7, 2: 8 9, 3: 10 11 12, 1: 13
    bad_path = tmpdir_path("missing.bin");
    expect_fatal("missing file", load_bad, NULL, "cannot open", NULL);
    bad_path = damaged("short.bin", 1000, NULL, 0);
    expect_fatal("shorter than the header", load_bad, NULL, "shorter than its 1024-byte header", NULL);
    int32_t v = 20240520;
    bad_path = damaged("magic.bin", 0, &v, 4);
    expect_fatal("wrong magic", load_bad, NULL, "bad magic 20240520", NULL);
    v = 2;
    bad_path = damaged("version.bin", 4, &v, 4);
    expect_fatal("wrong version", load_bad, NULL, "version 2, expected 1", NULL);
    v = 0;
    bad_path = damaged("none.bin", 8, &v, 4);
    expect_fatal("no examples", load_bad, NULL, "0 examples (1 to 65535", NULL);
    v = 65536;
    bad_path = damaged("many.bin", 8, &v, 4);
    expect_fatal("more examples than the index holds", load_bad, NULL, "65536 examples (1 to 65535", NULL);
    v = NX + 1;
    bad_path = damaged("more.bin", 8, &v, 4);
    expect_fatal("more examples than the file holds", load_bad, NULL, "truncated", NULL);
    v = NX - 1;
    bad_path = damaged("fewer.bin", 8, &v, 4);
    expect_fatal("fewer examples than the file holds", load_bad, NULL, "bytes after its last example", NULL);
    bad_path = damaged("cut.bin", (long)good_size - 2, NULL, 0);
    expect_fatal("truncated in the last example", load_bad, NULL, "truncated", NULL);
    bad_path = damaged("odd.bin", (long)good_size - 1, NULL, 0);
    expect_fatal("an odd byte count", load_bad, NULL, "odd number of bytes", NULL);
    v = 30;
    bad_path = damaged("longest.bin", 12, &v, 4);
    expect_fatal("wrong longest-example field", load_bad, NULL, "longest example", NULL);
    put16("start.bin", "bad start marker", 0, 65534, "does not start with 65535");
    put16("index.bin", "wrong index", 2, 5, "example 0 has index 5");
    put16("label.bin", "label out of range", 3, 4, "label 4, but 4 completions");
    put16("k0.bin", "no completions", 4, 0, "no completions");
    put16("k3.bin", "fewer completions than stored", 4, 3, "do not add up");
    put16("size.bin", "size 2 bytes more", 1, 42, "do not add up");
    put16("ctx.bin", "context length off", 5, 4, "do not add up");
    put16("token.bin", "token id = vocabulary", 6, V, "token id 50 is not below the vocabulary size 50");
    put16("token2.bin", "completion token id > vocabulary", 10, 65535, "token id 65535");
    // an empty context, an empty completion: one example each, its size consistent
    uint16_t empty_context[8] = {65535, 16, 0, 0, 1, 0, 1, 5};  // context 0 tokens, completion 1: 5
    uint16_t empty_completion[8] = {65535, 16, 0, 0, 1, 1, 5, 0};  // context 1: 5, completion 0 tokens
    bad_path = write_raw("emptyctx.bin", empty_context, 8);
    expect_fatal("empty context", load_bad, NULL, "example 0 has an empty context", NULL);
    bad_path = write_raw("emptycomp.bin", empty_completion, 8);
    expect_fatal("empty completion", load_bad, NULL, "example 0: completion 0 is empty", NULL);
    bad_path = tmpdir_path("x.bin");
    bad_T = 11;
    expect_fatal("an example longer than T", load_bad, NULL, "context and completion are 12 tokens, more than -t 11",
                 NULL);
    bad_T = T;
    bad_vocab = 49;
    expect_fatal("token 49 with vocabulary 49", load_bad, NULL, "token id 49 is not below the vocabulary size 49", NULL);
    bad_vocab = V;
}

// ----------------------------------------------------------------------------
// the arithmetic data's eval file

// the number written by tokens[0..n) in the format (padded or not, reversed or not); -1 if not digits
static long read_number(const ArithTokens* t, const int* tokens, int n, int reverse) {
    long v = 0;
    for (int i = 0; i < n; i++) {
        int d = arith_token_digit(t, tokens[reverse ? n - 1 - i : i]);
        if (d < 0) { return -1; }
        v = v * 10 + d;
    }
    return v;
}

static void test_arith_choices(void) {
    ArithTokens t = arith_tokens();
    for (int format = 0; format < 4; format++) {
        ArithSpec s = arith_default_spec();
        s.format = format;
        s.max_digits = format == 3 ? 2 : format + 1;
        const char* path = tmpdir_path("choices.bin");
        arith_write_choices(path, &s);
        EvalSet e;
        eval_set_load(&e, path, ARITH_VOCAB_SIZE, 1 + arith_problem_tokens(&s));
        int ok = e.num_examples == ARITH_CHOICE_EXAMPLES && e.num_rows == ARITH_CHOICE_EXAMPLES * ARITH_CHOICES;
        int labels[ARITH_CHOICES] = {0}, bad_example = -1;
        for (int i = 0; i < e.num_examples && ok; i++) {
            const EvalExample* x = &e.examples[i];
            const EvalRow* r0 = &e.rows[x->first_row];
            const uint16_t* ctx = e.stream + r0->context;
            int ctx_tokens[3 * ARITH_MAX_DIGITS + 5];
            for (int j = 0; j < r0->context_length; j++) { ctx_tokens[j] = ctx[j]; }
            // "\n" a "+" b "=": a and b read back, a held-out pair
            int plus = -1;
            for (int j = 1; j < r0->context_length; j++) { if (ctx_tokens[j] == t.plus) { plus = j; } }
            long a = plus > 1 ? read_number(&t, ctx_tokens + 1, plus - 1, 0) : -1;
            long b = plus > 0 ? read_number(&t, ctx_tokens + plus + 1, r0->context_length - plus - 2, 0) : -1;
            ok = x->num_completions == ARITH_CHOICES && ctx_tokens[0] == t.newline &&
                 ctx_tokens[r0->context_length - 1] == t.equals && a >= 0 && b >= 0 && arith_is_heldout(&s, a, b);
            long values[ARITH_CHOICES];
            for (int c = 0; c < ARITH_CHOICES && ok; c++) {
                const EvalRow* r = &e.rows[x->first_row + c];
                int comp[ARITH_MAX_DIGITS + 3];
                for (int j = 0; j < r->completion_length; j++) { comp[j] = e.stream[r->completion + j]; }
                int n = r->completion_length - 1;
                values[c] = read_number(&t, comp, n, format & ARITH_REVERSE);
                long d = values[c] - (a + b);
                if (d < 0) { d = -d; }
                ok = comp[n] == t.newline && values[c] >= 0 &&
                     (!(format & ARITH_PAD) || n == s.max_digits + 1) &&
                     (c == x->label ? d == 0 : d == 1 || d == 2 || d == 10 || d == 20 || d == 100);
                for (int k = 0; k < c && ok; k++) { ok = values[k] != values[c]; }
            }
            labels[x->label]++;
            if (!ok) { bad_example = i; }
        }
        int spread = 1;
        for (int c = 0; c < ARITH_CHOICES; c++) { spread = spread && labels[c] > 0; }
        CHECK(ok && spread, "format %s: example %d is not a held-out sum among near misses, or a label place is unused",
              ARITH_FORMAT_NAMES[format], bad_example);
        eval_set_free(&e);
        // the same bytes again
        FILE* f1 = fopen(path, "rb");
        static unsigned char first[65536], second[65536];
        size_t n1 = fread(first, 1, sizeof(first), f1);
        fclose(f1);
        arith_write_choices(path, &s);
        FILE* f2 = fopen(path, "rb");
        size_t n2 = fread(second, 1, sizeof(second), f2);
        fclose(f2);
        CHECK(n1 == n2 && memcmp(first, second, n1) == 0, "format %s: a second write gives other bytes",
              ARITH_FORMAT_NAMES[format]);
    }
}

// a default dataset made before there was a multiple-choice file gets it on the next run
static void test_missing_choices(void) {
    char dir[600], path[700];
    snprintf(dir, sizeof(dir), "%s", tmpdir_path("dataset"));
    snprintf(path, sizeof(path), "%s/%s", dir, ARITH_CHOICES_NAME);
    CHECK(arith_ensure_dataset(dir) == 1 && file_exists(path), "the dataset is made with its multiple-choice file");
    FILE* f = fopen(path, "rb");
    static unsigned char first[65536], second[65536];
    size_t n1 = fread(first, 1, sizeof(first), f);
    fclose(f);
    CHECK(arith_ensure_dataset(dir) == 0, "a complete dataset is left alone");
    remove(path);
    CHECK(arith_ensure_dataset(dir) == 1 && file_exists(path), "a dataset without the file gets it");
    f = fopen(path, "rb");
    size_t n2 = fread(second, 1, sizeof(second), f);
    fclose(f);
    CHECK(n1 == n2 && memcmp(first, second, n1) == 0, "the file made alone is the one made with the dataset");
    const char* names[5] = {ARITH_TRAIN_NAME, ARITH_VAL_NAME, ARITH_TOKENIZER_NAME, ARITH_MARKER_NAME, ARITH_CHOICES_NAME};
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        remove(path);
    }
    rmdir(dir);
}

int main(void) {
    tmpdir_create("test_eval");
    test_format_bytes();
    test_read_back();
    test_scoring();
    test_bad_files();
    test_arith_choices();
    test_missing_choices();
    return harness_finish("test_eval");
}
