/*
tests/mkshard.c: writes a token shard for the trainer's command-line tests (test_train_cli.sh).
    mkshard PATH NTOKENS VOCAB [SEED]
NTOKENS token ids in 0..VOCAB-1 from a small LCG (VOCAB may exceed the model's: a bad shard).
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
    if (argc < 4 || argc > 5) { fprintf(stderr, "usage: mkshard PATH NTOKENS VOCAB [SEED]\n"); return 2; }
    long n = atol(argv[2]), vocab = atol(argv[3]);
    uint64_t x = argc == 5 ? strtoull(argv[4], NULL, 10) : 1;
    if (n < 0 || vocab < 1 || vocab > 65536) { fprintf(stderr, "mkshard: bad sizes\n"); return 2; }
    int32_t header[256] = {20240520, 1, (int32_t)n};
    FILE* f = fopen(argv[1], "wb");
    if (f == NULL) { perror(argv[1]); return 2; }
    fwrite(header, sizeof(header), 1, f);
    for (long i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        uint16_t t = (uint16_t)((x >> 33) % (uint64_t)vocab);
        fwrite(&t, sizeof(t), 1, f);
    }
    return fclose(f) == 0 ? 0 : 2;
}
