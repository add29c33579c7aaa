/*
dev/fuzz/fuzz_tokenizer.c: libFuzzer harness for the tokenizer reader and decoder
(common/tokenizer.h). Input: byte 0 picks the output buffer size (0..255), bytes 1..64 are 32
int16 token ids to decode (any value, in range or not), the rest is the tokenizer file. A file
that loads decodes the ids into the buffer, into a buffer of the exact size, and through the
streaming printer into /dev/null; the decoded text must be valid UTF-8 and as long as it says.
*/
#include "dev/fuzz/fuzz.h"
#include "common/tokenizer.h"

static Tokenizer tok;

// a strict UTF-8 check, written apart from the one in the decoder
static int valid_utf8(const unsigned char* s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        int len = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (len == 0 || i + len > n) { return 0; }
        unsigned lo = 0x80, hi = 0xBF;
        if (c == 0xE0) { lo = 0xA0; } else if (c == 0xED) { hi = 0x9F; } else if (c == 0xF0) { lo = 0x90; } else if (c == 0xF4) { hi = 0x8F; }
        for (int k = 1; k < len; k++) {
            unsigned b = s[i + k];
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) { return 0; }
        }
        i += len;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 65) { return 0; }
    size_t cap = data[0];
    int ids[32];
    for (int i = 0; i < 32; i++) { ids[i] = (int16_t)fuzz_u16(data, size, 1 + 2 * (size_t)i); }
    const char* path = fuzz_input_file("tokenizer", data + 65, size - 65);
    memset(&tok, 0, sizeof(tok));
    FUZZ_TRY(
        {
            tokenizer_init(&tok, path);
            char small[256];
            size_t len = tokenizer_decode(&tok, ids, 32, small, cap);
            if (cap > 0 && strlen(small) >= cap) { abort(); }
            char* full = (char*)malloc_check(len + 1, "decoded text");
            size_t len2 = tokenizer_decode(&tok, ids, 32, full, len + 1);
            if (len2 != len || full[len] != 0 || !valid_utf8((const unsigned char*)full, len)) { abort(); }
            free(full);
            FILE* out = fopen("/dev/null", "w");
            TokenPrinter p;
            token_printer_init(&p, &tok, out);
            for (int i = 0; i < 32; i++) { token_printer_put(&p, ids[i]); }
            token_printer_flush(&p);
            fclose(out);
            (void)tokenizer_prompt_token(&tok, 50257);
        },
        {});
    tokenizer_free(&tok);
    return 0;
}
