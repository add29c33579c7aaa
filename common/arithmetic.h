/*
common/arithmetic.h: the default dataset, multi-digit addition, generated here in C, and its
exact-match accuracy. Shared by train_gpt2.c and train_gpt2.cu (C/C++ common subset).

The text. A stream of problems, one per line, operands of 1..max_digits digits (default 2):

    12+5=17\n7+58=65\n...

Tokens. One character per token, with GPT-2's own ids for single bytes (GPT-2's byte-level BPE
gives each of the 256 bytes a token: the 188 printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF in
that order get ids 0..187, the other 68 bytes (0x00..0x20, 0x7F..0xA0, 0xAD) in order get
188..255). So '0'..'9' are 15..24, '+' is 10, '=' is 28 and '\n' is 198, exactly as in
gpt2.tiktoken. The vocabulary is these 256 tokens plus <|endoftext|> at id 256 (V = 257, padded
to 384): the end-of-text token never occurs in the data, it only exists so that the tokenizer file
has one (the sampler starts from it; a newline as end-of-text would print as <|endoftext|>).

The split. Whether a problem a+b is held out depends on the pair (a, b) alone: a hash of it,
below heldout_percent out of 100, puts it in the validation set. Training problems are drawn
from the other pairs only, so no validation (or accuracy) problem is ever seen in training.

The files, in data/arithmetic/ (atomically, each written to a temporary name and renamed):
    arithmetic_train.bin   train_problems problems   (llm.c token shard: common/dataloader.h)
    arithmetic_val.bin     val_problems held-out problems
    tokenizer.bin          the 257 tokens (llm.c layout: common/tokenizer.h)
    arithmetic.txt         the marker, written LAST: its first line holds the settings,
                           "arithmetic max_digits=2 train_problems=... val_problems=... seed=...
                           heldout_percent=10"; a folder without it is (re)generated.
Everything comes from a fixed seed (xorshift, common/rng.h), so a regenerated dataset is the
same to the byte.

Accuracy. ArithEval holds K held-out problems (drawn like the validation set, from their own
seed). arith_eval_run asks a trainer-supplied callback for greedy next tokens, B prompts at a time:

    typedef void (*ArithGreedyFn)(void* ctx, const int* tokens, int B, int T, const int* lengths,
                                  int* next);

tokens is (B, T) row-major, B at most the B given to arith_eval_init, T at most
arith_eval_row_tokens (and at most the T given). Row b holds lengths[b] real tokens (the rest
is padding: the model is causal, so what follows position lengths[b]-1 does not matter) and
next[b] must become the argmax over the vocabulary of the logits at position lengths[b]-1.
A prompt is "\n", two solved training problems (different for each prompt) and "a+b=", at
positions 0.. (in a training window too, most problems come after others; rows too short for
that get "\na+b=" alone). The callback is called once per generated token (at most
max_digits+2 times per group of B prompts), each time with the rows still decoding and their
answers so far appended; a row stops at a newline. A problem is correct when the tokens
generated are exactly the digits of a+b and the newline.
The trainer's side is a few lines: one forward pass on (B, T), then an argmax per row.
*/
#ifndef COMMON_ARITHMETIC_H
#define COMMON_ARITHMETIC_H

#include "utils.h"  // first: rng.h needs its size_t
#include "rng.h"

#define ARITH_DIR "data/arithmetic"
#define ARITH_TRAIN_NAME "arithmetic_train.bin"
#define ARITH_VAL_NAME "arithmetic_val.bin"
#define ARITH_TOKENIZER_NAME "tokenizer.bin"
#define ARITH_MARKER_NAME "arithmetic.txt"
#define ARITH_DEFAULT_TRAIN ARITH_DIR "/" ARITH_TRAIN_NAME
#define ARITH_DEFAULT_VAL ARITH_DIR "/" ARITH_VAL_NAME

#define ARITH_VOCAB_SIZE 257   // the 256 byte tokens of GPT-2 and <|endoftext|>
#define ARITH_EOT 256
#define ARITH_MAX_DIGITS 9     // a+b then fits in 32 bits and a prompt in a few dozen tokens
#define ARITH_SHOWN 4          // problems whose answers arith_eval_run keeps as text
#define ARITH_CONTEXT 2        // solved training problems before each accuracy prompt, when T allows

// ----------------------------------------------------------------------------
// GPT-2's single-byte tokens

static inline int gpt2_byte_is_printable(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// the token id of a byte: printable bytes first, then the others, each group in byte order
static inline int gpt2_byte_token(unsigned char byte) {
    int printable_before = 0, other_before = 0;
    for (int b = 0; b < byte; b++) {
        if (gpt2_byte_is_printable(b)) { printable_before++; } else { other_before++; }
    }
    return gpt2_byte_is_printable(byte) ? printable_before : 188 + other_before;
}

// the byte of a token id 0..255 (the inverse of gpt2_byte_token); -1 for any other id
static inline int gpt2_token_byte(int token) {
    for (int b = 0; b < 256; b++) {
        if (gpt2_byte_token((unsigned char)b) == token) { return b; }
    }
    return -1;
}

// the token ids the problems use
typedef struct {
    int digit[10], plus, equals, newline;
} ArithTokens;

static inline ArithTokens arith_tokens(void) {
    ArithTokens t;
    for (int d = 0; d < 10; d++) { t.digit[d] = gpt2_byte_token((unsigned char)('0' + d)); }
    t.plus = gpt2_byte_token('+');
    t.equals = gpt2_byte_token('=');
    t.newline = gpt2_byte_token('\n');
    return t;
}

// the digit a token stands for, or -1
static inline int arith_token_digit(const ArithTokens* t, int token) {
    int d = token - t->digit[0];
    return d >= 0 && d <= 9 ? d : -1;
}

// ----------------------------------------------------------------------------
// problems

typedef struct {
    int max_digits;          // operands have 1..max_digits digits
    long train_problems;     // problems in arithmetic_train.bin
    long val_problems;       // problems in arithmetic_val.bin
    unsigned long long seed; // everything random derives from it
    int heldout_percent;     // share of the (a, b) pairs held out for validation
} ArithSpec;

static inline ArithSpec arith_default_spec(void) {
    ArithSpec s;
    s.max_digits = 2;  // 1-2 digit operands: learnt within the few minutes of the default run
    s.train_problems = 200000;
    s.val_problems = 5000;
    s.seed = 20240520ULL;
    s.heldout_percent = 10;
    return s;
}

static inline void arith_check_spec(const ArithSpec* s, const char* where) {
    if (s->max_digits < 1 || s->max_digits > ARITH_MAX_DIGITS || s->train_problems < 1 || s->val_problems < 1 ||
        s->heldout_percent < 1 || s->heldout_percent > 99) {
        fatal("%s: bad arithmetic settings (max_digits %d in 1..%d, train_problems %ld and val_problems %ld >= 1, "
              "heldout_percent %d in 1..99)", where, s->max_digits, ARITH_MAX_DIGITS, s->train_problems,
              s->val_problems, s->heldout_percent);
    }
}


// is the problem a+b held out for validation? (depends on the pair only, not on the seed)
static inline int arith_is_heldout(const ArithSpec* s, long a, long b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint64_t)(uint32_t)b;
    return (int)(random_mix64(key) % 100) < s->heldout_percent;
}

// an operand: first its number of digits (uniform in 1..max_digits), then its value
static inline long arith_operand(const ArithSpec* s, uint64_t* rng) {
    int digits = 1 + (int)(random_u32(rng) % (uint32_t)s->max_digits);
    long lo = 0, hi = 10;
    for (int i = 1; i < digits; i++) { lo = lo == 0 ? 10 : lo * 10; hi *= 10; }
    uint64_t r = ((uint64_t)random_u32(rng) << 32) | random_u32(rng);
    return lo + (long)(r % (uint64_t)(hi - lo));
}

// draws a problem from the training pairs (heldout 0) or from the held-out ones (heldout 1)
static inline void arith_draw(const ArithSpec* s, uint64_t* rng, int heldout, long* a, long* b) {
    do {
        *a = arith_operand(s, rng);
        *b = arith_operand(s, rng);
    } while (arith_is_heldout(s, *a, *b) != heldout);
}

// writes the decimal digits of v as tokens; returns how many
static inline int arith_put_number(const ArithTokens* t, long v, int* out) {
    char text[24];
    int n = snprintf(text, sizeof(text), "%ld", v);
    for (int i = 0; i < n; i++) { out[i] = t->digit[text[i] - '0']; }
    return n;
}

// the tokens of "a+b=" and, with answer, of "a+b=c\n"; returns how many (at most 3*9+5)
static inline int arith_encode(const ArithTokens* t, long a, long b, int answer, int* out) {
    int n = arith_put_number(t, a, out);
    out[n++] = t->plus;
    n += arith_put_number(t, b, out + n);
    out[n++] = t->equals;
    if (answer) {
        n += arith_put_number(t, a + b, out + n);
        out[n++] = t->newline;
    }
    return n;
}

// ----------------------------------------------------------------------------
// the dataset files

// "<dir>/<name>" into buf
static inline void arith_path(char* buf, size_t cap, const char* dir, const char* name) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap) { fatal("path too long: %s/%s", dir, name); }
}

// mkdir -p
static inline void arith_make_dirs(const char* dir) {
    char path[1024];
    if (strlen(dir) >= sizeof(path)) { fatal("path too long: %s", dir); }
    strcpy(path, dir);
    for (char* p = path + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char keep = *p;
            *p = '\0';
            struct stat st;
            if (stat(path, &st) != 0) {
                if (mkdir(path, 0755) != 0 && errno != EEXIST) { fatal("cannot create folder %s: %s", path, strerror(errno)); }
            } else if (!S_ISDIR(st.st_mode)) {
                fatal("%s exists and is not a folder", path);
            }
            *p = keep;
            if (keep == '\0') { break; }
        }
    }
}

// one shard of n problems drawn from the training (heldout 0) or held-out (heldout 1) pairs
static inline void arith_write_shard(const char* path, const ArithSpec* s, long n, int heldout, uint64_t seed) {
    ArithTokens t = arith_tokens();
    size_t cap = (size_t)n * (3 * ARITH_MAX_DIGITS + 5);
    uint16_t* tokens = (uint16_t*)malloc_check(cap * sizeof(uint16_t), "arithmetic tokens");
    uint64_t rng = seed ? seed : 1;
    size_t count = 0;
    int problem[3 * ARITH_MAX_DIGITS + 5];
    for (long i = 0; i < n; i++) {
        long a, b;
        arith_draw(s, &rng, heldout, &a, &b);
        int k = arith_encode(&t, a, b, 1, problem);
        for (int j = 0; j < k; j++) { tokens[count++] = (uint16_t)problem[j]; }
    }
    if (count > INT32_MAX) { fatal("%s: %zu tokens do not fit in one shard", path, count); }
    int32_t header[256];
    memset(header, 0, sizeof(header));
    header[0] = 20240520;  // SHARD_MAGIC, common/dataloader.h
    header[1] = 1;         // SHARD_VERSION
    header[2] = (int32_t)count;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(int32_t), 256);
    atomic_write(&af, tokens, sizeof(uint16_t), count);
    atomic_commit(&af);
    free(tokens);
}

// the tokenizer file: GPT-2's 256 byte tokens, then <|endoftext|>
static inline void arith_write_tokenizer(const char* path) {
    int32_t header[256];
    memset(header, 0, sizeof(header));
    header[0] = 20240328;  // TOKENIZER_MAGIC, common/tokenizer.h
    header[1] = 2;         // TOKENIZER_VERSION
    header[2] = ARITH_VOCAB_SIZE;
    header[3] = ARITH_EOT;
    unsigned char body[2 * 256 + 14];
    size_t n = 0;
    for (int id = 0; id < 256; id++) {
        body[n++] = 1;
        body[n++] = (unsigned char)gpt2_token_byte(id);
    }
    body[n++] = 13;
    memcpy(body + n, "<|endoftext|>", 13);
    n += 13;
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, header, sizeof(int32_t), 256);
    atomic_write(&af, body, 1, n);
    atomic_commit(&af);
}

// the seeds of the three draws, all from the one seed of the spec
static inline uint64_t arith_seed(const ArithSpec* s, int which) {  // 0 train, 1 val, 2 accuracy
    return random_mix64(s->seed + 0x1000ULL * (uint64_t)(which + 1));
}

// writes the four files (the marker last), replacing whatever was there
static inline void arith_write_dataset(const char* dir, const ArithSpec* s) {
    arith_check_spec(s, dir);
    arith_make_dirs(dir);
    char path[1100];
    arith_path(path, sizeof(path), dir, ARITH_TRAIN_NAME);
    arith_write_shard(path, s, s->train_problems, 0, arith_seed(s, 0));
    arith_path(path, sizeof(path), dir, ARITH_VAL_NAME);
    arith_write_shard(path, s, s->val_problems, 1, arith_seed(s, 1));
    arith_path(path, sizeof(path), dir, ARITH_TOKENIZER_NAME);
    arith_write_tokenizer(path);
    char text[512];
    int n = snprintf(text, sizeof(text),
                     "arithmetic max_digits=%d train_problems=%ld val_problems=%ld seed=%llu heldout_percent=%d\n"
                     "Synthetic additions a+b=c, one character per token (GPT-2's byte tokens), made by\n"
                     "common/arithmetic.h. The trainers report exact-match accuracy on held-out problems\n"
                     "when the training data folder holds this file.\n",
                     s->max_digits, s->train_problems, s->val_problems, s->seed, s->heldout_percent);
    arith_path(path, sizeof(path), dir, ARITH_MARKER_NAME);
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, text, 1, (size_t)n);
    atomic_commit(&af);
}

// Is `dir` an arithmetic dataset? Reads the marker's settings into *s and returns 1; returns 0
// when there is no marker. A marker that does not parse is an error.
static inline int arith_read_marker(const char* dir, ArithSpec* s) {
    char path[1100];
    arith_path(path, sizeof(path), dir, ARITH_MARKER_NAME);
    if (!file_exists(path)) { return 0; }
    FILE* f = fopen_check(path, "r");
    char line[512];
    int ok = fgets(line, sizeof(line), f) != NULL &&
             sscanf(line, "arithmetic max_digits=%d train_problems=%ld val_problems=%ld seed=%llu heldout_percent=%d",
                    &s->max_digits, &s->train_problems, &s->val_problems, &s->seed, &s->heldout_percent) == 5;
    fclose(f);
    if (!ok) { fatal("%s: not an arithmetic marker (expected \"arithmetic max_digits=... heldout_percent=...\")", path); }
    arith_check_spec(s, path);
    return 1;
}

// generates the default dataset in `dir` unless its marker is already there; returns 1 if it wrote
static inline int arith_ensure_dataset(const char* dir) {
    ArithSpec s;
    if (arith_read_marker(dir, &s)) { return 0; }
    s = arith_default_spec();
    printf("generating the arithmetic dataset in %s (%ld + %ld problems, 1-%d digit operands, seed %llu)\n", dir,
           s.train_problems, s.val_problems, s.max_digits, s.seed);
    arith_write_dataset(dir, &s);
    return 1;
}

// ----------------------------------------------------------------------------
// exact-match accuracy by greedy decoding

typedef void (*ArithGreedyFn)(void* ctx, const int* tokens, int B, int T, const int* lengths, int* next);

typedef struct {
    ArithSpec spec;
    ArithTokens tok;
    int K, B, T;          // problems, prompts per call, the longest row a call may get
    int context;          // solved training problems before each prompt (ARITH_CONTEXT or 0)
    long* a;              // (K) the held-out problems a+b
    long* b;
    long* context_a;      // (K, context) the training problems before problem k
    long* context_b;
    int* rows;            // (B, T+1) prompt and answer so far of each row
    int* used;            // (B) tokens in each row
    int* generated;       // (B) of which generated
    int* packed;          // (B, T) the rows still decoding, packed to the current length
    int* lengths;         // (B) the lengths handed to the callback
    int* next;            // (B) its answers
    int correct;          // of the last run
    char shown[ARITH_SHOWN][64];  // the first problems with the model's answers, "12+5=17 ok"
} ArithEval;

// the longest row the callback gets with `context` solved problems first: "\n", the context
// problems, a "+" b "=" and all answer digits (the newline after them is never fed back)
static inline int arith_eval_row_tokens(const ArithSpec* s, int context) {
    return 1 + context * (3 * s->max_digits + 4) + 3 * s->max_digits + 3;
}

// K held-out problems, at most B prompts per call of at most T tokens. Each prompt comes after
// ARITH_CONTEXT solved training problems, as problems do in a training window, or after none when
// T is too short for that. Returns 0 (and allocates nothing) when T is too short even then.
static inline int arith_eval_init(ArithEval* e, const ArithSpec* s, int K, int B, int T) {
    memset(e, 0, sizeof(*e));
    if (K < 1 || B < 1 || T < arith_eval_row_tokens(s, 0)) { return 0; }
    e->spec = *s;
    e->tok = arith_tokens();
    e->K = K;
    e->B = B;
    e->T = T;
    e->context = T >= arith_eval_row_tokens(s, ARITH_CONTEXT) ? ARITH_CONTEXT : 0;
    e->a = (long*)malloc_check((size_t)K * sizeof(long), "accuracy problems");
    e->b = (long*)malloc_check((size_t)K * sizeof(long), "accuracy problems");
    e->context_a = (long*)malloc_check((size_t)K * e->context * sizeof(long), "accuracy context");
    e->context_b = (long*)malloc_check((size_t)K * e->context * sizeof(long), "accuracy context");
    uint64_t rng = arith_seed(s, 2);
    for (int i = 0; i < K; i++) {
        for (int c = 0; c < e->context; c++) {
            arith_draw(s, &rng, 0, &e->context_a[i * e->context + c], &e->context_b[i * e->context + c]);
        }
        arith_draw(s, &rng, 1, &e->a[i], &e->b[i]);
    }
    e->rows = (int*)malloc_check((size_t)B * (T + 1) * sizeof(int), "accuracy rows");
    e->used = (int*)malloc_check((size_t)B * sizeof(int), "accuracy rows");
    e->generated = (int*)malloc_check((size_t)B * sizeof(int), "accuracy rows");
    e->packed = (int*)malloc_check((size_t)B * T * sizeof(int), "accuracy rows");
    e->lengths = (int*)malloc_check((size_t)B * sizeof(int), "accuracy rows");
    e->next = (int*)malloc_check((size_t)B * sizeof(int), "accuracy rows");
    return 1;
}

static inline void arith_eval_free(ArithEval* e) {
    free(e->a);
    free(e->b);
    free(e->context_a);
    free(e->context_b);
    free(e->rows);
    free(e->used);
    free(e->generated);
    free(e->packed);
    free(e->lengths);
    free(e->next);
    memset(e, 0, sizeof(*e));
}

// is row r still decoding? (it stops after a newline or after the longest possible answer)
static inline int arith_eval_busy(const ArithEval* e, int r) {
    const int* row = e->rows + (size_t)r * (e->T + 1);
    int g = e->generated[r];
    return g < e->spec.max_digits + 2 && (g == 0 || row[e->used[r] - 1] != e->tok.newline);
}

// did row r generate exactly the digits of a+b and the newline? (also fills shown[] for the first)
static inline int arith_eval_check(ArithEval* e, int r, int problem) {
    int want[ARITH_MAX_DIGITS + 2];
    int n = arith_put_number(&e->tok, e->a[problem] + e->b[problem], want);
    want[n++] = e->tok.newline;
    const int* got = e->rows + (size_t)r * (e->T + 1) + (e->used[r] - e->generated[r]);
    int ok = e->generated[r] == n;
    for (int i = 0; ok && i < n; i++) { ok = got[i] == want[i]; }
    if (problem < ARITH_SHOWN) {
        char answer[ARITH_MAX_DIGITS + 3];
        int k = 0;
        for (int i = 0; i < e->generated[r] && got[i] != e->tok.newline; i++) {
            int d = arith_token_digit(&e->tok, got[i]);
            answer[k++] = d >= 0 ? (char)('0' + d) : '?';
        }
        answer[k] = '\0';
        snprintf(e->shown[problem], sizeof(e->shown[problem]), "%ld+%ld=%s %s", e->a[problem], e->b[problem], answer,
                 ok ? "ok" : "wrong");
    }
    return ok;
}

// greedy-decodes the answers of all K problems; returns the share answered exactly right
static inline float arith_eval_run(ArithEval* e, ArithGreedyFn greedy_next, void* ctx) {
    const ArithTokens* t = &e->tok;
    e->correct = 0;
    for (int start = 0; start < e->K; start += e->B) {
        int B = e->K - start < e->B ? e->K - start : e->B;
        for (int r = 0; r < B; r++) {
            int* row = e->rows + (size_t)r * (e->T + 1);
            const long* ca = e->context_a + (size_t)(start + r) * e->context;
            const long* cb = e->context_b + (size_t)(start + r) * e->context;
            int n = 0;
            row[n++] = t->newline;
            for (int c = 0; c < e->context; c++) { n += arith_encode(t, ca[c], cb[c], 1, row + n); }
            e->used[r] = n + arith_encode(t, e->a[start + r], e->b[start + r], 0, row + n);
            e->generated[r] = 0;
        }
        for (;;) {
            // the rows still decoding go to the callback, packed to the longest of them
            int n = 0, T = 0;
            for (int r = 0; r < B; r++) {
                if (!arith_eval_busy(e, r)) { continue; }
                if (e->used[r] > T) { T = e->used[r]; }
                n++;
            }
            if (n == 0) { break; }
            for (int r = 0, i = 0; r < B; r++) {
                if (!arith_eval_busy(e, r)) { continue; }
                const int* row = e->rows + (size_t)r * (e->T + 1);
                int* out = e->packed + (size_t)i * T;
                for (int j = 0; j < T; j++) { out[j] = j < e->used[r] ? row[j] : t->newline; }
                e->lengths[i++] = e->used[r];
            }
            greedy_next(ctx, e->packed, n, T, e->lengths, e->next);
            for (int r = 0, i = 0; r < B; r++) {
                if (!arith_eval_busy(e, r)) { continue; }
                e->rows[(size_t)r * (e->T + 1) + e->used[r]++] = e->next[i++];
                e->generated[r]++;
            }
        }
        for (int r = 0; r < B; r++) { e->correct += arith_eval_check(e, r, start + r); }
    }
    return (float)e->correct / (float)e->K;
}

#endif // COMMON_ARITHMETIC_H
