/*
common/arithmetic.h: the default dataset, multi-digit addition, generated here in C, and its
exact-match accuracy. Shared by train_gpt2.c and train_gpt2.cu (C/C++ common subset).

The text. A stream of problems, one per line, operands of 1..max_digits digits (default 2), in one
of four formats (ARITH_PAD, ARITH_REVERSE below); the default pads and reverses the answer:

    12+05=710\n07+58=560\n...      padded-reversed (the default): 12+5=17, 7+58=65
    12+5=17\n7+58=65\n...          plain

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
    arithmetic_choices.bin ARITH_CHOICE_EXAMPLES held-out problems as multiple choice, the right
                           answer among three near misses (llm.c's eval file: common/eval.h)
    arithmetic.txt         the marker, written LAST: its first line holds the settings,
                           "arithmetic max_digits=2 train_problems=... val_problems=... seed=...
                           heldout_percent=10 format=padded-reversed" (a marker without format=
                           is plain); a folder without it is (re)generated.
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
generated are exactly the digits of a+b in the dataset's format and the newline.
The trainer's side is a few lines: one forward pass on (B, T), then an argmax per row.
*/
#ifndef COMMON_ARITHMETIC_H
#define COMMON_ARITHMETIC_H

#include "utils.h"  // first: rng.h needs its size_t
#include "rng.h"
#include "eval.h"

#define ARITH_DIR "data/arithmetic"
#define ARITH_TRAIN_NAME "arithmetic_train.bin"
#define ARITH_VAL_NAME "arithmetic_val.bin"
#define ARITH_TOKENIZER_NAME "tokenizer.bin"
#define ARITH_MARKER_NAME "arithmetic.txt"
#define ARITH_CHOICES_NAME "arithmetic_choices.bin"
#define ARITH_DEFAULT_TRAIN ARITH_DIR "/" ARITH_TRAIN_NAME
#define ARITH_DEFAULT_VAL ARITH_DIR "/" ARITH_VAL_NAME
#define ARITH_DEFAULT_CHOICES ARITH_DIR "/" ARITH_CHOICES_NAME

#define ARITH_VOCAB_SIZE 257   // the 256 byte tokens of GPT-2 and <|endoftext|>
#define ARITH_EOT 256
#define ARITH_MAX_DIGITS 9     // a+b then fits in 32 bits and a prompt in a few dozen tokens
#define ARITH_SHOWN 6          // problems whose answers arith_eval_run keeps as text
#define ARITH_CONTEXT 2        // solved training problems before each accuracy prompt, when T allows
#define ARITH_CHOICE_EXAMPLES 128  // multiple-choice examples in arithmetic_choices.bin
#define ARITH_CHOICES 4            // completions of each: the answer and three near misses

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
    int format;              // how a problem is written: ARITH_PAD and ARITH_REVERSE bits (below)
} ArithSpec;

// The formats. A problem a+b=c is written with its numbers in decimal, and
//     ARITH_PAD      every operand zero-padded to max_digits and the answer to max_digits + 1, so
//                    that every problem has the same length, arith_problem_tokens (10 tokens for
//                    2 digits), and each digit its fixed place in it. The shards then start with
//                    a newline: a training row of -t = k * 10 tokens starts with the newline
//                    before a problem, as the accuracy prompts do, so every digit of every
//                    problem sits at a position the model sees it at again and again
//     ARITH_REVERSE  the answer's digits least significant first, so that each answer digit
//                    follows the digits it depends on: the carry into it is known from the digits
//                    already written, where most significant first needs every carry at once
// Both, for 12+5: "12+05=710". Neither ("plain", the first format): "12+5=17".
#define ARITH_PAD 1
#define ARITH_REVERSE 2
static const char* const ARITH_FORMAT_NAMES[4] = {"plain", "padded", "reversed", "padded-reversed"};

// the tokens of one problem "a+b=c\n" in a padded format; the most it may have in the others
static inline int arith_problem_tokens(const ArithSpec* s) { return 3 * s->max_digits + 4; }

// the format of a name, or -1
static inline int arith_format_from_name(const char* name) {
    for (int f = 0; f < 4; f++) { if (strcmp(name, ARITH_FORMAT_NAMES[f]) == 0) { return f; } }
    return -1;
}

static inline ArithSpec arith_default_spec(void) {
    ArithSpec s;
    s.max_digits = 2;  // 1-2 digit operands: learnt within the few minutes of the default run
    s.train_problems = 200000;
    s.val_problems = 5000;
    s.seed = 20240520ULL;
    s.heldout_percent = 10;
    s.format = ARITH_PAD | ARITH_REVERSE;
    return s;
}

static inline void arith_check_spec(const ArithSpec* s, const char* where) {
    if (s->max_digits < 1 || s->max_digits > ARITH_MAX_DIGITS || s->train_problems < 1 || s->val_problems < 1 ||
        s->heldout_percent < 1 || s->heldout_percent > 99 || s->format < 0 || s->format > 3) {
        fatal("%s: bad arithmetic settings (max_digits %d in 1..%d, train_problems %ld and val_problems %ld >= 1, "
              "heldout_percent %d in 1..99, format %d in 0..3)", where, s->max_digits, ARITH_MAX_DIGITS,
              s->train_problems, s->val_problems, s->heldout_percent, s->format);
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

// writes the decimal digits of v as tokens, zero-padded to `width` (0: no padding), least
// significant first when `reverse`; returns how many
static inline int arith_put_number(const ArithTokens* t, long v, int width, int reverse, int* out) {
    char text[24];
    int n = snprintf(text, sizeof(text), "%0*ld", width, v);
    for (int i = 0; i < n; i++) { out[i] = t->digit[text[reverse ? n - 1 - i : i] - '0']; }
    return n;
}

// the answer a+b of a problem as tokens, in the spec's format, without the newline
static inline int arith_put_answer(const ArithSpec* s, const ArithTokens* t, long a, long b, int* out) {
    return arith_put_number(t, a + b, s->format & ARITH_PAD ? s->max_digits + 1 : 0, s->format & ARITH_REVERSE, out);
}

// the tokens of "a+b=" and, with answer, of "a+b=c\n", in the spec's format; returns how many
// (at most 3 * max_digits + 4)
static inline int arith_encode(const ArithSpec* s, const ArithTokens* t, long a, long b, int answer, int* out) {
    int width = s->format & ARITH_PAD ? s->max_digits : 0;
    int n = arith_put_number(t, a, width, 0, out);
    out[n++] = t->plus;
    n += arith_put_number(t, b, width, 0, out + n);
    out[n++] = t->equals;
    if (answer) {
        n += arith_put_answer(s, t, a, b, out + n);
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
    size_t cap = (size_t)n * (3 * ARITH_MAX_DIGITS + 5) + 1;
    uint16_t* tokens = (uint16_t*)malloc_check(cap * sizeof(uint16_t), "arithmetic tokens");
    uint64_t rng = seed ? seed : 1;
    size_t count = 0;
    if (s->format & ARITH_PAD) { tokens[count++] = (uint16_t)t.newline; }  // rows of -t = k * length start here
    int problem[3 * ARITH_MAX_DIGITS + 5];
    for (long i = 0; i < n; i++) {
        long a, b;
        arith_draw(s, &rng, heldout, &a, &b);
        int k = arith_encode(s, &t, a, b, 1, problem);
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

// The multiple-choice file (common/eval.h): ARITH_CHOICE_EXAMPLES held-out problems (from their own
// seed), each the context "\na+b=" and ARITH_CHOICES completions "c\n" in the dataset's format: the
// sum and three near misses, drawn from sum +-1, +-2, +-10, +-20, +-100 (those that are >= 0 and
// have at most max_digits + 1 digits, as sums do), the sum at a random place. The context is the
// start of a training row (the newline before a problem), so any -t of at least 3 * max_digits + 5
// reads it.
static inline void arith_write_choices(const char* path, const ArithSpec* s) {
    static const long offsets[10] = {1, -1, 2, -2, 10, -10, 20, -20, 100, -100};
    ArithTokens t = arith_tokens();
    uint64_t rng = arith_seed(s, 3);
    long widest = 1;  // 10^(max_digits + 1): every sum stays below it
    for (int i = 0; i <= s->max_digits; i++) { widest *= 10; }
    EvalWriter w;
    memset(&w, 0, sizeof(w));
    int context[3 * ARITH_MAX_DIGITS + 5], answers[ARITH_CHOICES][ARITH_MAX_DIGITS + 3], lengths[ARITH_CHOICES];
    const int* completions[ARITH_CHOICES];
    for (int k = 0; k < ARITH_CHOICES; k++) { completions[k] = answers[k]; }
    for (int i = 0; i < ARITH_CHOICE_EXAMPLES; i++) {
        long a, b;
        arith_draw(s, &rng, 1, &a, &b);
        context[0] = t.newline;
        int n_context = 1 + arith_encode(s, &t, a, b, 0, context + 1);
        // the order of the offsets: a shuffle (Fisher-Yates); the first three that give a valid sum
        long order[10];
        memcpy(order, offsets, sizeof(order));
        for (int j = 9; j > 0; j--) {
            int r = (int)(random_u32(&rng) % (uint32_t)(j + 1));
            long x = order[j];
            order[j] = order[r];
            order[r] = x;
        }
        int label = (int)(random_u32(&rng) % ARITH_CHOICES);
        for (int k = 0, next = 0; k < ARITH_CHOICES; k++) {
            long value = a + b;
            if (k != label) {
                do {  // at least three of the ten are valid: +1, +2 and +10 always are
                    value = a + b + order[next++];
                } while (value < 0 || value >= widest);
            }
            lengths[k] = arith_put_number(&t, value, s->format & ARITH_PAD ? s->max_digits + 1 : 0,
                                          s->format & ARITH_REVERSE, answers[k]);
            answers[k][lengths[k]++] = t.newline;
        }
        eval_writer_add(&w, context, n_context, ARITH_CHOICES, completions, lengths, label);
    }
    eval_writer_commit(&w, path);
}

// writes the five files (the marker last), replacing whatever was there
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
    arith_path(path, sizeof(path), dir, ARITH_CHOICES_NAME);
    arith_write_choices(path, s);
    char text[512];
    int n = snprintf(text, sizeof(text),
                     "arithmetic max_digits=%d train_problems=%ld val_problems=%ld seed=%llu heldout_percent=%d "
                     "format=%s\n"
                     "Synthetic additions a+b=c, one character per token (GPT-2's byte tokens), made by\n"
                     "common/arithmetic.h. The trainers report exact-match accuracy on held-out problems\n"
                     "when the training data folder holds this file.\n",
                     s->max_digits, s->train_problems, s->val_problems, s->seed, s->heldout_percent,
                     ARITH_FORMAT_NAMES[s->format]);
    arith_path(path, sizeof(path), dir, ARITH_MARKER_NAME);
    AtomicFile af;
    atomic_open(&af, path);
    atomic_write(&af, text, 1, (size_t)n);
    atomic_commit(&af);
}

// Is `dir` an arithmetic dataset? Reads the marker's settings into *s and returns 1; returns 0
// when there is no marker. A marker that does not parse is an error. A marker without a format
// (written before there were formats) means plain.
static inline int arith_read_marker(const char* dir, ArithSpec* s) {
    char path[1100];
    arith_path(path, sizeof(path), dir, ARITH_MARKER_NAME);
    if (!file_exists(path)) { return 0; }
    FILE* f = fopen_check(path, "r");
    char line[512], format[32] = "plain";
    int fields = fgets(line, sizeof(line), f) == NULL ? 0 :
             sscanf(line, "arithmetic max_digits=%d train_problems=%ld val_problems=%ld seed=%llu heldout_percent=%d "
                    "format=%31s", &s->max_digits, &s->train_problems, &s->val_problems, &s->seed,
                    &s->heldout_percent, format);
    fclose(f);
    s->format = arith_format_from_name(format);
    if (fields < 5 || s->format < 0) {
        fatal("%s: not an arithmetic marker (expected \"arithmetic max_digits=... heldout_percent=... format=...\")",
              path);
    }
    arith_check_spec(s, path);
    return 1;
}

// the line that describes a dataset's settings, e.g. "1-2 digit operands, format padded-reversed"
static inline const char* arith_describe(const ArithSpec* s, char* buf, size_t cap) {
    snprintf(buf, cap, "1-%d digit operands, format %s", s->max_digits, ARITH_FORMAT_NAMES[s->format]);
    return buf;
}

// Generates the default dataset in `dir` unless it is already there, with the default settings;
// returns 1 if it wrote. A dataset there with other settings (an earlier default, say) is
// rewritten, and the line says so: the folder belongs to the default run, other settings go
// in folders of their own (dev/data/arithmetic FOLDER). A dataset without its multiple-choice
// file (made before there was one) gets it.
static inline int arith_ensure_dataset(const char* dir) {
    ArithSpec s, d = arith_default_spec();
    char was[96], now[96];
    int have = arith_read_marker(dir, &s);
    if (have && s.max_digits == d.max_digits && s.train_problems == d.train_problems &&
        s.val_problems == d.val_problems && s.seed == d.seed && s.heldout_percent == d.heldout_percent &&
        s.format == d.format) {
        char path[1100];
        arith_path(path, sizeof(path), dir, ARITH_CHOICES_NAME);
        if (file_exists(path)) { return 0; }
        printf("writing the multiple-choice problems %s\n", path);
        arith_write_choices(path, &d);
        return 1;
    }
    printf("%s the arithmetic dataset in %s (%ld + %ld problems, %s, seed %llu)", have ? "rewriting" : "generating",
           dir, d.train_problems, d.val_problems, arith_describe(&d, now, sizeof(now)), d.seed);
    if (have) {
        printf(": it held %ld + %ld problems, %s, seed %llu", s.train_problems, s.val_problems,
               arith_describe(&s, was, sizeof(was)), s.seed);
    }
    printf("\n");
    arith_write_dataset(dir, &d);
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
    return 1 + context * arith_problem_tokens(s) + arith_problem_tokens(s) - 1;
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

// did row r generate exactly the digits of a+b (in the format) and the newline? Also fills shown[]
// for the first problems, written the usual way whatever the format ("5+8=13 ok": the answer's
// digits in reading order, padding zeros dropped).
static inline int arith_eval_check(ArithEval* e, int r, int problem) {
    int want[ARITH_MAX_DIGITS + 2];
    int n = arith_put_answer(&e->spec, &e->tok, e->a[problem], e->b[problem], want);
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
        for (int i = 0; (e->spec.format & ARITH_REVERSE) && i < k / 2; i++) {
            char c = answer[i];
            answer[i] = answer[k - 1 - i];
            answer[k - 1 - i] = c;
        }
        const char* shown = answer;
        while ((e->spec.format & ARITH_PAD) && shown[0] == '0' && shown[1] != '\0') { shown++; }
        snprintf(e->shown[problem], sizeof(e->shown[problem]), "%ld+%ld=%s %s", e->a[problem], e->b[problem], shown,
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
            for (int c = 0; c < e->context; c++) { n += arith_encode(&e->spec, t, ca[c], cb[c], 1, row + n); }
            e->used[r] = n + arith_encode(&e->spec, t, e->a[start + r], e->b[start + r], 0, row + n);
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

// the first problems of the last run with the model's answers, and the first problem as the data
// writes it: "5+8=13 ok | 9+36=45 ok | ... (in the data: 05+08=310, format padded-reversed)"
static inline void arith_eval_examples(const ArithEval* e, char* buf, size_t cap) {
    int tokens[3 * ARITH_MAX_DIGITS + 5];
    int n = arith_encode(&e->spec, &e->tok, e->a[0], e->b[0], 1, tokens) - 1;  // without the newline
    char written[3 * ARITH_MAX_DIGITS + 5];
    for (int i = 0; i < n; i++) {
        int d = arith_token_digit(&e->tok, tokens[i]);
        written[i] = d >= 0 ? (char)('0' + d) : tokens[i] == e->tok.plus ? '+' : '=';
    }
    written[n] = '\0';
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < ARITH_SHOWN && i < e->K && used < cap; i++) {
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? " | " : "", e->shown[i]);
    }
    if (used < cap) {
        snprintf(buf + used, cap - used, " (in the data: %s, format %s)", written, ARITH_FORMAT_NAMES[e->spec.format]);
    }
}

#endif // COMMON_ARITHMETIC_H
