/*
dev/fuzz/fuzz_checkpoint.c: libFuzzer harness for the checkpoint reader. The input is a model
file; train_gpt2.c's gpt2_build_from_checkpoint (checkpoint_open + checkpoint_read_params) loads
it, and a model that loads runs one forward pass with targets on a few tokens (weights may be
NaN or Inf: the forward pass must not crash on them).

A file whose size disagrees with its header is rejected at once, and a mutated header rarely
comes with the right size. So when the last header int is RESIZE_MARK ("zzzz") and the header is
otherwise valid for a model of at most 1 MiB, the harness first pads (repeating the body) or cuts
the file to the size the header describes: the fuzzer then explores odd model shapes in depth.
*/
#include "dev/fuzz/fuzz.h"
#define TESTING
#include "train_gpt2.c"

#define RESIZE_MARK 0x7a7a7a7a

static GPT2 model;
static GPT2Config cfg;
static int bf16;  // llm.c bf16 file: 2 bytes per parameter
static uint8_t* resized;

// 1 when the header (ours or llm.c's) is valid (then in cfg and bf16), 0 when the reader rejects it
static int header_is_valid(const int* header) {
    bf16 = 0;
    FUZZ_TRY(cfg = header[0] == LLMC_MAGIC ? llmc_config_from_header(header, "header", &bf16)
                                           : checkpoint_config_from_header(header, "header"),
             cfg.channels = 0);
    return cfg.channels > 0;
}

// the input, or a resized copy of it (in `resized`) when its header asks for one
static const uint8_t* maybe_resize(const uint8_t* data, size_t* size) {
    int header[256];
    if (*size < sizeof(header)) { return data; }
    memcpy(header, data, sizeof(header));
    if (header[255] != RESIZE_MARK || !header_is_valid(header)) { return data; }
    size_t want = sizeof(header) + (bf16 ? 2 : sizeof(float)) * count_parameters(&cfg);
    if (want > (1u << 20)) { return data; }
    resized = (uint8_t*)malloc_check(want, "resized input");
    size_t body = *size - sizeof(header);
    memcpy(resized, data, sizeof(header));
    for (size_t i = sizeof(header); i < want; i++) {
        resized[i] = body ? data[sizeof(header) + (i - sizeof(header)) % body] : 0;
    }
    *size = want;
    return resized;
}

int LLVMFuzzerTestOneInput(const uint8_t* input, size_t input_size) {
    resized = NULL;
    size_t size = input_size;
    const uint8_t* data = maybe_resize(input, &size);
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
    free(resized);
    return 0;
}
