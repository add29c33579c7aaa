/*
dev/fuzz/fuzz_dataloader.c: libFuzzer harness for the token-shard reader (common/dataloader.h).
Input: byte 0 picks B (1..4), byte 1 picks T (1..8), bytes 2-3 the vocabulary size (0: GPT-2's
50257), bytes 4-7 a position to resume from (shard index 0 or 1, offset); the rest is one shard.
The harness initialises a loader on it, moves to the position and reads batches past a wrap-around,
checking every token it hands out against the vocabulary.
*/
#include "dev/fuzz/fuzz.h"
#include "common/dataloader.h"

static DataLoader loader;

static void free_partial_loader(void) {
    // dataloader_init stops wherever the error happened; free what it had set up
    for (int i = 0; loader.shard_paths != NULL && i < loader.num_shards; i++) { free(loader.shard_paths[i]); }
    free(loader.shard_paths);
    free(loader.shard_tokens);
    free(loader.tokens);
    free(loader.inputs);
    free(loader.targets);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 8) { return 0; }
    int B = 1 + data[0] % 4, T = 1 + data[1] % 8;
    int V = (int)fuzz_u16(data, size, 2);
    if (V == 0) { V = 50257; }
    int index = data[4] % 2;
    long offset = (long)(fuzz_u16(data, size, 5) | ((uint32_t)data[7] << 16)) - 8;
    const char* path = fuzz_input_file("shard", data + 8, size - 8);
    memset(&loader, 0, sizeof(loader));
    FUZZ_TRY(
        {
            dataloader_init(&loader, path, B, T, V, 0, 1);
            long steps = loader.shard_tokens[0] / ((long)B * T) + 2;
            for (long s = 0; s < steps; s++) {
                dataloader_next_batch(&loader);
                for (int i = 0; i < B * T; i++) {
                    if (loader.inputs[i] < 0 || loader.inputs[i] >= V || loader.targets[i] < 0 || loader.targets[i] >= V) {
                        abort();
                    }
                }
            }
            dataloader_set_position(&loader, index, offset);
            dataloader_next_batch(&loader);
            dataloader_reset(&loader);
        },
        {});
    free_partial_loader();
    return 0;
}
