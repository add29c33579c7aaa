/*
dev/fuzz/replay_main.c: a main() for a fuzz harness built without libFuzzer (plain gcc, -DFUZZING):
calls LLVMFuzzerTestOneInput once on each file named on the command line, so that `make test`
replays the regression inputs in tests/fuzz_regressions/<target>/. A crash is the failure.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
    int n = 0;
    for (int i = 1; i < argc; i++) {
        FILE* f = fopen(argv[i], "rb");
        if (f == NULL) { perror(argv[i]); return 1; }
        uint8_t* data = NULL;
        size_t size = 0, cap = 0;
        for (;;) {
            if (size == cap) {
                cap = cap ? 2 * cap : 65536;
                data = (uint8_t*)realloc(data, cap);
                if (data == NULL) { fprintf(stderr, "out of memory\n"); return 1; }
            }
            size_t got = fread(data + size, 1, cap - size, f);
            if (got == 0) { break; }
            size += got;
        }
        fclose(f);
        LLVMFuzzerTestOneInput(data, size);
        free(data);
        n++;
    }
    printf("%s: %d inputs replayed without a crash\n", argv[0], n);
    return 0;
}
