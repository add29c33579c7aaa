/*
tests/test_arithmetic.c: the default dataset and its accuracy scorer (common/arithmetic.h).

  * the token ids are GPT-2's (checked once against gpt2.tiktoken; the ids are written out here)
  * the generator is deterministic: two runs write the same bytes, another seed other bytes; the
    marker gives back the settings (a marker without a format is plain); the default folder is
    rewritten when it holds other settings
  * in each of the four formats (plain, padded, reversed, padded-reversed): the shards load with
    common/dataloader.h, every problem in them is a correct sum written in the format (padded
    ones of one length, after a newline that starts the shard), the training problems are never
    held out and the validation problems always are, so the two never share a problem (checked
    pair by pair as well)
  * the tokens decode, with common/tokenizer.h and the generated tokenizer.bin, to the text of
    the problems (computed here digit by digit, independently of the encoder)
  * the scorer counts exactly the right answers, in every format: fake "models" that answer right,
    wrong by one, right half the time, never stop, or add a digit
*/
#define _DEFAULT_SOURCE  // M_PI in common/rng.h, next to the POSIX functions harness.h asks for
#include "harness.h"

#include "common/arithmetic.h"
#include "common/dataloader.h"
#include "common/tokenizer.h"

// ----------------------------------------------------------------------------
// token ids

static void test_token_ids(void) {
    // from gpt2.tiktoken: '!'..'~' are ranks 0..93, '\n' is 198, ' ' is 220
    ArithTokens t = arith_tokens();
    for (int d = 0; d < 10; d++) { CHECK(t.digit[d] == 15 + d, "digit %d is token %d, expected %d", d, t.digit[d], 15 + d); }
    CHECK(t.plus == 10 && t.equals == 28 && t.newline == 198, "'+' %d '=' %d '\\n' %d, expected 10 28 198", t.plus,
          t.equals, t.newline);
    CHECK(gpt2_byte_token('!') == 0 && gpt2_byte_token('~') == 93 && gpt2_byte_token(' ') == 220 &&
          gpt2_byte_token(0) == 188 && gpt2_byte_token(0xAD) == 255 && gpt2_byte_token(0xFF) == 187,
          "the byte tokens of '!', '~', ' ', 0x00, 0xAD, 0xFF");
    int seen[256] = {0}, bijective = 1;
    for (int b = 0; b < 256; b++) {
        int id = gpt2_byte_token((unsigned char)b);
        bijective = bijective && id >= 0 && id < 256 && !seen[id] && gpt2_token_byte(id) == b;
        if (id >= 0 && id < 256) { seen[id] = 1; }
    }
    CHECK(bijective, "bytes and token ids 0..255 map one to one");
    CHECK(gpt2_token_byte(256) == -1 && gpt2_token_byte(-1) == -1, "ids outside 0..255 are no bytes");
}

// ----------------------------------------------------------------------------
// the files

static int same_file(const char* p, const char* q) {
    FILE* f = fopen(p, "rb");
    FILE* g = fopen(q, "rb");
    int same = f != NULL && g != NULL;
    while (same) {
        int a = fgetc(f), b = fgetc(g);
        if (a != b) { same = 0; }
        if (a == EOF || b == EOF) { break; }
    }
    if (f) { fclose(f); }
    if (g) { fclose(g); }
    return same;
}

static const char* FILES[] = {ARITH_TRAIN_NAME, ARITH_VAL_NAME, ARITH_TOKENIZER_NAME, ARITH_MARKER_NAME};

static void remove_dataset(const char* dir) {
    for (int i = 0; i < 4; i++) {
        char p[600];
        snprintf(p, sizeof(p), "%s/%s", dir, FILES[i]);
        remove(p);
    }
    rmdir(dir);
}

static void test_deterministic(void) {
    ArithSpec s = arith_default_spec();
    arith_write_dataset(tmpdir_path("one"), &s);
    arith_write_dataset(tmpdir_path("two"), &s);
    char p[600], q[600];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof(p), "%s/%s", tmpdir_path("one"), FILES[i]);
        snprintf(q, sizeof(q), "%s/%s", tmpdir_path("two"), FILES[i]);
        CHECK(same_file(p, q), "%s is written the same twice", FILES[i]);
    }
    ArithSpec other = s;
    other.seed++;
    arith_write_dataset(tmpdir_path("other"), &other);
    snprintf(q, sizeof(q), "%s/%s", tmpdir_path("other"), ARITH_TRAIN_NAME);
    snprintf(p, sizeof(p), "%s/%s", tmpdir_path("one"), ARITH_TRAIN_NAME);
    CHECK(!same_file(p, q), "another seed gives other problems");

    ArithSpec read;
    CHECK(arith_read_marker(tmpdir_path("one"), &read) && read.max_digits == s.max_digits && read.seed == s.seed &&
          read.train_problems == s.train_problems && read.val_problems == s.val_problems &&
          read.heldout_percent == s.heldout_percent, "the marker gives back the settings");
    CHECK(read.format == ARITH_PAD + ARITH_REVERSE && s.format == read.format, "the marker gives back the format");
    CHECK(!arith_read_marker(tmpdir_path("nothing"), &read), "no marker: not an arithmetic folder");
    CHECK(arith_ensure_dataset(tmpdir_path("one")) == 0, "a complete dataset is not regenerated");
    CHECK(arith_ensure_dataset(tmpdir_path("new/nested")) == 1, "a missing dataset is generated (folders too)");

    // a marker from before the formats: plain
    char old[600];
    snprintf(old, sizeof(old), "%s/%s", tmpdir_path("old"), ARITH_MARKER_NAME);
    arith_make_dirs(tmpdir_path("old"));
    const char* line = "arithmetic max_digits=2 train_problems=200000 val_problems=5000 seed=20240520 heldout_percent=10\n";
    write_bytes(old, line, strlen(line));
    CHECK(arith_read_marker(tmpdir_path("old"), &read) && read.format == 0 && read.max_digits == 2,
          "a marker without format= reads as plain");
    // the default folder with other settings (an earlier default) is rewritten with the default ones
    CHECK(arith_ensure_dataset(tmpdir_path("old")) == 1 && arith_read_marker(tmpdir_path("old"), &read) &&
          read.format == s.format, "a dataset with other settings is rewritten with the default ones");
    snprintf(p, sizeof(p), "%s/%s", tmpdir_path("old"), ARITH_TRAIN_NAME);
    snprintf(q, sizeof(q), "%s/%s", tmpdir_path("one"), ARITH_TRAIN_NAME);
    CHECK(same_file(p, q), "the rewritten dataset is the default one");
}

// a whole shard as ints
static int* read_shard(const char* path, long* n) {
    FILE* f = fopen_check(path, "rb");
    *n = dataloader_read_header(path, f);
    uint16_t* raw = (uint16_t*)malloc_check((size_t)*n * sizeof(uint16_t), "shard");
    fread_check(raw, sizeof(uint16_t), (size_t)*n, f, path);
    fclose(f);
    int* tokens = (int*)malloc_check((size_t)*n * sizeof(int), "shard");
    for (long i = 0; i < *n; i++) { tokens[i] = raw[i]; }
    free(raw);
    return tokens;
}

// the four formats, each in its own folder (a small training shard for the three that are not
// the default, which test_deterministic wrote to "one")
static const char* FORMAT_DIRS[4] = {"plain", "padded", "reversed", "one"};

static ArithSpec spec_of_format(int format) {
    ArithSpec s = arith_default_spec();
    s.format = format;
    if (format != s.format) { s.train_problems = 20000; }
    return s;
}

// How a format writes the numbers of a problem, worked out here digit by digit: the width of an
// operand and of the answer (0: as many digits as the number has, with no leading zero) and
// whether the answer's digits come least significant first.
typedef struct {
    int operand_width, answer_width, reversed;
} Layout;

static Layout layout_of(const ArithSpec* s) {
    int padded = s->format == 1 || s->format == 3;  // padded, padded-reversed
    Layout l = {padded ? s->max_digits : 0, padded ? s->max_digits + 1 : 0, s->format == 2 || s->format == 3};
    return l;
}

// the text of v with `width` digits (0: its own number of digits), least significant first if asked
static int render_number(char* out, long v, int width, int reversed) {
    char digits[24];  // least significant first
    int n = 0;
    do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v > 0);
    while (n < width) { digits[n++] = '0'; }
    for (int i = 0; i < n; i++) { out[i] = reversed ? digits[i] : digits[n - 1 - i]; }
    out[n] = '\0';
    return n;
}

// "a+b=c\n" as the format writes it
static int render_problem(char* out, const Layout* l, long a, long b) {
    int n = render_number(out, a, l->operand_width, 0);
    out[n++] = '+';
    n += render_number(out + n, b, l->operand_width, 0);
    out[n++] = '=';
    n += render_number(out + n, a + b, l->answer_width, l->reversed);
    out[n++] = '\n';
    out[n] = '\0';
    return n;
}

// parses a number ending at token `end`: exactly `width` digits when width > 0, else 1..max_digits
// digits with no zero in the most significant place; least significant first when `reversed`. -1 if
// malformed.
static long parse_number(const ArithTokens* t, const int* tokens, long n, long* i, int end, int max_digits, int width,
                         int reversed) {
    long v = 0, start = *i;
    while (*i < n && arith_token_digit(t, tokens[*i]) >= 0) { (*i)++; }
    long digits = *i - start;
    int most_significant = digits > 0 ? tokens[reversed ? *i - 1 : start] : -1;
    if (width > 0 ? digits != width : (digits < 1 || digits > max_digits || (digits > 1 && most_significant == t->digit[0]))) {
        return -1;
    }
    for (long k = 0; k < digits; k++) { v = 10 * v + arith_token_digit(t, tokens[reversed ? *i - 1 - k : start + k]); }
    if (*i >= n || tokens[*i] != end) { return -1; }
    (*i)++;
    return v;
}

// parses "a+b=" (and, with c, "c\n") at *i in the layout; 0 if malformed
static int parse_problem(const ArithTokens* t, const Layout* l, const int* tokens, long n, long* i, int max_digits,
                         long* a, long* b, long* c) {
    *a = parse_number(t, tokens, n, i, t->plus, max_digits, l->operand_width, 0);
    *b = *a < 0 ? -1 : parse_number(t, tokens, n, i, t->equals, max_digits, l->operand_width, 0);
    if (c) { *c = *b < 0 ? -1 : parse_number(t, tokens, n, i, t->newline, max_digits + 1, l->answer_width, l->reversed); }
    return *b >= 0 && (!c || *c >= 0);
}

#define PAIR_BASE 1000  // operands below it: the default has at most 3 digits

typedef struct {
    long problems, malformed, wrong_sum, wrong_side, wrong_length, first;
} ShardStats;

// checks every problem of a shard; held-out pairs are marked in (or checked against) seen
static ShardStats check_problems(const ArithSpec* s, const int* tokens, long n, int heldout, unsigned char* seen,
                                 long* overlaps) {
    ArithTokens t = arith_tokens();
    Layout l = layout_of(s);
    ShardStats st = {0, 0, 0, 0, 0, n > 0 ? tokens[0] : -1};
    long i = l.operand_width > 0;  // padded shards start with a newline
    while (i < n) {
        long a, b, c, start = i;
        if (!parse_problem(&t, &l, tokens, n, &i, s->max_digits, &a, &b, &c)) { st.malformed++; break; }
        st.problems++;
        st.wrong_sum += c != a + b;
        st.wrong_side += arith_is_heldout(s, a, b) != heldout;
        st.wrong_length += l.operand_width > 0 && i - start != arith_problem_tokens(s);
        long key = a * PAIR_BASE + b;
        if (heldout) { seen[key] = 1; } else { *overlaps += seen[key]; }
    }
    return st;
}

static void test_shards_of_format(int format) {
    ArithSpec s = spec_of_format(format);
    const char* name = ARITH_FORMAT_NAMES[format];
    const char* dir = tmpdir_path(FORMAT_DIRS[format]);
    if (format != arith_default_spec().format) { arith_write_dataset(dir, &s); }
    char train[600], val[600];
    snprintf(train, sizeof(train), "%s/%s", dir, ARITH_TRAIN_NAME);
    snprintf(val, sizeof(val), "%s/%s", dir, ARITH_VAL_NAME);

    DataLoader d;
    dataloader_init(&d, train, 4, 64, ARITH_VOCAB_SIZE, 0, 1);
    dataloader_next_batch(&d);
    CHECK(d.num_shards == 1 && d.inputs[1] == d.targets[0], "%s: the training shard loads", name);
    dataloader_free(&d);
    dataloader_init(&d, val, 4, 64, ARITH_VOCAB_SIZE, 0, 1);
    dataloader_next_batch(&d);
    CHECK(d.num_shards == 1, "%s: the validation shard loads", name);
    dataloader_free(&d);

    CHECK(s.max_digits <= 3, "the default has at most 3 digits (PAIR_BASE)");
    unsigned char* seen = (unsigned char*)calloc_check(PAIR_BASE * PAIR_BASE, 1, "pairs");
    long overlaps = 0, n;
    int* tokens = read_shard(val, &n);
    ShardStats v = check_problems(&s, tokens, n, 1, seen, &overlaps);
    free(tokens);
    tokens = read_shard(train, &n);
    ShardStats tr = check_problems(&s, tokens, n, 0, seen, &overlaps);
    free(tokens);
    CHECK(v.problems == s.val_problems && v.malformed == 0, "%s: val: %ld problems (%ld malformed), expected %ld", name,
          v.problems, v.malformed, s.val_problems);
    CHECK(tr.problems == s.train_problems && tr.malformed == 0, "%s: train: %ld problems (%ld malformed), expected %ld",
          name, tr.problems, tr.malformed, s.train_problems);
    CHECK(v.wrong_sum == 0 && tr.wrong_sum == 0, "%s: every answer is the sum (%ld, %ld wrong)", name, v.wrong_sum,
          tr.wrong_sum);
    CHECK(v.wrong_side == 0 && tr.wrong_side == 0, "%s: val problems held out, train problems not (%ld, %ld wrong)",
          name, v.wrong_side, tr.wrong_side);
    CHECK(overlaps == 0, "%s: %ld training problems are also validation problems", name, overlaps);
    if (format & ARITH_PAD) {
        ArithTokens t = arith_tokens();
        CHECK(v.first == t.newline && tr.first == t.newline, "%s: the shards start with a newline", name);
        CHECK(v.wrong_length == 0 && tr.wrong_length == 0 && arith_problem_tokens(&s) == 10,
              "%s: every problem has %d tokens (%ld, %ld others)", name, arith_problem_tokens(&s), v.wrong_length,
              tr.wrong_length);
    }

    // the accuracy problems are held out too, the solved ones before them are not
    ArithEval e;
    CHECK(arith_eval_init(&e, &s, 500, 8, 64), "scorer set-up");
    int bad = 0;
    for (int i = 0; i < e.K; i++) { bad += !arith_is_heldout(&s, e.a[i], e.b[i]); }
    CHECK(bad == 0, "%s: %d accuracy problems are not held out", name, bad);
    bad = 0;
    for (int i = 0; i < e.K * e.context; i++) { bad += arith_is_heldout(&s, e.context_a[i], e.context_b[i]); }
    CHECK(bad == 0, "%s: %d of the solved problems before the prompts are held out", name, bad);
    arith_eval_free(&e);
    free(seen);
}

static void test_shards(void) {
    for (int format = 0; format < 4; format++) { test_shards_of_format(format); }
}

static void test_decode(void) {
    for (int format = 0; format < 4; format++) {
        ArithSpec s = spec_of_format(format);
        Layout l = layout_of(&s);
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", tmpdir_path(FORMAT_DIRS[format]), ARITH_TOKENIZER_NAME);
        Tokenizer tok;
        tokenizer_init(&tok, path);
        CHECK(tok.loaded && tok.vocab_size == ARITH_VOCAB_SIZE && tok.eot_token == ARITH_EOT, "tokenizer.bin loads");
        snprintf(path, sizeof(path), "%s/%s", tmpdir_path(FORMAT_DIRS[format]), ARITH_VAL_NAME);
        long n;
        int* tokens = read_shard(path, &n);
        // the first 300 problems, written here digit by digit from the same draws
        static char expected[300 * 16 + 2], got[300 * 16 + 2];
        uint64_t rng = arith_seed(&s, 1);
        size_t len = 0;
        if (l.operand_width > 0) { expected[len++] = '\n'; }
        for (int i = 0; i < 300; i++) {
            long a, b;
            arith_draw(&s, &rng, 1, &a, &b);
            len += (size_t)render_problem(expected + len, &l, a, b);
        }
        size_t total = tokenizer_decode(&tok, tokens, (int)len, got, sizeof(got));
        CHECK(total == len && strcmp(got, expected) == 0, "%s: the tokens decode to the problems: one token per character",
              ARITH_FORMAT_NAMES[format]);
        if (format == 0) {
            char all[80];
            int eot = ARITH_EOT;
            tokenizer_decode(&tok, &eot, 1, all, sizeof(all));
            CHECK(strcmp(all, "<|endoftext|>") == 0, "id 256 is <|endoftext|>");
        }
        free(tokens);
        tokenizer_free(&tok);
    }
    char text[32];
    Layout pr = {2, 3, 1};
    render_problem(text, &pr, 12, 5);
    CHECK(strcmp(text, "12+05=710\n") == 0, "padded-reversed writes 12+5 as \"12+05=710\", got \"%s\"", text);
}

// ----------------------------------------------------------------------------
// the scorer, with fake models

enum { RIGHT, OFF_BY_ONE, RIGHT_WHEN_A_EVEN, NEVER_STOPS, EXTRA_DIGIT };

typedef struct {
    int mode;
    int max_B, max_T;  // the most the scorer may hand over
    int calls, contract_broken;
    int context;             // solved problems before each prompt
    const ArithSpec* spec;
    Layout layout;
    ArithTokens t;
} Fake;

// answers like a model would, one token per call, from the prompt "\na+b=" and the answer so far
static void fake_greedy(void* ctx, const int* tokens, int B, int T, const int* lengths, int* next) {
    Fake* f = (Fake*)ctx;
    f->calls++;
    if (B < 1 || B > f->max_B || T < 1 || T > f->max_T) { f->contract_broken++; }
    for (int r = 0; r < B; r++) {
        const int* row = tokens + (size_t)r * T;
        if (lengths[r] < 1 || lengths[r] > T || row[0] != f->t.newline) { f->contract_broken++; next[r] = 0; continue; }
        long i = 1, a, b, c;
        for (int k = 0; k < f->context; k++) {  // solved training problems come first
            if (!parse_problem(&f->t, &f->layout, row, lengths[r], &i, f->spec->max_digits, &a, &b, &c) || c != a + b ||
                arith_is_heldout(f->spec, a, b)) {
                f->contract_broken++;
            }
        }
        if (!parse_problem(&f->t, &f->layout, row, lengths[r], &i, f->spec->max_digits, &a, &b, NULL)) {
            f->contract_broken++;
            next[r] = 0;
            continue;
        }
        long done = lengths[r] - i;  // answer tokens so far
        c = a + b + (f->mode == OFF_BY_ONE || (f->mode == RIGHT_WHEN_A_EVEN && a % 2 == 1));
        char text[32];
        int n = render_number(text, c, f->layout.answer_width, f->layout.reversed);
        if (f->mode == EXTRA_DIGIT) { text[n++] = '7'; }
        text[n++] = '\n';
        text[n] = '\0';
        if (f->mode == NEVER_STOPS) {
            next[r] = f->t.digit[3];
        } else {
            next[r] = done < (long)strlen(text) ? gpt2_byte_token((unsigned char)text[done]) : f->t.newline;
        }
    }
}

static void test_scorer_of_format(int format) {
    ArithSpec s = spec_of_format(format);
    const char* fname = ARITH_FORMAT_NAMES[format];
    ArithEval e;
    CHECK(!arith_eval_init(&e, &s, 10, 4, arith_eval_row_tokens(&s, 0) - 1), "rows too short for the problems: no scorer");
    CHECK(arith_eval_init(&e, &s, 10, 4, arith_eval_row_tokens(&s, ARITH_CONTEXT) - 1) && e.context == 0,
          "rows too short for the context: prompts without it");
    arith_eval_free(&e);
    int K = 203, B = 8;  // K not a multiple of B: the last group is smaller
    CHECK(arith_eval_init(&e, &s, K, B, 64) && e.context == ARITH_CONTEXT, "scorer set-up, with context");
    int a_even = 0;
    for (int i = 0; i < K; i++) { a_even += e.a[i] % 2 == 0; }

    const char* names[] = {"right", "off by one", "right when a is even", "never stops", "an extra digit"};
    int expected[] = {K, 0, a_even, 0, 0};
    for (int mode = RIGHT; mode <= EXTRA_DIGIT; mode++) {
        Fake f;
        memset(&f, 0, sizeof(f));
        f.mode = mode;
        f.max_B = B;
        f.max_T = arith_eval_row_tokens(&s, ARITH_CONTEXT);
        f.t = arith_tokens();
        f.context = e.context;
        f.spec = &s;
        f.layout = layout_of(&s);
        float acc = arith_eval_run(&e, fake_greedy, &f);
        CHECK(e.correct == expected[mode] && fabsf(acc - (float)expected[mode] / K) < 1e-6f,
              "%s: a model that answers %s: %d of %d correct (accuracy %.4f), expected %d", fname, names[mode],
              e.correct, K, acc, expected[mode]);
        CHECK(f.contract_broken == 0, "%s: %s: the scorer kept the callback's contract", fname, names[mode]);
        // a group takes one call per answer token plus the newline (at most max_digits + 2)
        int groups = (K + B - 1) / B;
        CHECK(f.calls >= groups * 2 && f.calls <= groups * (s.max_digits + 2), "%s: %s: %d calls for %d groups", fname,
              names[mode], f.calls, groups);
        if (mode == RIGHT) {  // shown the usual way, whatever the format
            char want[64];
            snprintf(want, sizeof(want), "%ld+%ld=%ld ok", e.a[0], e.b[0], e.a[0] + e.b[0]);
            CHECK(strcmp(e.shown[0], want) == 0, "%s: shown: \"%s\", expected \"%s\"", fname, e.shown[0], want);
            char line[ARITH_SHOWN * 64 + 96], written[32];
            arith_eval_examples(&e, line, sizeof(line));
            render_problem(written, &f.layout, e.a[0], e.b[0]);
            written[strlen(written) - 1] = '\0';
            CHECK(strncmp(line, want, strlen(want)) == 0 && strstr(line, written) != NULL,
                  "%s: the examples line \"%s\" starts with \"%s\" and shows \"%s\"", fname, line, want, written);
        }
        if (mode == OFF_BY_ONE) {
            CHECK(strstr(e.shown[0], "wrong") != NULL, "%s: shown: \"%s\" says wrong", fname, e.shown[0]);
        }
    }
    arith_eval_free(&e);
}

static void test_scorer(void) {
    for (int format = 0; format < 4; format++) { test_scorer_of_format(format); }
}

int main(void) {
    tmpdir_create("test_arithmetic");
    test_token_ids();
    test_deterministic();
    test_shards();
    test_decode();
    test_scorer();
    // tmpdir_remove removes one level of files: the datasets' folders go first
    remove_dataset(tmpdir_path("new/nested"));
    rmdir(tmpdir_path("new"));
    remove_dataset(tmpdir_path("one"));
    remove_dataset(tmpdir_path("two"));
    remove_dataset(tmpdir_path("other"));
    remove_dataset(tmpdir_path("old"));
    for (int format = 0; format < 3; format++) { remove_dataset(tmpdir_path(FORMAT_DIRS[format])); }
    return harness_finish("test_arithmetic");
}
