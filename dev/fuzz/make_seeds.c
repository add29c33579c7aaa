/*
dev/fuzz/make_seeds.c: writes small valid inputs for the five fuzz harnesses (their seed corpora)
with the project's own writers. Usage: make_seeds <folder>; it fills <folder>/<target>/.
Built with plain gcc (no FUZZING) by dev/fuzz/run.sh.
*/
#include <sys/stat.h>
#include "common/params.h"
#include "common/state.h"
#include "common/dataloader.h"
#include "common/eval.h"

static char root[400];

static const char* seed_path(const char* target, const char* name) {
    static char path[1000];
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/%s", root, target);
    mkdir(dir, 0755);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return path;
}

// a seed that is `prefix` (the harness's leading option bytes) followed by the file at `src`
static void write_with_prefix(const char* dst, const uint8_t* prefix, size_t n, const char* src) {
    FILE* in = fopen_check(src, "rb");
    FILE* out = fopen_check(dst, "wb");
    fwrite(prefix, 1, n, out);
    int c;
    while ((c = fgetc(in)) != EOF) { fputc(c, out); }
    fclose(in);
    fclose(out);
    remove(src);
}

static void write_shard(const char* path, int n, int V) {
    int32_t header[SHARD_HEADER_INTS] = {SHARD_MAGIC, SHARD_VERSION, n};
    FILE* f = fopen_check(path, "wb");
    fwrite(header, sizeof(header), 1, f);
    for (int i = 0; i < n; i++) { uint16_t t = (uint16_t)((i * 37 + 11) % V); fwrite(&t, 2, 1, f); }
    fclose(f);
}

static void write_tokenizer(const char* path, int n) {
    int32_t header[256] = {20240328, 2, n, n - 1};
    FILE* f = fopen_check(path, "wb");
    fwrite(header, sizeof(header), 1, f);
    // ASCII, a 2-byte and a 3-byte character, then pieces of a 4-byte one (split over tokens)
    const char* pieces[] = {"a", " the", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f", "\x98\x80", "\xff", "", "<|endoftext|>"};
    for (int i = 0; i < n; i++) {
        const char* s = pieces[i % 9];
        uint8_t len = (uint8_t)strlen(s);
        fwrite(&len, 1, 1, f);
        fwrite(s, 1, len, f);
    }
    fclose(f);
}

int main(int argc, char** argv) {
    if (argc != 2) { fatal("usage: make_seeds <folder>"); }
    snprintf(root, sizeof(root), "%s", argv[1]);
    mkdir(root, 0755);
    char tmp[1000];
    snprintf(tmp, sizeof(tmp), "%s/tmp.bin", root);

    // checkpoints: one tiny model per norm mode (2 channels, 1 layer, maxT 4, V 5)
    for (int mode = 0; mode < NUM_NORM_MODES; mode++) {
        GPT2Config c = {4, 5, 128, 1, 1, 2, (NormMode)mode};
        size_t n = count_parameters(&c);
        float* p = (float*)malloc_check(n * sizeof(float), "params");
        params_init_fresh(p, &c, 42);
        char name[64];
        snprintf(name, sizeof(name), "tiny_%s.bin", NORM_MODE_NAMES[mode]);
        checkpoint_write(seed_path("checkpoint", name), &c, p);
        if (mode == NORM_PRE) {  // the same model as llm.c's float32 file and as its bf16 file
            llmc_checkpoint_write(seed_path("checkpoint", "tiny_llmc.bin"), &c, p);
            int header[256];
            checkpoint_header_sizes(header, &c);
            header[0] = LLMC_MAGIC;
            header[1] = LLMC_VERSION_BF16;
            FILE* f = fopen_check(seed_path("checkpoint", "tiny_llmc_bf16.bin"), "wb");
            fwrite(header, sizeof(header), 1, f);
            for (size_t i = 0; i < n; i++) {
                uint32_t bits;
                memcpy(&bits, p + i, sizeof(bits));
                uint16_t top = (uint16_t)(bits >> 16);
                fwrite(&top, sizeof(top), 1, f);
            }
            fclose(f);
        }
        free(p);
    }
    // the harness resizes a file marked "zzzz" at the end of its header to the size the header
    // describes: a header of maxT 8, V 100, L 2, NH 4, C 8 (siamese), with a body of 64 bytes only
    {
        int header[256] = {MODEL_MAGIC, MODEL_VERSION, 8, 100, 2, 4, 8, 128, NORM_SIAMESE};
        header[255] = 0x7a7a7a7a;
        FILE* f = fopen_check(seed_path("checkpoint", "resize_me.bin"), "wb");
        fwrite(header, sizeof(header), 1, f);
        for (int i = 0; i < 16; i++) { float x = 0.1f * (float)(i - 8); fwrite(&x, sizeof(x), 1, f); }
        fclose(f);
    }

    // states: 10 parameters, with the "use the file size" prefix (0) and with the count (10)
    float mv[20];
    for (int i = 0; i < 20; i++) { mv[i] = 0.01f * (float)i; }
    TrainState st = {3, 2, 1, 10, 2, 8, 32, 0, 17, 1337};
    for (int k = 0; k < 2; k++) {
        uint8_t prefix[2] = {(uint8_t)(k ? 10 : 0), 0};
        state_write(tmp, &st, mv, mv + 10);
        write_with_prefix(seed_path("state", k ? "count10.bin" : "sized.bin"), prefix, 2, tmp);
    }

    // shards: B 2, T 4, V 50, resume at (0, 8); a 40-token and a 9-token shard
    uint8_t shard_prefix[8] = {1, 3, 50, 0, 0, 16, 0, 0};
    write_shard(tmp, 40, 50);
    write_with_prefix(seed_path("dataloader", "shard40.bin"), shard_prefix, 8, tmp);
    write_shard(tmp, 9, 50);
    write_with_prefix(seed_path("dataloader", "shard9.bin"), shard_prefix, 8, tmp);

    // tokenizers: 9 and 20 tokens; the ids decode every token once, then a few out of range
    uint8_t tok_prefix[65];
    tok_prefix[0] = 40;
    for (int i = 0; i < 32; i++) {
        int16_t id = (int16_t)(i < 20 ? i : (i == 20 ? -1 : 20000 + i));
        memcpy(tok_prefix + 1 + 2 * i, &id, 2);
    }
    write_tokenizer(tmp, 9);
    write_with_prefix(seed_path("tokenizer", "vocab9.bin"), tok_prefix, 65, tmp);
    write_tokenizer(tmp, 20);
    write_with_prefix(seed_path("tokenizer", "vocab20.bin"), tok_prefix, 65, tmp);
    // eval: two examples (K 4 and K 1); vocabulary 257 (byte 1), T 12, B 3
    EvalWriter w;
    memset(&w, 0, sizeof(w));
    int ctx[3] = {198, 15, 28}, c0[2] = {16, 198}, c1[1] = {17}, c2[3] = {18, 19, 198}, c3[1] = {256};
    const int* comps[4] = {c0, c1, c2, c3};
    int lens[4] = {2, 1, 3, 1};
    eval_writer_add(&w, ctx, 3, 4, comps, lens, 2);
    eval_writer_add(&w, ctx + 1, 2, 1, comps + 2, lens + 2, 0);
    eval_writer_commit(&w, tmp);
    uint8_t eval_prefix[3] = {1, 12, 2};
    write_with_prefix(seed_path("eval", "two.bin"), eval_prefix, 3, tmp);
    printf("seed corpora written under %s\n", root);
    return 0;
}
