/*
dev/fuzz/fuzz_checkpoint.c: libFuzzer harness for the checkpoint reader. The input is a model
file; train_gpt2.c's gpt2_build_from_checkpoint (checkpoint_open + reading the parameters) loads
it, and a model that loads runs one forward pass with targets on a few tokens (weights may be
NaN or Inf: the forward pass must not crash on them).
*/
#include "dev/fuzz/fuzz.h"
#define TESTING
#include "train_gpt2.c"

static GPT2 model;

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_input_file("checkpoint", data, size);
    memset(&model, 0, sizeof(model));
    FUZZ_TRY(
        {
            gpt2_build_from_checkpoint(&model, path);
            int T = model.config.max_seq_len < 4 ? model.config.max_seq_len : 4;
            gpt2_allocate(&model, 1, T);
            int tokens[5];
            for (int i = 0; i < 5; i++) { tokens[i] = (i * 7) % model.config.vocab_size; }
            gpt2_forward(&model, tokens, tokens + 1, 1, T);
        },
        {});
    gpt2_free(&model);  // everything it frees is NULL or allocated
    return 0;
}
