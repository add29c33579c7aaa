/*
common/tokenizer.h: token ids back to text, for printing samples (decoding only; the data
preparation scripts in dev/data/ do the encoding, with tiktoken).

A GPT-2 token is a short string of BYTES, not of characters. The tokenizer file (written by
dev/data/data_common.py, write_tokenizer) simply lists those byte strings in id order:

    header   256 int32: magic 20240328, version 2, vocabulary size V, end-of-text id
    body     for id = 0 .. V-1: one uint8 length n, then the token's n bytes

Decoding is then "concatenate the bytes of the tokens" with one complication. Text is UTF-8, where
a character takes 1 to 4 bytes, and byte-pair encoding happily cuts a character in two: "€" is the
bytes E2 82 AC and may come out as a token ending in E2 82 followed by a token starting with AC.
A sampler that prints each token as it is generated would put half a character on the terminal.
The TokenPrinter below therefore
  * holds back the start of a multi-byte character until the next token completes it,
  * replaces bytes that cannot be part of valid UTF-8 (including a character that is cut short,
    or left unfinished when the stream ends) by U+FFFD, the replacement character (bytes EF BF BD),
    one U+FFFD per "maximal subpart", the Unicode rule that Python's
    bytes.decode("utf-8", errors="replace") follows as well,
  * prints the end-of-text token as <|endoftext|> and an id outside the vocabulary as <|id|>.
So whatever the model samples, the decoded text is valid UTF-8 (tokenizer_decode gives exactly
what Python's decode gives). For a terminal that is not enough: a byte-level model also samples NUL,
ESC and other control bytes, which the terminal would act on or swallow. A printer made with
token_printer_init_escaped writes every byte that is not printable text as \xNN instead: the
control bytes 00-1F (but newline and tab) and 7F, the C1 controls U+0080-U+009F (C2 80-C2 9F), and
each byte of invalid UTF-8 (in place of U+FFFD, so that one sees which bytes came out).

If the tokenizer file does not exist, tokenizer_init leaves the tokenizer "not loaded" (with a
notice saying why) and the printer writes the token ids as numbers. A file that exists but is
damaged is an error. All memory is allocated once, in tokenizer_init.

Functions are `static inline` only so that a program using a few of them gets no warnings about
the others being unused.
*/
#ifndef COMMON_TOKENIZER_H
#define COMMON_TOKENIZER_H

#include "utils.h"

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2
#define TOKENIZER_HEADER_INTS 256
#define TOKENIZER_MAX_VOCAB (1 << 22)  // anything bigger is taken for a damaged header

typedef struct {
    int loaded;              // 1: a tokenizer file was read; 0: there was none, print ids instead
    char why[1200];          // when not loaded: a one-line notice saying why
    int vocab_size;
    int eot_token;           // id of <|endoftext|>
    unsigned char* bytes;    // the bytes of all tokens, back to back
    uint32_t* offsets;       // token i is bytes[offsets[i] .. offsets[i+1]); vocab_size+1 entries
} Tokenizer;

static inline void tokenizer_init(Tokenizer* t, const char* path) {
    memset(t, 0, sizeof(*t));
    t->eot_token = -1;
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) {  // no such file: not an error, we print ids
            snprintf(t->why, sizeof(t->why),
                     "no tokenizer at %s (prepare data with dev/data/*.py); printing token ids", path);
            return;
        }
        // any other reason (no permission, ...) is reported by fopen_check below
    } else if (!S_ISREG(st.st_mode)) {
        fatal("%s: not a regular file", path);
    }

    FILE* f = fopen_check(path, "rb");
    long size = file_size_check(f, path);
    long header_bytes = TOKENIZER_HEADER_INTS * (long)sizeof(int32_t);
    if (size < header_bytes) {
        fatal("%s: truncated tokenizer file (%ld bytes; the header alone is %ld)", path, size, header_bytes);
    }
    int32_t header[TOKENIZER_HEADER_INTS];
    fread_check(header, sizeof(int32_t), TOKENIZER_HEADER_INTS, f, path);
    if (header[0] != TOKENIZER_MAGIC) {
        fatal("%s: not a tokenizer file (magic number %d, expected %d)", path, header[0], TOKENIZER_MAGIC);
    }
    if (header[1] != TOKENIZER_VERSION) {
        fatal("%s: tokenizer file version %d, expected %d (regenerate it with dev/data/*.py)",
              path, header[1], TOKENIZER_VERSION);
    }
    int vocab_size = header[2];
    int eot = header[3];
    if (vocab_size < 1 || vocab_size > TOKENIZER_MAX_VOCAB) {
        fatal("%s: absurd vocabulary size %d in the header (expected 1..%d)", path, vocab_size, TOKENIZER_MAX_VOCAB);
    }
    if (eot < 0 || eot >= vocab_size) {
        fatal("%s: end-of-text id %d is outside the vocabulary of %d tokens", path, eot, vocab_size);
    }
    // every token takes 1 length byte plus 0..255 bytes
    long body = size - header_bytes;
    if (body < vocab_size) {
        fatal("%s: truncated tokenizer file (%ld bytes after the header, %d tokens need at least %d)",
              path, body, vocab_size, vocab_size);
    }
    if (body > 256L * vocab_size) {
        fatal("%s: trailing data (%ld bytes after the header, %d tokens take at most %ld)",
              path, body, vocab_size, 256L * vocab_size);
    }

    // read the body in one go, then squeeze out the length bytes in place (writing never
    // overtakes reading, so the same buffer serves as source and destination)
    t->bytes = (unsigned char*)malloc_check((size_t)body, "tokenizer bytes");
    t->offsets = (uint32_t*)malloc_check(((size_t)vocab_size + 1) * sizeof(uint32_t), "tokenizer offsets");
    fread_check(t->bytes, 1, (size_t)body, f, path);
    fclose(f);
    long in = 0, out = 0;
    for (int i = 0; i < vocab_size; i++) {
        if (in >= body) { fatal("%s: truncated tokenizer file (it ends before token %d of %d)", path, i, vocab_size); }
        int n = t->bytes[in++];
        if (in + n > body) {
            fatal("%s: truncated tokenizer file (token %d has %d bytes, only %ld are left)", path, i, n, body - in);
        }
        t->offsets[i] = (uint32_t)out;
        memmove(t->bytes + out, t->bytes + in, (size_t)n);
        in += n;
        out += n;
    }
    t->offsets[vocab_size] = (uint32_t)out;
    if (in != body) { fatal("%s: %ld bytes of trailing data after the last token", path, body - in); }
    t->vocab_size = vocab_size;
    t->eot_token = eot;
    t->loaded = 1;
}

// the token that starts a sample: end-of-text (a document boundary), from the tokenizer file when
// there is one, else GPT-2's 50256 when the vocabulary has it, else 0
static inline int tokenizer_prompt_token(const Tokenizer* t, int vocab_size) {
    if (t->loaded && t->eot_token < vocab_size) { return t->eot_token; }
    return vocab_size > 50256 ? 50256 : 0;
}

static inline void tokenizer_free(Tokenizer* t) {
    free(t->bytes);
    free(t->offsets);
    t->bytes = NULL;
    t->offsets = NULL;
    t->loaded = 0;
}

// "note: no tokenizer at ...; printing token ids" when there is none, nothing otherwise
static inline void tokenizer_print_notice(const Tokenizer* t, FILE* out) {
    if (!t->loaded) { fprintf(out, "note: %s\n", t->why); }
}

// the raw bytes of one token (no UTF-8 repair); NULL for an id outside the vocabulary
static inline const unsigned char* tokenizer_token_bytes(const Tokenizer* t, int token, int* length) {
    if (!t->loaded || token < 0 || token >= t->vocab_size) { *length = 0; return NULL; }
    *length = (int)(t->offsets[token + 1] - t->offsets[token]);
    return t->bytes + t->offsets[token];
}

// ----------------------------------------------------------------------------
// UTF-8 in two functions. A character is one of
//   00..7F                      (ASCII)
//   C2..DF  80..BF
//   E0..EF  80..BF  80..BF      but after E0 the 2nd byte is A0..BF, after ED it is 80..9F
//   F0..F4  80..BF  80..BF  80..BF   after F0 the 2nd byte is 90..BF, after F4 it is 80..8F
// (the narrower ranges exclude overlong forms, UTF-16 surrogates and code points > U+10FFFF)

// number of bytes of the character that byte b starts; 0 if b cannot start one
static inline int utf8_sequence_length(unsigned char b) {
    if (b <= 0x7F) { return 1; }
    if (b >= 0xC2 && b <= 0xDF) { return 2; }
    if (b >= 0xE0 && b <= 0xEF) { return 3; }
    if (b >= 0xF0 && b <= 0xF4) { return 4; }
    return 0;  // 80..BF continue a character, C0 C1 F5..FF never appear in UTF-8
}

// can byte b come after the n bytes in `start` (the beginning of a character)?
static inline int utf8_continues(const unsigned char* start, int n, unsigned char b) {
    if (n == 1) {
        switch (start[0]) {
            case 0xE0: return b >= 0xA0 && b <= 0xBF;
            case 0xED: return b >= 0x80 && b <= 0x9F;
            case 0xF0: return b >= 0x90 && b <= 0xBF;
            case 0xF4: return b >= 0x80 && b <= 0x8F;
            default: break;
        }
    }
    return b >= 0x80 && b <= 0xBF;
}

// ----------------------------------------------------------------------------
// streaming decoder

typedef struct {
    const Tokenizer* tok;
    FILE* out;                  // where the text goes; NULL: into buf (see tokenizer_decode)
    char* buf;                  // buffer mode: output buffer of cap bytes, always NUL-terminated
    size_t cap;
    size_t len;                 // bytes produced so far (in buffer mode even those that did not fit)
    long num_tokens;            // tokens put so far
    unsigned char pending[4];   // the beginning of a character whose remaining bytes are due
    int num_pending;            // how many bytes pending holds (0: none)
    int char_length;            // how long that character is
    int escape;                 // write bytes that are not printable text as \xNN (token_printer_init_escaped)
} TokenPrinter;

static inline void token_printer_init(TokenPrinter* p, const Tokenizer* t, FILE* out) {
    memset(p, 0, sizeof(*p));
    p->tok = t;
    p->out = out;
}

// a printer for a terminal: bytes that are not printable text come out as \xNN
static inline void token_printer_init_escaped(TokenPrinter* p, const Tokenizer* t, FILE* out) {
    token_printer_init(p, t, out);
    p->escape = 1;
}

static inline void token_printer_emit(TokenPrinter* p, const void* data, size_t n) {
    if (p->out != NULL) {
        fwrite(data, 1, n, p->out);
    } else if (p->len + 1 < p->cap) {  // room left in buf (its last byte is kept for the NUL)
        size_t room = p->cap - 1 - p->len;
        size_t copy = n < room ? n : room;
        memcpy(p->buf + p->len, data, copy);
        p->buf[p->len + copy] = '\0';
    }
    p->len += n;
}

static inline void token_printer_replacement(TokenPrinter* p) {
    token_printer_emit(p, "\xEF\xBF\xBD", 3);  // U+FFFD
}

static inline void token_printer_escaped(TokenPrinter* p, const unsigned char* bytes, int n) {
    for (int i = 0; i < n; i++) {
        char text[8];
        snprintf(text, sizeof(text), "\\x%02x", bytes[i]);
        token_printer_emit(p, text, 4);
    }
}

// a character left unfinished: replace what we have of it (escaped: write its bytes as \xNN)
static inline void token_printer_drop_pending(TokenPrinter* p) {
    if (p->num_pending > 0) {
        if (p->escape) { token_printer_escaped(p, p->pending, p->num_pending); } else { token_printer_replacement(p); }
        p->num_pending = 0;
    }
}

// a control character: C0 (but newline and tab), DEL, or C1 (U+0080-U+009F, the bytes C2 80-9F)
static inline int utf8_is_control(const unsigned char* c, int n) {
    if (n == 1) { return (c[0] < 0x20 && c[0] != '\n' && c[0] != '\t') || c[0] == 0x7F; }
    return n == 2 && c[0] == 0xC2 && c[1] <= 0x9F;
}

static inline void token_printer_byte(TokenPrinter* p, unsigned char b) {
    if (p->num_pending > 0) {
        if (utf8_continues(p->pending, p->num_pending, b)) {
            p->pending[p->num_pending++] = b;
            if (p->num_pending == p->char_length) {  // complete: out it goes
                if (p->escape && utf8_is_control(p->pending, p->num_pending)) {
                    token_printer_escaped(p, p->pending, p->num_pending);
                } else {
                    token_printer_emit(p, p->pending, (size_t)p->num_pending);
                }
                p->num_pending = 0;
            }
            return;
        }
        token_printer_drop_pending(p);  // cut short; b itself may still start something valid
    }
    int n = utf8_sequence_length(b);
    if (n == 1 && p->escape && utf8_is_control(&b, 1)) {
        token_printer_escaped(p, &b, 1);
    } else if (n == 1) {
        token_printer_emit(p, &b, 1);
    } else if (n == 0 && p->escape) {
        token_printer_escaped(p, &b, 1);
    } else if (n == 0) {
        token_printer_replacement(p);
    } else {
        p->pending[0] = b;
        p->num_pending = 1;
        p->char_length = n;
    }
}

static inline void token_printer_put(TokenPrinter* p, int token) {
    const Tokenizer* t = p->tok;
    char text[32];
    if (!t->loaded) {  // no tokenizer: the ids, separated by spaces
        int n = snprintf(text, sizeof(text), p->num_tokens > 0 ? " %d" : "%d", token);
        token_printer_emit(p, text, (size_t)n);
    } else if (token == t->eot_token) {
        token_printer_drop_pending(p);
        token_printer_emit(p, "<|endoftext|>", 13);
    } else if (token < 0 || token >= t->vocab_size) {
        token_printer_drop_pending(p);
        int n = snprintf(text, sizeof(text), "<|%d|>", token);
        token_printer_emit(p, text, (size_t)n);
    } else {
        for (uint32_t i = t->offsets[token]; i < t->offsets[token + 1]; i++) {
            token_printer_byte(p, t->bytes[i]);
        }
    }
    p->num_tokens++;
}

// end of the stream: an unfinished character becomes U+FFFD; flushes the FILE. The printer can
// go on afterwards, as if a new stream started.
static inline void token_printer_flush(TokenPrinter* p) {
    token_printer_drop_pending(p);
    if (p->out != NULL) { fflush(p->out); }
}

// Decode n tokens into buf (cap bytes, NUL-terminated if cap > 0; the text is cut if it does not
// fit). Returns the length of the whole text, like snprintf: call with cap 0 to size a buffer.
static inline size_t tokenizer_decode(const Tokenizer* t, const int* tokens, int n, char* buf, size_t cap) {
    TokenPrinter p;
    token_printer_init(&p, t, NULL);
    p.buf = buf;
    p.cap = cap;
    if (cap > 0) { buf[0] = '\0'; }
    for (int i = 0; i < n; i++) { token_printer_put(&p, tokens[i]); }
    token_printer_flush(&p);
    return p.len;
}

#endif // COMMON_TOKENIZER_H
