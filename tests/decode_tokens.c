/*
tests/decode_tokens.c: decode token ids with common/tokenizer.h, for dev/data/test_roundtrip.py.

    decode_tokens [--buffer] TOKENIZER.bin < ids.txt > text

Reads whitespace-separated token ids from stdin and writes the decoded text to stdout: streamed
token by token through a TokenPrinter, or with --buffer all at once through tokenizer_decode.
*/
#define _POSIX_C_SOURCE 200809L

#include "common/tokenizer.h"

int main(int argc, char** argv) {
    int buffer_mode = argc == 3 && strcmp(argv[1], "--buffer") == 0;
    if (argc != 2 + buffer_mode) {
        fprintf(stderr, "usage: %s [--buffer] TOKENIZER.bin < ids.txt\n", argv[0]);
        return 1;
    }
    Tokenizer tok;
    tokenizer_init(&tok, argv[argc - 1]);
    tokenizer_print_notice(&tok, stderr);

    size_t cap = 1 << 16, n = 0;
    int* ids = (int*)malloc_check(cap * sizeof(int), "token ids");
    int id;
    int got;
    while ((got = scanf("%d", &id)) == 1) {
        if (n == cap) {
            cap *= 2;
            int* bigger = (int*)realloc(ids, cap * sizeof(int));
            if (bigger == NULL) { fatal("out of memory for %zu token ids", cap); }
            ids = bigger;
        }
        ids[n++] = id;
    }
    if (got != EOF) { fatal("stdin: token id number %zu is not an integer", n + 1); }

    if (buffer_mode) {
        size_t length = tokenizer_decode(&tok, ids, (int)n, NULL, 0);  // measure, then decode
        char* text = (char*)malloc_check(length + 1, "decoded text");
        tokenizer_decode(&tok, ids, (int)n, text, length + 1);
        fwrite(text, 1, length, stdout);
        free(text);
    } else {
        TokenPrinter printer;
        token_printer_init(&printer, &tok, stdout);
        for (size_t i = 0; i < n; i++) { token_printer_put(&printer, ids[i]); }
        token_printer_flush(&printer);
    }
    free(ids);
    tokenizer_free(&tok);
    return 0;
}
