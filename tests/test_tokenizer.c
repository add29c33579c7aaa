/*
tests/test_tokenizer.c: common/tokenizer.h on a made-up vocabulary (no GPT-2 files, no Python).

The vocabulary: ids 0..255 are the single bytes, then a few multi-byte tokens chosen to cut
UTF-8 characters in two, an invalid byte, an empty token, and <|endoftext|>. We decode token
streams and compare the exact output bytes, and check that damaged tokenizer files are errors.
*/
#include "harness.h"

#include "common/tokenizer.h"

static const char* EXTRA_TOKENS[] = {
    "hello",          // 256
    " wor",           // 257
    "\xE2\x82",       // 258: the first two bytes of the euro sign (U+20AC = E2 82 AC)
    "\xAC!",          // 259: its last byte, then '!'
    "\xF0\x9F",       // 260: the first half of U+1F600 (grinning face = F0 9F 98 80)
    "\x98\x80",       // 261: the second half
    "\xFF",           // 262: a byte that never occurs in UTF-8
    "",               // 263: an empty token
    "<|endoftext|>",  // 264: end of text
};
#define NUM_EXTRA ((int)(sizeof(EXTRA_TOKENS) / sizeof(EXTRA_TOKENS[0])))
#define VOCAB (256 + NUM_EXTRA)
#define EOT (VOCAB - 1)
#define FFFD "\xEF\xBF\xBD"

// ----------------------------------------------------------------------------
// writing tokenizer files, good and bad

typedef struct {
    int32_t magic, version, vocab_size, eot;
    long cut;        // drop this many bytes from the end
    long trailing;   // add this many junk bytes at the end
} FileSpec;

static FileSpec good_spec(void) {
    FileSpec s = {TOKENIZER_MAGIC, TOKENIZER_VERSION, VOCAB, EOT, 0, 0};
    return s;
}

static void write_tokenizer_file(const char* path, FileSpec s) {
    static unsigned char data[100000];  // room for the header, the tokens and the junk tests add
    memset(data, 0, sizeof(data));
    int32_t header[256] = {0};
    header[0] = s.magic;
    header[1] = s.version;
    header[2] = s.vocab_size;
    header[3] = s.eot;
    memcpy(data, header, sizeof(header));
    long n = 1024;
    for (int i = 0; i < VOCAB; i++) {
        if (i < 256) {
            data[n++] = 1;
            data[n++] = (unsigned char)i;
        } else {
            size_t length = strlen(EXTRA_TOKENS[i - 256]);
            data[n++] = (unsigned char)length;
            memcpy(data + n, EXTRA_TOKENS[i - 256], length);
            n += (long)length;
        }
    }
    for (long k = 0; k < s.trailing; k++) { data[n++] = 'x'; }
    write_bytes(path, data, (size_t)(n - s.cut));
}

// ----------------------------------------------------------------------------
// decoding

static Tokenizer tok;

// decode both ways (into a buffer, and streamed to a FILE) and compare with the expected bytes
static void check_decode(const char* what, const int* ids, int n, const char* expected, size_t expected_len) {
    char buf[512];
    size_t len = tokenizer_decode(&tok, ids, n, buf, sizeof(buf));
    CHECK(len == expected_len && memcmp(buf, expected, len) == 0 && buf[len] == '\0',
          "%s: tokenizer_decode gave %zu bytes \"%s\", expected %zu bytes \"%s\"", what, len, buf, expected_len, expected);

    FILE* f = tmpfile();
    TokenPrinter p;
    token_printer_init(&p, &tok, f);
    for (int i = 0; i < n; i++) { token_printer_put(&p, ids[i]); }
    token_printer_flush(&p);
    long size = ftell(f);
    rewind(f);
    size_t got = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    CHECK(size == (long)expected_len && got == expected_len && memcmp(buf, expected, got) == 0,
          "%s: the TokenPrinter wrote %zu bytes, expected %zu", what, got, expected_len);
}

// the escaping printer (token_printer_init_escaped), streamed to a FILE
static void check_escaped(const char* what, const int* ids, int n, const char* expected, size_t expected_len) {
    char buf[512];
    FILE* f = tmpfile();
    TokenPrinter p;
    token_printer_init_escaped(&p, &tok, f);
    for (int i = 0; i < n; i++) { token_printer_put(&p, ids[i]); }
    token_printer_flush(&p);
    rewind(f);
    size_t got = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[got] = '\0';
    CHECK(got == expected_len && memcmp(buf, expected, got) == 0, "%s: the escaping printer wrote \"%s\", expected \"%s\"",
          what, buf, expected);
}

#define ESCAPED(what, expected, ...)                                                  \
    do {                                                                              \
        int ids_[] = {__VA_ARGS__};                                                   \
        check_escaped(what, ids_, (int)(sizeof(ids_) / sizeof(int)), expected, sizeof(expected) - 1); \
    } while (0)

#define DECODE(what, expected, ...)                                                  \
    do {                                                                             \
        int ids_[] = {__VA_ARGS__};                                                  \
        check_decode(what, ids_, (int)(sizeof(ids_) / sizeof(int)), expected, sizeof(expected) - 1); \
    } while (0)

static void test_decoding(void) {
    DECODE("plain tokens", "hello world", 256, 257, 'l', 'd');
    DECODE("3-byte char split 2+1", "\xE2\x82\xAC!", 258, 259);
    DECODE("4-byte char split 2+2", "\xF0\x9F\x98\x80", 260, 261);
    DECODE("4-byte char split 1+1+1+1", "\xF0\x9F\x98\x80", 0xF0, 0x9F, 0x98, 0x80);
    DECODE("empty token inside a char", "\xE2\x82\xAC!", 258, 263, 259);
    DECODE("ASCII then a split char", "a\xE2\x82\xAC", 'a', 0xE2, 0x82, 0xAC);
    DECODE("char cut short by ASCII", FFFD "a", 258, 'a');
    DECODE("char left dangling at the end", "ok" FFFD, 'o', 'k', 258);
    DECODE("char cut short by a new char", FFFD FFFD, 260, 260);
    DECODE("invalid byte FF", "a" FFFD "b", 'a', 262, 'b');
    DECODE("lone continuation byte", FFFD, 0x80);
    DECODE("overlong C0 80", FFFD FFFD, 0xC0, 0x80);
    DECODE("overlong E0 80 80", FFFD FFFD FFFD, 0xE0, 0x80, 0x80);
    DECODE("surrogate ED A0 80", FFFD FFFD FFFD, 0xED, 0xA0, 0x80);
    DECODE("beyond U+10FFFF: F4 90", FFFD FFFD, 0xF4, 0x90);
    DECODE("largest code point F4 8F BF BF", "\xF4\x8F\xBF\xBF", 0xF4, 0x8F, 0xBF, 0xBF);
    DECODE("end of text", "a<|endoftext|>b", 'a', EOT, 'b');
    DECODE("end of text cuts a char", FFFD "<|endoftext|>", 260, EOT);
    DECODE("id outside the vocabulary", "x<|5000|>y", 'x', 5000, 'y');
    DECODE("negative id", "<|-3|>", -3);
    DECODE("outside id cuts a char", FFFD "<|265|>", 258, VOCAB);

    // a printer for the terminal writes bytes that are not printable text as \xNN
    ESCAPED("plain text and valid characters unchanged", "hello world\xE2\x82\xAC!\n\t", 256, 257, 'l', 'd', 258, 259, '\n', '\t');
    ESCAPED("NUL", "a\\x00b", 'a', 0, 'b');
    ESCAPED("ESC, CR, BEL, DEL", "\\x1b[2J\\x0d\\x07\\x7f", 0x1B, '[', '2', 'J', '\r', 7, 0x7F);
    ESCAPED("C1 control U+009B (C2 9B)", "\\xc2\\x9b, U+00A0 \xC2\xA0", 0xC2, 0x9B, ',', ' ', 'U', '+', '0', '0', 'A', '0', ' ', 0xC2, 0xA0);
    ESCAPED("invalid byte FF", "a\\xffb", 'a', 262, 'b');
    ESCAPED("lone continuation byte", "\\x80", 0x80);
    ESCAPED("char cut short by ASCII", "\\xe2\\x82a", 258, 'a');
    ESCAPED("char left dangling at the end", "ok\\xf0\\x9f", 'o', 'k', 260);
    ESCAPED("end of text cuts a char", "\\xe2\\x82<|endoftext|>", 258, EOT);

    // the printer holds back the start of a character until the next token completes it
    FILE* f = tmpfile();
    TokenPrinter p;
    token_printer_init(&p, &tok, f);
    token_printer_put(&p, 'a');
    token_printer_put(&p, 258);
    fflush(f);
    CHECK(ftell(f) == 1, "after 'a' and half a euro sign only 'a' is out, got %ld bytes", ftell(f));
    token_printer_put(&p, 259);
    fflush(f);
    CHECK(ftell(f) == 5, "the euro sign and '!' follow when completed, got %ld bytes", ftell(f));
    token_printer_put(&p, 260);
    token_printer_flush(&p);
    CHECK(ftell(f) == 8, "a dangling half character becomes U+FFFD at flush, got %ld bytes", ftell(f));
    fclose(f);

    // decoding into a small buffer: cut, NUL-terminated, and the full length returned
    int ids[] = {256, 257, 'l', 'd'};
    char small[6];
    size_t need = tokenizer_decode(&tok, ids, 4, small, sizeof(small));
    CHECK(need == 11 && strcmp(small, "hello") == 0, "cut decode: need %zu, got \"%s\"", need, small);
    CHECK(tokenizer_decode(&tok, ids, 4, NULL, 0) == 11, "decode with cap 0 only measures");

    int length = -1;
    const unsigned char* bytes = tokenizer_token_bytes(&tok, 259, &length);
    CHECK(bytes != NULL && length == 2 && memcmp(bytes, "\xAC!", 2) == 0, "raw bytes of token 259");
    CHECK(tokenizer_token_bytes(&tok, VOCAB, &length) == NULL && length == 0, "no raw bytes outside the vocabulary");
    CHECK(tokenizer_token_bytes(&tok, 263, &length) != NULL && length == 0, "the empty token");
}

// ----------------------------------------------------------------------------
// bad files

static void init_and_free(void* path) {
    Tokenizer t;
    tokenizer_init(&t, (const char*)path);
    tokenizer_free(&t);
}

static void expect_bad_file(const char* what, FileSpec spec, const char* needle) {
    const char* path = tmpdir_path("bad_tokenizer.bin");
    write_tokenizer_file(path, spec);
    expect_fatal(what, init_and_free, (void*)path, path, needle, (const char*)NULL);
}

static void test_bad_files(void) {
    FileSpec s = good_spec();
    s.magic = 20240520;
    expect_bad_file("wrong magic", s, "not a tokenizer file");
    s = good_spec();
    s.version = 1;
    expect_bad_file("wrong version", s, "version 1");
    s = good_spec();
    s.cut = 3;
    expect_bad_file("truncated inside a token", s, "truncated");
    s = good_spec();
    s.cut = 1024 + 300;
    expect_bad_file("truncated header", s, "truncated");
    s = good_spec();
    s.trailing = 5;
    expect_bad_file("trailing bytes", s, "trailing data");
    s = good_spec();
    s.trailing = 300 * 256;
    expect_bad_file("vocab size too small for the file", s, "trailing data");
    s = good_spec();
    s.vocab_size = 0;
    expect_bad_file("vocab size 0", s, "absurd vocabulary size 0");
    s = good_spec();
    s.vocab_size = 1 << 30;
    expect_bad_file("vocab size 2^30", s, "absurd vocabulary size");
    s = good_spec();
    s.eot = VOCAB;
    expect_bad_file("end-of-text id outside", s, "end-of-text id");
    expect_fatal("a folder instead of a file", init_and_free, (void*)harness_dir, harness_dir, "not a regular file",
                 (const char*)NULL);

    // a missing file is not an error: not loaded, and the printer writes ids
    const char* missing = tmpdir_path("no_such_tokenizer.bin");
    Tokenizer t;
    tokenizer_init(&t, missing);
    CHECK(!t.loaded && strstr(t.why, missing) != NULL && strstr(t.why, "printing token ids") != NULL,
          "missing file: loaded=%d why=\"%s\"", t.loaded, t.why);
    int ids[] = {464, 3290, 50256};
    char buf[64];
    tokenizer_decode(&t, ids, 3, buf, sizeof(buf));
    CHECK(strcmp(buf, "464 3290 50256") == 0, "without a tokenizer the ids are printed, got \"%s\"", buf);
    tokenizer_free(&t);
}

int main(void) {
    tmpdir_create("test_tokenizer");
    const char* path = tmpdir_path("tokenizer.bin");
    write_tokenizer_file(path, good_spec());
    tokenizer_init(&tok, path);
    CHECK(tok.loaded && tok.vocab_size == VOCAB && tok.eot_token == EOT, "load the made-up tokenizer");
    test_decoding();
    tokenizer_free(&tok);
    printf("bad tokenizer files (each must be one error line):\n");
    test_bad_files();
    return harness_finish("test_tokenizer");
}
