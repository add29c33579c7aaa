/*
tests/test_arithmetic.c: the default dataset and its accuracy scorer (common/arithmetic.h).

  * the token ids are GPT-2's (checked once against gpt2.tiktoken; the ids are written out here)
  * the generator is deterministic: two runs write the same bytes, another seed other bytes
  * the shards load with common/dataloader.h, every problem in them is a correct sum, the
    training problems are never held out and the validation problems always are, so the two
    never share a problem (checked pair by pair as well)
  * the tokens decode, with common/tokenizer.h and the generated tokenizer.bin, to the text of
    the problems (computed here with printf, independently of the encoder)
  * the scorer counts exactly the right answers: fake "models" that answer right, wrong by one,
    right half the time, never stop, or add a digit
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
    CHECK(!arith_read_marker(tmpdir_path("nothing"), &read), "no marker: not an arithmetic folder");
    CHECK(arith_ensure_dataset(tmpdir_path("one")) == 0, "a complete dataset is not regenerated");
    CHECK(arith_ensure_dataset(tmpdir_path("new/nested")) == 1, "a missing dataset is generated (folders too)");
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

// parses a number of 1..max_digits digits (no leading zero) ending at token `end`; -1 if malformed
static long parse_number(const ArithTokens* t, const int* tokens, long n, long* i, int end, int max_digits) {
    long v = 0, start = *i;
    while (*i < n && arith_token_digit(t, tokens[*i]) >= 0) { v = 10 * v + arith_token_digit(t, tokens[(*i)++]); }
    long digits = *i - start;
    if (digits < 1 || digits > max_digits || (digits > 1 && tokens[start] == t->digit[0])) { return -1; }
    if (*i >= n || tokens[*i] != end) { return -1; }
    (*i)++;
    return v;
}

#define PAIR_BASE 1000  // operands below it: the default has at most 3 digits

typedef struct {
    long problems, malformed, wrong_sum, wrong_side;
} ShardStats;

// checks every problem "a+b=c\n" of a shard; held-out pairs are marked in (or checked against) seen
static ShardStats check_problems(const ArithSpec* s, const int* tokens, long n, int heldout, unsigned char* seen,
                                 long* overlaps) {
    ArithTokens t = arith_tokens();
    ShardStats st = {0, 0, 0, 0};
    long i = 0;
    while (i < n) {
        long a = parse_number(&t, tokens, n, &i, t.plus, s->max_digits);
        long b = a < 0 ? -1 : parse_number(&t, tokens, n, &i, t.equals, s->max_digits);
        long c = b < 0 ? -1 : parse_number(&t, tokens, n, &i, t.newline, s->max_digits + 1);
        if (c < 0) { st.malformed++; break; }
        st.problems++;
        st.wrong_sum += c != a + b;
        st.wrong_side += arith_is_heldout(s, a, b) != heldout;
        long key = a * PAIR_BASE + b;
        if (heldout) { seen[key] = 1; } else { *overlaps += seen[key]; }
    }
    return st;
}

static void test_shards(void) {
    ArithSpec s = arith_default_spec();
    const char* dir = tmpdir_path("one");
    char train[600], val[600];
    snprintf(train, sizeof(train), "%s/%s", dir, ARITH_TRAIN_NAME);
    snprintf(val, sizeof(val), "%s/%s", dir, ARITH_VAL_NAME);

    DataLoader d;
    dataloader_init(&d, train, 4, 64, ARITH_VOCAB_SIZE, 0, 1);
    dataloader_next_batch(&d);
    CHECK(d.num_shards == 1 && d.inputs[1] == d.targets[0], "the training shard loads");
    dataloader_free(&d);
    dataloader_init(&d, val, 4, 64, ARITH_VOCAB_SIZE, 0, 1);
    dataloader_next_batch(&d);
    CHECK(d.num_shards == 1, "the validation shard loads");
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
    CHECK(v.problems == s.val_problems && v.malformed == 0, "val: %ld problems (%ld malformed), expected %ld",
          v.problems, v.malformed, s.val_problems);
    CHECK(tr.problems == s.train_problems && tr.malformed == 0, "train: %ld problems (%ld malformed), expected %ld",
          tr.problems, tr.malformed, s.train_problems);
    CHECK(v.wrong_sum == 0 && tr.wrong_sum == 0, "every answer is the sum (%ld, %ld wrong)", v.wrong_sum, tr.wrong_sum);
    CHECK(v.wrong_side == 0 && tr.wrong_side == 0, "val problems held out, train problems not (%ld, %ld wrong)",
          v.wrong_side, tr.wrong_side);
    CHECK(overlaps == 0, "%ld training problems are also validation problems", overlaps);

    // the accuracy problems are held out too, the solved ones before them are not
    ArithEval e;
    CHECK(arith_eval_init(&e, &s, 500, 8, 64), "scorer set-up");
    int bad = 0;
    for (int i = 0; i < e.K; i++) { bad += !arith_is_heldout(&s, e.a[i], e.b[i]); }
    CHECK(bad == 0, "%d accuracy problems are not held out", bad);
    bad = 0;
    for (int i = 0; i < e.K * e.context; i++) { bad += arith_is_heldout(&s, e.context_a[i], e.context_b[i]); }
    CHECK(bad == 0, "%d of the solved problems before the prompts are held out", bad);
    arith_eval_free(&e);
    free(seen);
}

static void test_decode(void) {
    ArithSpec s = arith_default_spec();
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", tmpdir_path("one"), ARITH_TOKENIZER_NAME);
    Tokenizer tok;
    tokenizer_init(&tok, path);
    CHECK(tok.loaded && tok.vocab_size == ARITH_VOCAB_SIZE && tok.eot_token == ARITH_EOT, "tokenizer.bin loads");
    snprintf(path, sizeof(path), "%s/%s", tmpdir_path("one"), ARITH_VAL_NAME);
    long n;
    int* tokens = read_shard(path, &n);
    // the first 300 problems, written here with printf from the same draws
    static char expected[300 * 16], got[300 * 16];
    uint64_t rng = arith_seed(&s, 1);
    size_t len = 0;
    for (int i = 0; i < 300; i++) {
        long a, b;
        arith_draw(&s, &rng, 1, &a, &b);
        len += (size_t)snprintf(expected + len, sizeof(expected) - len, "%ld+%ld=%ld\n", a, b, a + b);
    }
    size_t total = tokenizer_decode(&tok, tokens, (int)len, got, sizeof(got));
    CHECK(total == len && strcmp(got, expected) == 0, "the tokens decode to the problems: one token per character");
    char all[80];
    int eot = ARITH_EOT;
    tokenizer_decode(&tok, &eot, 1, all, sizeof(all));
    CHECK(strcmp(all, "<|endoftext|>") == 0, "id 256 is <|endoftext|>");
    free(tokens);
    tokenizer_free(&tok);
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
        long i = 1, a, b;
        for (int k = 0; k < f->context; k++) {  // solved training problems come first
            a = parse_number(&f->t, row, lengths[r], &i, f->t.plus, 9);
            b = parse_number(&f->t, row, lengths[r], &i, f->t.equals, 9);
            long c = parse_number(&f->t, row, lengths[r], &i, f->t.newline, 10);
            if (a < 0 || b < 0 || c != a + b || arith_is_heldout(f->spec, a, b)) { f->contract_broken++; }
        }
        a = parse_number(&f->t, row, lengths[r], &i, f->t.plus, 9);
        b = parse_number(&f->t, row, lengths[r], &i, f->t.equals, 9);
        if (a < 0 || b < 0) { f->contract_broken++; next[r] = 0; continue; }
        long done = lengths[r] - i;  // answer tokens so far
        long c = a + b + (f->mode == OFF_BY_ONE || (f->mode == RIGHT_WHEN_A_EVEN && a % 2 == 1));
        char text[32];
        snprintf(text, sizeof(text), f->mode == EXTRA_DIGIT ? "%ld7\n" : "%ld\n", c);
        if (f->mode == NEVER_STOPS) {
            next[r] = f->t.digit[3];
        } else {
            next[r] = done < (long)strlen(text) ? gpt2_byte_token((unsigned char)text[done]) : f->t.newline;
        }
    }
}

static void test_scorer(void) {
    ArithSpec s = arith_default_spec();
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
        float acc = arith_eval_run(&e, fake_greedy, &f);
        CHECK(e.correct == expected[mode] && fabsf(acc - (float)expected[mode] / K) < 1e-6f,
              "a model that answers %s: %d of %d correct (accuracy %.4f), expected %d", names[mode], e.correct, K, acc,
              expected[mode]);
        CHECK(f.contract_broken == 0, "%s: the scorer kept the callback's contract", names[mode]);
        // a group takes one call per answer token plus the newline (at most max_digits + 2)
        int groups = (K + B - 1) / B;
        CHECK(f.calls >= groups * 2 && f.calls <= groups * (s.max_digits + 2), "%s: %d calls for %d groups",
              names[mode], f.calls, groups);
        if (mode == RIGHT) {
            char want[64];
            snprintf(want, sizeof(want), "%ld+%ld=%ld ok", e.a[0], e.b[0], e.a[0] + e.b[0]);
            CHECK(strcmp(e.shown[0], want) == 0, "shown: \"%s\", expected \"%s\"", e.shown[0], want);
        }
        if (mode == OFF_BY_ONE) {
            CHECK(strstr(e.shown[0], "wrong") != NULL, "shown: \"%s\" says wrong", e.shown[0]);
        }
    }
    arith_eval_free(&e);
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
    return harness_finish("test_arithmetic");
}
