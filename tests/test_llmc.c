/*
tests/test_llmc.c: weights move between llm.c's GPT-2 checkpoints and ours without a bit changing
(common/params.h: checkpoint_open / checkpoint_read_params / llmc_checkpoint_write, and the
program dev/llmc_convert).

A tiny pre-mode model (L 2, C 32, NH 2, V 200 padded to 256, maxT 16) gets a random value in
every parameter (LayerNorms included), so a tensor in the wrong place cannot go unseen. Then:
  1. export: the llm.c file is compared byte for byte with the layout llm.c describes, built here
     on its own from llm.c's tensor list (names, shapes, order) and our tensors looked up by name;
  2. round trip: the llm.c file loads as a pre-mode model with bit-identical parameters, written
     back in our format it is byte-identical to the original checkpoint, and the loss of one batch
     is bit-identical for the original, the llm.c file and the round-tripped file;
  3. bf16: a version-5 file written here (the upper 16 bits of every float32) loads as exactly
     those values, and its loss is within 1% of the float32 one;
  4. refusals, each one error line and exit status 1: exporting a post or siamese model, llm.c
     versions other than 3 and 5, a bf16 header on a float32-sized file;
  5. dev/llmc_convert (path in argv[1]) export and import give the same bytes as 1 and 2, and it
     refuses a siamese model.

Usage: tests/bin/test_llmc dev/llmc_convert      (make test-llmc)
*/
#define _DEFAULT_SOURCE  // M_PI (train_gpt2.c) next to the POSIX functions harness.h asks for
#include "harness.h"
#define TESTING
#include "train_gpt2.c"

static const GPT2Config TINY = {16, 200, 256, 2, 2, 32, NORM_PRE};  // maxT, V, Vp, L, NH, C, mode

// llm.c's parameter list for GPT-2, from its description: the 16 tensors in file order
static const char* const LLMC_NAMES[16] = {"wte",  "wpe", "ln1w",    "ln1b",  "qkvw", "qkvb",  "attprojw", "attprojb",
                                           "ln2w", "ln2b", "fcw",    "fcb",   "fcprojw", "fcprojb", "lnfw", "lnfb"};

static void llmc_sizes(size_t out[16], const GPT2Config* c) {
    size_t V = c->padded_vocab_size, T = c->max_seq_len, L = c->num_layers, C = c->channels;
    size_t s[16] = {V * C, T * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
                    L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
    memcpy(out, s, sizeof(s));
}

// a model of the tiny shape with every parameter random (pad rows of wte stay 0, as llm.c has them)
static float* random_params(const GPT2Config* c, uint64_t seed) {
    size_t n = count_parameters(c);
    float* p = (float*)malloc_check(n * sizeof(float), "parameters");
    uint64_t rng = seed;
    random_normal(p, n, 0.5f, &rng);
    for (size_t i = 0; i < n; i++) { p[i] += 0.02f * (float)(i % 7); }  // no two tensors alike
    size_t used = (size_t)c->vocab_size * c->channels, all = (size_t)c->padded_vocab_size * c->channels;
    memset(p + used, 0, (all - used) * sizeof(float));
    return p;
}

static unsigned char* read_file(const char* path, size_t* size) {
    FILE* f = fopen_check(path, "rb");
    long n = file_size_check(f, path);
    unsigned char* data = (unsigned char*)malloc_check((size_t)n, "file");
    fread_check(data, 1, (size_t)n, f, path);
    fclose(f);
    *size = (size_t)n;
    return data;
}

static int files_equal(const char* a, const char* b) {
    size_t na, nb;
    unsigned char* da = read_file(a, &na);
    unsigned char* db = read_file(b, &nb);
    int same = na == nb && memcmp(da, db, na) == 0;
    free(da);
    free(db);
    return same;
}

// the mean loss of one fixed batch (B 2, T 8) for the model in `path`; *params_out gets a copy of its parameters
static float batch_loss(const char* path, float** params_out, GPT2Config* cfg_out) {
    GPT2 m;
    gpt2_build_from_checkpoint(&m, path);
    const int B = 2, T = 8;
    gpt2_allocate(&m, B, T);
    int tokens[2 * 8 + 1];
    for (int i = 0; i < B * T + 1; i++) { tokens[i] = (i * 37 + 11) % m.config.vocab_size; }
    gpt2_forward(&m, tokens, tokens + 1, B, T);
    float loss = m.mean_loss;
    if (params_out) {
        *params_out = (float*)malloc_check(m.num_parameters * sizeof(float), "parameters");
        memcpy(*params_out, m.params_memory, m.num_parameters * sizeof(float));
    }
    if (cfg_out) { *cfg_out = m.config; }
    gpt2_free(&m);
    return loss;
}

// tmpdir_path reuses its buffers; the paths kept for the whole test are copied here
static const char* keep_path(const char* name) {
    static char pool[24][512];
    static int used = 0;
    if (used == 24) { fatal("test_llmc: too many kept paths"); }
    snprintf(pool[used], sizeof(pool[used]), "%s", tmpdir_path(name));
    return pool[used++];
}

static int same_bits(const float* a, const float* b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

// ----------------------------------------------------------------------------
// refusals, run in a child process (fatal exits)

static float* g_params;
static void export_post(void* arg) {
    (void)arg;
    GPT2Config c = TINY;
    c.norm_mode = NORM_POST;
    llmc_checkpoint_write(tmpdir_path("post_llmc.bin"), &c, g_params);
}
static void export_siamese(void* arg) {
    (void)arg;
    GPT2Config c = TINY;
    c.norm_mode = NORM_SIAMESE;
    float* p = random_params(&c, 5);
    llmc_checkpoint_write(tmpdir_path("siamese_llmc.bin"), &c, p);
}
static void load(void* path) {
    GPT2 m;
    gpt2_build_from_checkpoint(&m, (const char*)path);
}

// the llm.c file `src` with header entry `index` set to `value`, as `dst`
static void patched_copy(const char* src, const char* dst, int index, int value) {
    size_t n;
    unsigned char* data = read_file(src, &n);
    memcpy(data + 4 * index, &value, sizeof(int));
    write_bytes(dst, data, n);
    free(data);
}

// ----------------------------------------------------------------------------
// the converter program

static const char* converter;
static const char* conv_args[3];
static void run_converter(void* arg) {
    (void)arg;
    execl(converter, converter, conv_args[0], conv_args[1], conv_args[2], (char*)NULL);
    _exit(127);
}

int main(int argc, char** argv) {
    if (argc != 2) { fatal("usage: %s PATH_TO_llmc_convert", argv[0]); }
    converter = argv[1];
    tmpdir_create("test_llmc");
    const GPT2Config* c = &TINY;
    size_t n = count_parameters(c);
    g_params = random_params(c, 1234);
    const char* ours = keep_path("ours.bin");
    const char* llmc = keep_path("llmc.bin");
    const char* back = keep_path("back.bin");
    checkpoint_write(ours, c, g_params);

    printf("1. export: llm.c's layout\n");
    llmc_checkpoint_write(llmc, c, g_params);
    {
        size_t size;
        unsigned char* file = read_file(llmc, &size);
        int header[256];
        memcpy(header, file, sizeof(header));
        int expected_header[8] = {20240326, 3, c->max_seq_len, c->vocab_size, c->num_layers, c->num_heads, c->channels,
                                  c->padded_vocab_size};
        int header_ok = memcmp(header, expected_header, sizeof(expected_header)) == 0;
        for (int i = 8; i < 256; i++) { header_ok = header_ok && header[i] == 0; }
        CHECK(header_ok, "llm.c header: magic %d version %d maxT %d V %d L %d NH %d C %d Vp %d", header[0], header[1],
              header[2], header[3], header[4], header[5], header[6], header[7]);
        // the body llm.c expects, assembled tensor by tensor by name from our table
        size_t ours_sizes[NUM_PARAMETER_TENSORS], want[16], total = 0;
        fill_param_sizes(ours_sizes, c);
        llmc_sizes(want, c);
        for (int k = 0; k < 16; k++) { total += want[k]; }
        float* body = (float*)malloc_check(total * sizeof(float), "expected body");
        size_t at = 0;
        for (int k = 0; k < 16; k++) {
            size_t offset = 0;
            int found = -1;
            for (int i = 0; i < NUM_PARAMETER_TENSORS && found < 0; i++) {
                if (strcmp(PARAM_NAMES[i], LLMC_NAMES[k]) == 0) { found = i; } else { offset += ours_sizes[i]; }
            }
            CHECK(found >= 0 && ours_sizes[found] == want[k], "tensor %s: llm.c size %zu, ours %zu", LLMC_NAMES[k],
                  want[k], found >= 0 ? ours_sizes[found] : 0);
            if (found >= 0) { memcpy(body + at, g_params + offset, want[k] * sizeof(float)); }
            at += want[k];
        }
        CHECK(size == 1024 + total * sizeof(float), "llm.c file has %zu bytes, expected %zu", size,
              1024 + total * sizeof(float));
        CHECK(size == 1024 + total * sizeof(float) && memcmp(file + 1024, body, total * sizeof(float)) == 0,
              "the llm.c body is not llm.c's tensor order");
        free(body);
        free(file);
    }

    printf("2. round trip: ours -> llm.c -> ours\n");
    float *p_ours, *p_llmc, *p_back;
    GPT2Config cfg_llmc;
    float loss_ours = batch_loss(ours, &p_ours, NULL);
    float loss_llmc = batch_loss(llmc, &p_llmc, &cfg_llmc);
    CHECK(memcmp(&cfg_llmc, c, sizeof(GPT2Config)) == 0, "the llm.c file loads with another config (mode %d, L %d)",
          cfg_llmc.norm_mode, cfg_llmc.num_layers);
    CHECK(same_bits(p_llmc, g_params, n), "parameters read from the llm.c file differ");
    GPT2Config cfg_read;
    {
        CheckpointFile ck;
        checkpoint_open(&ck, llmc);
        cfg_read = ck.config;
        float* p = (float*)malloc_check(n * sizeof(float), "parameters");
        checkpoint_read_params(&ck, p);
        checkpoint_write(back, &cfg_read, p);
        free(p);
    }
    CHECK(files_equal(back, ours), "llm.c -> ours is not byte-identical to the original checkpoint");
    float loss_back = batch_loss(back, &p_back, NULL);
    CHECK(same_bits(p_back, g_params, n), "round-tripped parameters differ");
    CHECK(memcmp(&loss_ours, &loss_llmc, sizeof(float)) == 0 && memcmp(&loss_ours, &loss_back, sizeof(float)) == 0,
          "losses differ: ours %.9g, llm.c file %.9g, round trip %.9g", loss_ours, loss_llmc, loss_back);
    printf("   loss of one batch: ours %.9g, llm.c file %.9g, round trip %.9g\n", loss_ours, loss_llmc, loss_back);

    printf("3. bf16 (llm.c version 5)\n");
    const char* bf16 = keep_path("llmc_bf16.bin");
    float* truncated = (float*)malloc_check(n * sizeof(float), "bf16 values");
    {
        int header[256] = {20240326, 5, c->max_seq_len, c->vocab_size, c->num_layers, c->num_heads, c->channels,
                           c->padded_vocab_size};
        size_t bytes = 1024 + 2 * n;
        unsigned char* file = (unsigned char*)calloc_check(bytes, 1, "bf16 file");
        memcpy(file, header, sizeof(header));
        for (size_t i = 0; i < n; i++) {
            uint32_t bits;
            memcpy(&bits, g_params + i, 4);
            file[1024 + 2 * i] = (unsigned char)(bits >> 16);  // little-endian 16-bit word: low byte first
            file[1024 + 2 * i + 1] = (unsigned char)(bits >> 24);
            bits &= 0xffff0000u;
            memcpy(truncated + i, &bits, 4);
        }
        write_bytes(bf16, file, bytes);
        free(file);
    }
    float* p_bf16;
    GPT2Config cfg_bf16;
    float loss_bf16 = batch_loss(bf16, &p_bf16, &cfg_bf16);
    CHECK(memcmp(&cfg_bf16, c, sizeof(GPT2Config)) == 0, "the bf16 file loads with another config");
    CHECK(same_bits(p_bf16, truncated, n), "bf16 parameters are not the upper halves of the float32 values");
    CHECK(fabsf(loss_bf16 - loss_ours) <= 1e-2f * fabsf(loss_ours), "bf16 loss %.6g vs float32 %.6g", loss_bf16,
          loss_ours);
    printf("   loss of the same batch: %.9g (float32 %.9g)\n", loss_bf16, loss_ours);

    printf("4. refusals\n");
    expect_fatal("export a post model", export_post, NULL, "cannot export a post-mode model", "pre-mode", (char*)NULL);
    expect_fatal("export a siamese model", export_siamese, NULL, "cannot export a siamese-mode model", (char*)NULL);
    // damaged llm.c files: header entry `index` set to `value`
    struct { const char* what; int index, value; const char* needle; } damaged[] = {
        {"llm.c version 4", 1, 4, "llm.c checkpoint version 4 is not supported"},
        {"llm.c version 1 (unpadded)", 1, 1, "version 1 is not supported"},
        {"bf16 header, float32 body", 1, 5, "header describes"},
        {"llm.c Vp not a multiple of 128", 7, 200, "inconsistent model sizes"},
    };
    for (size_t k = 0; k < sizeof(damaged) / sizeof(damaged[0]); k++) {
        const char* path = keep_path(damaged[k].what);
        patched_copy(llmc, path, damaged[k].index, damaged[k].value);
        expect_fatal(damaged[k].what, load, (void*)path, damaged[k].needle, (char*)NULL);
    }

    printf("5. dev/llmc_convert\n");
    const char* cli_llmc = keep_path("cli_llmc.bin");
    const char* cli_back = keep_path("cli_back.bin");
    const char* cli_bf16 = keep_path("cli_from_bf16.bin");
    conv_args[0] = "export"; conv_args[1] = ours; conv_args[2] = cli_llmc;
    expect_ok("export", run_converter, NULL);
    CHECK(files_equal(cli_llmc, llmc), "dev/llmc_convert export differs from llmc_checkpoint_write");
    conv_args[0] = "import"; conv_args[1] = cli_llmc; conv_args[2] = cli_back;
    expect_ok("import", run_converter, NULL);
    CHECK(files_equal(cli_back, ours), "dev/llmc_convert import is not byte-identical to the original");
    conv_args[0] = "import"; conv_args[1] = bf16; conv_args[2] = cli_bf16;
    expect_ok("import bf16", run_converter, NULL);
    {
        CheckpointFile ck;
        checkpoint_open(&ck, cli_bf16);
        float* p = (float*)malloc_check(n * sizeof(float), "parameters");
        checkpoint_read_params(&ck, p);
        CHECK(ck.config.norm_mode == NORM_PRE && same_bits(p, truncated, n), "imported bf16 model differs");
        free(p);
    }
    GPT2Config sc = TINY;
    sc.norm_mode = NORM_SIAMESE;
    float* ps = random_params(&sc, 9);
    const char* siamese = keep_path("siamese.bin");
    checkpoint_write(siamese, &sc, ps);
    conv_args[0] = "export"; conv_args[1] = siamese; conv_args[2] = keep_path("never.bin");
    expect_fatal("export a siamese checkpoint", run_converter, NULL, "siamese-mode model", "only a pre-mode model",
                 (char*)NULL);
    CHECK(!file_exists(keep_path("never.bin")), "a refused export left a file behind");
    conv_args[0] = "convert"; conv_args[1] = ours; conv_args[2] = cli_llmc;
    expect_fatal("unknown command", run_converter, NULL, "usage", (char*)NULL);

    free(g_params); free(p_ours); free(p_llmc); free(p_back); free(p_bf16); free(truncated); free(ps);
    return harness_finish("test_llmc");
}
