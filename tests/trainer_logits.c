/*
tests/trainer_logits.c: the CPU trainer's own logits and greedy continuation for one row of
tokens, so that a model exported to another framework (dev/export_hf.py) can be held to what
train_gpt2.c computes (tests/test_hf.py, make test-hf).

    tests/bin/trainer_logits MODEL OUT TOKENS [GREEDY]

MODEL is a checkpoint (ours, or llm.c's GPT-2). TOKENS is one row of token ids, comma-separated
("15,10,17,28"). The program runs train_gpt2.c's forward pass (gpt2_forward, B = 1) on the row and
writes to OUT, as little-endian raw data:

    float32 logits (T, V)      the padded vocabulary columns V..Vp-1 left out
    int32   greedy (GREEDY)    greedy decoding: GREEDY times, the argmax over the V real tokens of
                               the last position's logits (the lowest id among equal maxima),
                               appended to the row and run again (the whole row each time: the
                               trainer has no KV cache)

and prints the greedy tokens, comma-separated. T + GREEDY - 1 must fit in the model's maxT.
Bad input ends with one "error: ..." line, as everywhere in the trainer.
*/
#define TESTING
#include "train_gpt2.c"

// the comma-separated ids of `text` into a fresh array; *n gets their number
static int* parse_tokens(const char* text, int* n) {
    int count = 1;
    for (const char* p = text; *p; p++) { count += *p == ','; }
    int* tokens = (int*)malloc_check((size_t)count * sizeof(int), "tokens");
    const char* p = text;
    for (int i = 0; i < count; i++) {
        char* end;
        long v = strtol(p, &end, 10);
        if (end == p || (*end != ',' && *end != '\0') || v < 0 || v > INT32_MAX) {
            fatal("TOKENS must be comma-separated non-negative token ids, got '%s'", text);
        }
        tokens[i] = (int)v;
        p = end + 1;
    }
    *n = count;
    return tokens;
}

static int argmax_row(const float* logits, int V) {
    int best = 0;
    for (int v = 1; v < V; v++) {
        if (logits[v] > logits[best]) { best = v; }
    }
    return best;
}

int main(int argc, char** argv) {
    if (argc != 4 && argc != 5) {
        fatal("usage: %s MODEL OUT TOKENS [GREEDY]  (TOKENS comma-separated ids; see the header of tests/trainer_logits.c)",
              argv[0]);
    }
    GPT2 model;
    gpt2_build_from_checkpoint(&model, argv[1]);
    const GPT2Config* cfg = &model.config;
    int T;
    int* prompt = parse_tokens(argv[3], &T);
    int greedy = 0;
    if (argc == 5) {
        char* end;
        long g = strtol(argv[4], &end, 10);
        if (*argv[4] == '\0' || *end != '\0' || g < 0 || g > cfg->max_seq_len) { fatal("GREEDY must be 0..maxT, got '%s'", argv[4]); }
        greedy = (int)g;
    }
    int total = T + (greedy > 0 ? greedy - 1 : 0);  // the longest row run through the model
    if (total > cfg->max_seq_len) {
        fatal("%d tokens and %d greedy steps need %d positions, the model has %d", T, greedy, total, cfg->max_seq_len);
    }
    int V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    gpt2_allocate(&model, 1, total);
    int* row = (int*)malloc_check((size_t)(T + greedy) * sizeof(int), "row");
    memcpy(row, prompt, (size_t)T * sizeof(int));

    AtomicFile out;
    atomic_open(&out, argv[2]);
    gpt2_forward(&model, row, NULL, 1, T);
    for (int t = 0; t < T; t++) { atomic_write(&out, model.acts.logits + (size_t)t * Vp, sizeof(float), V); }
    for (int g = 0; g < greedy; g++) {
        int len = T + g;
        if (g > 0) { gpt2_forward(&model, row, NULL, 1, len); }
        row[len] = argmax_row(model.acts.logits + (size_t)(len - 1) * Vp, V);
        printf("%s%d", g ? "," : "", row[len]);
    }
    printf("\n");
    atomic_write(&out, row + T, sizeof(int), greedy);
    atomic_commit(&out);
    free(row);
    free(prompt);
    gpt2_free(&model);
    return 0;
}
