/*
tests/test_dataloader.c: common/dataloader.h on small shards written here (no Python needed).

Token k of shard s holds the id 100*s + k, so every batch can be checked exactly: we know which
shard and which offset every input and target must come from. Several processes are several
loaders in this one program, one per rank.
*/
#include "harness.h"

#include "common/dataloader.h"

#define VOCAB 1000

static int token_at(int shard, long k) { return 100 * shard + (int)k; }

// ----------------------------------------------------------------------------
// writing shards, good and bad

typedef struct {
    int32_t magic, version;
    long header_count;   // the count the header claims
    long num_tokens;     // the tokens actually written
    long trailing;       // junk bytes after them
    long cut;            // bytes cut off the end of the file
    long bad_at;         // put the id VOCAB at this token position (-1: none)
} ShardSpec;

static ShardSpec shard_spec(long num_tokens) {
    ShardSpec s = {SHARD_MAGIC, SHARD_VERSION, num_tokens, num_tokens, 0, 0, -1};
    return s;
}

static void write_shard(const char* path, int shard, ShardSpec s) {
    static unsigned char data[1024 + 2 * 1000 + 64];
    int32_t header[256] = {0};
    header[0] = s.magic;
    header[1] = s.version;
    header[2] = (int32_t)s.header_count;
    memcpy(data, header, sizeof(header));
    uint16_t* tokens = (uint16_t*)(data + 1024);
    for (long k = 0; k < s.num_tokens; k++) { tokens[k] = (uint16_t)(k == s.bad_at ? VOCAB : token_at(shard, k)); }
    long n = 1024 + 2 * s.num_tokens;
    for (long k = 0; k < s.trailing; k++) { data[n++] = 0; }
    write_bytes(path, data, (size_t)(n - s.cut));
}

// ----------------------------------------------------------------------------
// batches

// is the batch in the loader the window that starts at this offset of this shard?
static int batch_is(const DataLoader* d, int shard, long start) {
    for (int i = 0; i < d->B * d->T; i++) {
        if (d->inputs[i] != token_at(shard, start + i)) { return 0; }
        if (d->targets[i] != token_at(shard, start + i + 1)) { return 0; }
    }
    return 1;
}

static void test_batches(void) {
    // shards of 20, 14 and 7 tokens; B=2, T=3: a batch takes 6 tokens plus 1 for the last target
    write_shard(tmpdir_path("good_002.bin"), 2, shard_spec(7));  // written out of order on purpose
    write_shard(tmpdir_path("good_000.bin"), 0, shard_spec(20));
    write_shard(tmpdir_path("good_001.bin"), 1, shard_spec(14));
    const char* pattern = tmpdir_path("good_*.bin");

    DataLoader d;
    dataloader_init(&d, pattern, 2, 3, VOCAB, 0, 1);
    CHECK(d.num_shards == 3 && strstr(d.shard_paths[0], "good_000.bin") && strstr(d.shard_paths[2], "good_002.bin"),
          "three shards in sorted order");
    // the batches of one epoch: shard 0 at 0, 6, 12 (18 would need token 24), shard 1 at 0, 6,
    // shard 2 at 0; then back to shard 0
    int shards[] = {0, 0, 0, 1, 1, 2};
    long offsets[] = {0, 6, 12, 0, 6, 0};
    for (int epoch = 0; epoch < 2; epoch++) {
        for (int b = 0; b < 6; b++) {
            CHECK(d.shard_index == shards[b] && d.shard_offset == offsets[b],
                  "epoch %d batch %d: position (%d, %ld), expected (%d, %ld)", epoch, b, d.shard_index,
                  d.shard_offset, shards[b], offsets[b]);
            dataloader_next_batch(&d);
            CHECK(batch_is(&d, shards[b], offsets[b]), "epoch %d batch %d: inputs/targets from shard %d at %ld",
                  epoch, b, shards[b], offsets[b]);
        }
    }
    CHECK(d.inputs[0] == 200 && d.targets[0] == 201 && d.targets[5] == 206, "last batch of shard 2 spelled out");

    // resuming: the position fields, handed back, give the same batches
    dataloader_set_position(&d, 1, 6);
    dataloader_next_batch(&d);
    CHECK(batch_is(&d, 1, 6) && d.shard_index == 2 && d.shard_offset == 0, "set_position(1, 6)");
    dataloader_set_position(&d, 0, 5);  // need not be a multiple of B*T
    dataloader_next_batch(&d);
    CHECK(batch_is(&d, 0, 5) && d.shard_offset == 11, "set_position(0, 5)");
    dataloader_reset(&d);
    dataloader_next_batch(&d);
    CHECK(batch_is(&d, 0, 0), "reset");
    dataloader_free(&d);

    char dir[256];
    CHECK(dataloader_first_dir(pattern, dir, sizeof(dir)) == 1 && strcmp(dir, harness_dir) == 0,
          "folder of the first shard: \"%s\"", dir);
    CHECK(dataloader_first_dir(tmpdir_path("nothing_*.bin"), dir, sizeof(dir)) == 0 && dir[0] == '\0',
          "no folder when nothing matches");
}

// Several processes read the one-process stream: with N processes, call b of rank r reads window
// b*N + r of the stream one process reads, and every rank's position after the call is that of
// window (b+1)*N. B=1, T=3 on the shards of 20, 14 and 7 tokens: one process's stream of an epoch
// is shard 0 at 0, 3, ..., 15 (18 would need token 21), shard 1 at 0, 3, 6, 9, shard 2 at 0, 3.
// Started there, shard 0 holds 6 windows, an even number; started at offset 2 it holds 5 (2, 5, ...,
// 14), so with 2 processes a call spans the end of shard 0; with 3, calls span shard ends anyway.
#define STREAM_CALLS 9
static void test_processes(void) {
    const char* pattern = tmpdir_path("good_*.bin");
    int epoch_shards[] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2};
    long epoch_offsets[] = {0, 3, 6, 9, 12, 15, 0, 3, 6, 9, 0, 3};
    long starts[][2] = {{0, 0}, {0, 2}, {1, 9}};
    for (int s = 0; s < 3; s++) {
        for (int processes = 2; processes <= 3; processes++) {
            // the stream one process reads from this start: (shard, offset) of each window, and
            // the position after it
            int n = STREAM_CALLS * processes;
            int shard[3 * STREAM_CALLS + 1];
            long offset[3 * STREAM_CALLS + 1];
            DataLoader one;
            dataloader_init(&one, pattern, 1, 3, VOCAB, 0, 1);
            dataloader_set_position(&one, (int)starts[s][0], starts[s][1]);
            int bad = 0;
            for (int w = 0; w < n; w++) {
                shard[w] = one.shard_index;
                offset[w] = one.shard_offset;
                dataloader_next_batch(&one);
                if (!batch_is(&one, shard[w], offset[w])) { bad++; }
            }
            shard[n] = one.shard_index;
            offset[n] = one.shard_offset;
            dataloader_free(&one);
            if (s == 0) {  // the unseeded stream, spelled out above
                for (int w = 0; w < n; w++) {
                    if (shard[w] != epoch_shards[w % 12] || offset[w] != epoch_offsets[w % 12]) { bad++; }
                }
            }
            CHECK(bad == 0, "start (%ld, %ld): one process reads %d windows of the stream (%d bad)", starts[s][0],
                  starts[s][1], n, bad);
            for (int rank = 0; rank < processes; rank++) {
                DataLoader d;
                dataloader_init(&d, pattern, 1, 3, VOCAB, rank, processes);
                dataloader_set_position(&d, (int)starts[s][0], starts[s][1]);
                bad = 0;
                for (int b = 0; b < STREAM_CALLS; b++) {
                    int w = b * processes + rank, next = (b + 1) * processes;
                    dataloader_next_batch(&d);
                    if (!batch_is(&d, shard[w], offset[w])) { bad++; }
                    if (d.shard_index != shard[next] || d.shard_offset != offset[next]) { bad++; }
                }
                CHECK(bad == 0, "start (%ld, %ld), %d processes: rank %d reads windows %d, %d, ... of the stream and "
                      "ends each call where the others do (%d bad)", starts[s][0], starts[s][1], processes, rank, rank,
                      rank + processes, bad);
                dataloader_free(&d);
            }
        }
    }
    // spelled out: from shard 0 at 14, 2 processes; one process reads (0, 14) then (1, 0): the
    // first call's two windows lie in two shards, rank 1 reads tokens 0..3 of shard 1
    for (int rank = 0; rank < 2; rank++) {
        DataLoader d;
        dataloader_init(&d, pattern, 1, 3, VOCAB, rank, 2);
        dataloader_set_position(&d, 0, 14);
        dataloader_next_batch(&d);
        CHECK(rank == 0 ? d.inputs[0] == 14 && d.targets[2] == 17 : d.inputs[0] == 100 && d.targets[2] == 103,
              "2 processes from (0, 14): rank %d's batch spelled out", rank);
        CHECK(d.shard_index == 1 && d.shard_offset == 3, "2 processes from (0, 14): rank %d then at (1, 3)", rank);
        dataloader_free(&d);
    }
}

// a seeded start (the trainers' -S): a position that fits, the same for the same seed, its first
// batch read from there, and many different positions over the seeds (shards of 20, 14, 7 tokens
// with B=2, T=3 have 14 + 8 + 1 = 23 positions where a batch fits); the same position for every
// rank of 2 and of 3 processes (`again` plays them all)
static void test_seeded_start(void) {
    DataLoader d, again;
    dataloader_init(&d, tmpdir_path("good_*.bin"), 2, 3, VOCAB, 0, 1);
    int seen[3][20] = {{0}};
    int distinct = 0, bad = 0;
    for (int processes = 1; processes <= 3; processes++) {
        for (int rank = 0; rank < processes; rank++) {
            dataloader_init(&again, tmpdir_path("good_*.bin"), 2, 3, VOCAB, rank, processes);
            for (uint64_t seed = 1; seed <= 200; seed++) {
                dataloader_start_at_seed(&d, seed);
                dataloader_start_at_seed(&again, seed);
                int shard = d.shard_index;
                long offset = d.shard_offset;
                if (shard != again.shard_index || offset != again.shard_offset || !dataloader_fits(&d, shard, offset)) {
                    bad++;
                }
                if (!seen[shard][offset]++) { distinct++; }
                dataloader_next_batch(&d);
                if (!batch_is(&d, shard, offset)) { bad++; }
            }
            dataloader_free(&again);
        }
    }
    CHECK(bad == 0, "200 seeds: the same position for 1, 2 and 3 processes, one that fits, and the first batch from "
          "there (%d bad)", bad);
    CHECK(distinct >= 20, "200 seeds start at %d of the 23 positions (at least 20)", distinct);
    CHECK(seen[0][0] < 6 * 200, "a seeded start is not always the unseeded one");
    dataloader_free(&d);
}

// ----------------------------------------------------------------------------
// bad input: each must end the program with one error line

typedef struct {
    const char* pattern;
    int B, T, rank, processes, batches;
} Run;

static void run_loader(void* arg) {
    const Run* r = (const Run*)arg;
    DataLoader d;
    dataloader_init(&d, r->pattern, r->B, r->T, VOCAB, r->rank, r->processes);
    for (int i = 0; i < r->batches; i++) { dataloader_next_batch(&d); }
    dataloader_free(&d);
}

static void resume_at(void* arg) {
    const long* where = (const long*)arg;
    DataLoader d;
    dataloader_init(&d, tmpdir_path("good_*.bin"), 2, 3, VOCAB, 0, 1);
    dataloader_set_position(&d, (int)where[0], where[1]);
    dataloader_free(&d);
}

// writes one shard named <name>.bin and checks that loading it fails, naming the file
static void expect_bad_shard(const char* what, const char* name, ShardSpec spec, const char* needle) {
    char file[128];
    snprintf(file, sizeof(file), "%s.bin", name);
    const char* path = tmpdir_path(file);
    write_shard(path, 0, spec);
    Run r = {path, 2, 3, 0, 1, 0};
    expect_fatal(what, run_loader, &r, path, needle, (const char*)NULL);
}

static void test_bad_input(void) {
    ShardSpec s = shard_spec(20);
    s.magic = 20240328;
    expect_bad_shard("wrong magic", "magic", s, "not a token shard");
    s = shard_spec(20);
    s.version = 2;
    expect_bad_shard("wrong version", "version", s, "version 2");
    s = shard_spec(20);
    s.cut = 10;
    expect_bad_shard("truncated", "truncated", s, "truncated");
    s = shard_spec(20);
    s.cut = 2 * 20 + 1000;
    expect_bad_shard("truncated header", "short_header", s, "truncated");
    s = shard_spec(20);
    s.trailing = 2;
    expect_bad_shard("trailing data", "trailing", s, "trailing data");
    s = shard_spec(20);
    s.header_count = -5;
    expect_bad_shard("negative count", "negative", s, "negative token count");
    expect_bad_shard("empty shard", "empty", shard_spec(0), "empty shard");
    expect_bad_shard("too short for B*T+1", "short", shard_spec(6), "only 6 tokens, a batch needs B*T + 1 = 2*3 + 1 = 7");
    s = shard_spec(20);
    s.bad_at = 13;
    expect_bad_shard("token id >= vocab", "bad_token", s, "token 13 has id 1000");

    Run none = {tmpdir_path("nothing_*.bin"), 2, 3, 0, 1, 0};
    expect_fatal("no file matches", run_loader, &none, "no file matches", none.pattern, (const char*)NULL);

    // one window of B*T+1 = 7 tokens is all a shard needs, for any number of processes (good_002.bin
    // has 7): 3 processes read through it, 12 calls of 3 windows (6 epochs of 6 windows)
    for (int r = 0; r < 3; r++) {
        Run three = {tmpdir_path("good_*.bin"), 2, 3, r, 3, 12};
        char what[80];
        snprintf(what, sizeof(what), "shards of one window, rank %d of 3 processes", r);
        expect_ok(what, run_loader, &three);
    }
    Run rank = {tmpdir_path("good_*.bin"), 2, 3, 2, 2, 0};
    expect_fatal("rank outside 0..processes-1", run_loader, &rank, "process rank 2", (const char*)NULL);

    // a damaged header in the 8th shard is found at init, before any batch
    for (int i = 0; i < 8; i++) {
        char name[64];
        snprintf(name, sizeof(name), "many_%03d.bin", i);
        ShardSpec m = shard_spec(20);
        if (i == 7) { m.magic = 1234; }
        write_shard(tmpdir_path(name), 0, m);
    }
    Run many = {tmpdir_path("many_*.bin"), 2, 3, 0, 1, 0};
    expect_fatal("bad 8th shard, found at init", run_loader, &many, "many_007.bin", "magic number 1234",
                 (const char*)NULL);

    // a bad token id in the 2nd shard: init succeeds, the error comes when the shard is loaded
    write_shard(tmpdir_path("late_000.bin"), 0, shard_spec(20));
    s = shard_spec(20);
    s.bad_at = 19;
    write_shard(tmpdir_path("late_001.bin"), 1, s);
    Run late = {tmpdir_path("late_*.bin"), 2, 3, 0, 1, 0};
    expect_ok("bad token in shard 2: init is fine", run_loader, &late);
    late.batches = 2;
    expect_ok("bad token in shard 2: first 2 batches are fine", run_loader, &late);
    late.batches = 3;
    expect_fatal("bad token in shard 2, when loaded", run_loader, &late, "late_001.bin", "token 19 has id 1000",
                 (const char*)NULL);

    // positions to resume from that cannot be right
    long where[][2] = {{3, 0}, {-1, 0}, {0, -1}, {0, 14}, {1, 8}};
    const char* needles[] = {"shard index 3", "shard index -1", "offset -1", "offset 14", "offset 8"};
    for (int i = 0; i < 5; i++) {
        char what[64];
        snprintf(what, sizeof(what), "set_position(%ld, %ld)", where[i][0], where[i][1]);
        expect_fatal(what, resume_at, where[i], needles[i], (const char*)NULL);
    }
}

int main(void) {
    tmpdir_create("test_dataloader");
    test_batches();
    test_processes();
    test_seeded_start();
    printf("bad shards and arguments (each must be one error line):\n");
    test_bad_input();
    return harness_finish("test_dataloader");
}
