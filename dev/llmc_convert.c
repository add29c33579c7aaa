/*
dev/llmc_convert.c: move GPT-2 weights between llm.c and this project.

A pre-mode model of ours is GPT-2, the model llm.c trains: the same 16 tensors in the same order
(dev/MODEL.md, "Parameters"; the format notes are at the end of common/params.h). So:

    dev/llmc_convert export MODEL.bin OUT.bin
        a pre-mode checkpoint of ours (or an llm.c file) -> llm.c's float32 checkpoint (version 3),
        which llm.c's trainers load like its gpt2_124M.bin
    dev/llmc_convert import LLMC.bin OUT.bin
        llm.c's gpt2_124M.bin (float32) or gpt2_124M_bf16.bin (bf16) -> our checkpoint, pre mode

`import` is a convenience: the trainers read llm.c's files directly (./train_gpt2 -e gpt2_124M.bin).
A post- or siamese-mode model cannot be exported: llm.c's GPT-2 has no place for the way those
modes place their LayerNorms, and would compute another function with the same weights.

Build: make dev/llmc_convert
*/
#include <stdio.h>
#include <string.h>
#include "common/utils.h"
#include "common/params.h"

int main(int argc, char** argv) {
    if (argc != 4 || (strcmp(argv[1], "export") != 0 && strcmp(argv[1], "import") != 0)) {
        fatal("usage: %s export MODEL.bin LLMC.bin | import LLMC.bin MODEL.bin (see the header of dev/llmc_convert.c)",
              argc > 0 ? argv[0] : "llmc_convert");
    }
    const char* in = argv[2];
    const char* out = argv[3];
    int to_llmc = strcmp(argv[1], "export") == 0;

    CheckpointFile ck;
    checkpoint_open(&ck, in);
    GPT2Config cfg = ck.config;
    if (to_llmc && cfg.norm_mode != NORM_PRE) {  // before reading a large file for nothing
        fatal("%s holds a %s-mode model; only a pre-mode model can be exported to llm.c (its GPT-2 is pre-norm)",
              in, NORM_MODE_NAMES[cfg.norm_mode]);
    }
    size_t n = count_parameters(&cfg);
    float* params = (float*)malloc_check(n * sizeof(float), "parameters");
    checkpoint_read_params(&ck, params);
    if (to_llmc) {
        llmc_checkpoint_write(out, &cfg, params);
    } else {
        checkpoint_write(out, &cfg, params);
    }
    printf("%s: %s model, L %d, C %d, NH %d, V %d (padded %d), maxT %d, %zu parameters -> %s (%s)\n", in,
           NORM_MODE_NAMES[cfg.norm_mode], cfg.num_layers, cfg.channels, cfg.num_heads, cfg.vocab_size,
           cfg.padded_vocab_size, cfg.max_seq_len, n, out, to_llmc ? "llm.c, float32" : "this project's format");
    free(params);
    return 0;
}
