/*
dev/fuzz/fuzz_eval.c: libFuzzer harness for the multiple-choice eval file reader and its scoring
(common/eval.h). Input: byte 0 picks the vocabulary (byte * 257 + 1, so 1 .. 65536), byte 1 the
row length T (0: any length), byte 2 the batch B (1 .. 8), the rest is the eval file. A file that
loads is scored against a fake model (the loss at a position is its target token times a
constant) over all examples and again over two halves: every row must fit T and hold ids of the
vocabulary, and the two counts must agree and stay within the number of examples.
*/
#include "dev/fuzz/fuzz.h"
#include "common/eval.h"

static EvalSet set;
static float* fake_buffer;
static int* rows_in;
static int* rows_tg;

static int fake_vocab;
static const float* fake_losses(void* ctx, const int* inputs, const int* targets, int B, int T) {
    (void)ctx;
    for (int i = 0; i < B * T; i++) {
        if (inputs[i] < 0 || inputs[i] >= fake_vocab || targets[i] < 0 || targets[i] >= fake_vocab) { abort(); }
        fake_buffer[i] = 0.001f * (float)targets[i];
    }
    return fake_buffer;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 3) { return 0; }
    fake_vocab = data[0] * 257 + 1;
    int T = data[1], B = 1 + data[2] % 8;
    const char* path = fuzz_input_file("eval", data + 3, size - 3);
    memset(&set, 0, sizeof(set));
    FUZZ_TRY(
        {
            eval_set_load(&set, path, fake_vocab, T);
            int rowT = set.longest;
            if (T > 0 && rowT > T) { abort(); }
            fake_buffer = (float*)malloc_check((size_t)B * rowT * sizeof(float), "fake losses");
            rows_in = (int*)malloc_check((size_t)B * rowT * sizeof(int), "rows");
            rows_tg = (int*)malloc_check((size_t)B * rowT * sizeof(int), "rows");
            int all = eval_run(&set, 0, set.num_examples, fake_losses, NULL, B, rowT, rows_in, rows_tg);
            int half = set.num_examples / 2;
            int parts = eval_run(&set, 0, half, fake_losses, NULL, B, rowT, rows_in, rows_tg) +
                        eval_run(&set, half, set.num_examples, fake_losses, NULL, B, rowT, rows_in, rows_tg);
            if (all != parts || all < 0 || all > set.num_examples) { abort(); }
        },
        {});
    free(fake_buffer);
    free(rows_in);
    free(rows_tg);
    fake_buffer = NULL;
    rows_in = rows_tg = NULL;
    eval_set_free(&set);
    return 0;
}
