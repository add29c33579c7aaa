/*
common/dataloader.h: training and validation batches from token shards.

A shard (written by the scripts in dev/data/) is

    header   256 int32: magic 20240520, version 1, number of tokens N
    body     N uint16 token ids

and a dataset is a list of shards given as a glob pattern ("data/x/x_train_*.bin"), taken in
sorted name order. A language model learns to predict token t+1 from tokens 0..t, so a batch is
B rows of T+1 consecutive tokens: inputs are the first T of each row, targets the last T (the same
tokens shifted by one). Rows are consecutive in the shard, so B*T+1 tokens make one batch:

    shard:    ... a b c d e f g ...       (B=2, T=3: the 7 tokens a..g)
    inputs:   a b c | d e f
    targets:  b c d | e f g

The stream. Batches are windows of B*T+1 tokens read in order: at token offsets 0, B*T, 2*B*T, ...
of a shard for as long as a whole window fits; then the stream moves on to the start of the next
shard, and after the last shard back to the first (a new epoch). The stream depends on B, T, the
shards and the start (below) only, never on the number of processes.

Several processes (GPUs, ranks). Each call of dataloader_next_batch takes the next num_processes
windows of the stream and process r reads the r-th of them. So N processes that each make A calls
read exactly the A*N windows that one process reads in A*N calls, also where the stream crosses the
end of a shard or wraps around:

    stream:       w0  w1  w2 | w3  w4  w5 ...       (| : the first shard ends after w2)
    1 process:    w0, w1, w2, w3, w4, w5, ...        one window per call
    2 processes:  rank 0 reads w0, w2, w4, ...       each call takes two windows of the stream:
                  rank 1 reads w1, w3, w5, ...       the second call, w2 and w3, spans two shards

Order. By default the stream starts with the first window of the first shard. A seed
(dataloader_start_at_seed, the trainers' -S) moves the start to a shard and a token offset chosen
by a hash of the seed, from the shard sizes, B and T only (so every number of processes starts at
the same window); from there the stream goes on as above. So two seeds see the same tokens, but
cut into other rows and in another order (each epoch starts where the previous one left off in its
rotation), which is what a seed of the data order needs for comparing runs.

Position: shard_index and shard_offset (plain fields) say where the NEXT window of the stream
starts (the same on every process after each call); they always point at a window that fits.
Saving them and calling dataloader_set_position later, with any number of processes, resumes the
exact sequence of windows.

Checks: at init every shard's header is read and checked (magic, version, token count against
the file size, at least one window of B*T+1 tokens), so a damaged shard 7 is reported at start
and not hours into training; the token ids of a shard are checked (< vocab_size) when it is
loaded. Every problem ends the program with one "error: ..." line naming the file.

Memory is allocated once, at init: a buffer for the largest shard, plus the inputs and targets of
one batch. A shard is read into the buffer whole (and its ids checked) as soon as the stream moves
to it, i.e. right after the window that used up the previous shard (every process reads every
shard the stream passes, also one whose windows all go to other processes).

Functions are `static inline` only so that a program using a few of them gets no warnings about
the others being unused.
*/
#ifndef COMMON_DATALOADER_H
#define COMMON_DATALOADER_H

#include <glob.h>

#include "utils.h"
#include "rng.h"

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256

typedef struct {
    // what we were asked for
    int B, T, vocab_size, process_rank, num_processes;
    // the shards, in sorted order
    int num_shards;
    char** shard_paths;
    long* shard_tokens;         // number of tokens in each shard (from its checked header)
    // position of the next batch: shard and token offset of the start of its chunk
    int shard_index;
    long shard_offset;
    // memory
    int loaded_shard;           // which shard `tokens` holds (-1: none yet)
    uint16_t* tokens;           // the loaded shard, sized for the largest one
    int* inputs;                // B*T
    int* targets;               // B*T
} DataLoader;

// tokens of one window of the stream (one process's batch, without its last target token)
static inline long dataloader_window(const DataLoader* d) {
    return (long)d->B * d->T;
}

// read and check the header of a shard; returns its number of tokens
static inline long dataloader_read_header(const char* path, FILE* f) {
    long size = file_size_check(f, path);
    long header_bytes = SHARD_HEADER_INTS * (long)sizeof(int32_t);
    if (size < header_bytes) {
        fatal("%s: truncated shard (%ld bytes; the header alone is %ld)", path, size, header_bytes);
    }
    int32_t header[SHARD_HEADER_INTS];
    fread_check(header, sizeof(int32_t), SHARD_HEADER_INTS, f, path);
    if (header[0] != SHARD_MAGIC) {
        fatal("%s: not a token shard (magic number %d, expected %d)", path, header[0], SHARD_MAGIC);
    }
    if (header[1] != SHARD_VERSION) {
        fatal("%s: token shard version %d, expected %d (regenerate it with dev/data/*.py)",
              path, header[1], SHARD_VERSION);
    }
    long n = header[2];
    if (n < 0) { fatal("%s: negative token count %ld in the header", path, n); }
    long expected = header_bytes + n * (long)sizeof(uint16_t);
    if (size < expected) {
        fatal("%s: truncated shard (header says %ld tokens = %ld bytes, the file has %ld)", path, n, expected, size);
    }
    if (size > expected) {
        fatal("%s: %ld bytes of trailing data (header says %ld tokens = %ld bytes, the file has %ld)",
              path, size - expected, n, expected, size);
    }
    if (n == 0) { fatal("%s: empty shard (0 tokens)", path); }
    return n;
}

// bring shard i into memory (if it is not there yet) and check its token ids
static inline void dataloader_load_shard(DataLoader* d, int i) {
    if (d->loaded_shard == i) { return; }
    const char* path = d->shard_paths[i];
    FILE* f = fopen_check(path, "rb");
    long n = dataloader_read_header(path, f);
    if (n != d->shard_tokens[i]) {
        fatal("%s: changed since the start (%ld tokens then, %ld now)", path, d->shard_tokens[i], n);
    }
    fread_check(d->tokens, sizeof(uint16_t), (size_t)n, f, path);
    fclose(f);
    d->loaded_shard = -1;
    for (long k = 0; k < n; k++) {
        if (d->tokens[k] >= d->vocab_size) {
            fatal("%s: token %ld has id %d, outside the vocabulary of %d tokens", path, k, d->tokens[k], d->vocab_size);
        }
    }
    d->loaded_shard = i;
}

// does a window starting at this offset of shard i fit (with the one extra target token)?
static inline int dataloader_fits(const DataLoader* d, int i, long offset) {
    return offset >= 0 && offset + dataloader_window(d) + 1 <= d->shard_tokens[i];
}

static inline void dataloader_init(DataLoader* d, const char* glob_pattern, int B, int T, int vocab_size,
                                   int process_rank, int num_processes) {
    memset(d, 0, sizeof(*d));
    if (B <= 0 || T <= 0) { fatal("data loader: batch size B=%d and sequence length T=%d must be positive", B, T); }
    if (vocab_size <= 0) { fatal("data loader: vocabulary size %d must be positive", vocab_size); }
    if (num_processes <= 0) { fatal("data loader: the number of processes %d must be positive", num_processes); }
    if (process_rank < 0 || process_rank >= num_processes) {
        fatal("data loader: process rank %d is not in 0..%d", process_rank, num_processes - 1);
    }
    if ((long)num_processes * B * T >= INT32_MAX) {
        fatal("data loader: %d processes x B=%d x T=%d tokens per step is too many", num_processes, B, T);
    }
    d->B = B;
    d->T = T;
    d->vocab_size = vocab_size;
    d->process_rank = process_rank;
    d->num_processes = num_processes;

    glob_t g;
    int rc = glob(glob_pattern, 0, NULL, &g);  // glob sorts the names
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) { fatal("no file matches '%s'", glob_pattern); }
    if (rc != 0) { fatal("cannot expand the pattern %s (glob error %d)", glob_pattern, rc); }
    d->num_shards = (int)g.gl_pathc;
    d->shard_paths = (char**)malloc_check(g.gl_pathc * sizeof(char*), "shard paths");
    d->shard_tokens = (long*)malloc_check(g.gl_pathc * sizeof(long), "shard sizes");
    for (int i = 0; i < d->num_shards; i++) {
        size_t length = strlen(g.gl_pathv[i]);
        d->shard_paths[i] = (char*)malloc_check(length + 1, "shard path");
        memcpy(d->shard_paths[i], g.gl_pathv[i], length + 1);
    }
    globfree(&g);  // before any check of the shards can fail
    long largest = 0;
    for (int i = 0; i < d->num_shards; i++) {
        FILE* f = fopen_check(d->shard_paths[i], "rb");
        long n = dataloader_read_header(d->shard_paths[i], f);
        fclose(f);
        if (n < dataloader_window(d) + 1) {
            fatal("%s: only %ld tokens, a batch needs B*T + 1 = %d*%d + 1 = %ld", d->shard_paths[i], n, B, T,
                  dataloader_window(d) + 1);
        }
        d->shard_tokens[i] = n;
        if (n > largest) { largest = n; }
    }

    d->tokens = (uint16_t*)malloc_check((size_t)largest * sizeof(uint16_t), "shard tokens");
    d->inputs = (int*)malloc_check((size_t)B * T * sizeof(int), "input tokens");
    d->targets = (int*)malloc_check((size_t)B * T * sizeof(int), "target tokens");
    d->loaded_shard = -1;
    d->shard_index = 0;
    d->shard_offset = 0;
    dataloader_load_shard(d, 0);
}

// Move the stream's next window to (shard index, token offset). The window must fit in the shard: a
// position saved from the fields of a loader with the same B and T always does.
static inline void dataloader_set_position(DataLoader* d, int shard_index, long shard_offset) {
    if (shard_index < 0 || shard_index >= d->num_shards) {
        fatal("data loader: shard index %d to resume from is not in 0..%d", shard_index, d->num_shards - 1);
    }
    if (!dataloader_fits(d, shard_index, shard_offset)) {
        fatal("%s: offset %ld to resume from is not in 0..%ld (the shard has %ld tokens, a batch takes %ld + 1)",
              d->shard_paths[shard_index], shard_offset, d->shard_tokens[shard_index] - dataloader_window(d) - 1,
              d->shard_tokens[shard_index], dataloader_window(d));
    }
    dataloader_load_shard(d, shard_index);
    d->shard_index = shard_index;
    d->shard_offset = shard_offset;
}

// starts the stream at a position chosen by the seed: shard hash(seed) mod shards, then a token
// offset uniform over the offsets where a window fits (any offset, not only multiples of B*T); the
// same position for any number of processes
static inline void dataloader_start_at_seed(DataLoader* d, uint64_t seed) {
    uint64_t h = random_mix64(seed);
    int shard = (int)(h % (uint64_t)d->num_shards);
    uint64_t offsets = (uint64_t)(d->shard_tokens[shard] - dataloader_window(d));  // 0..tokens-window-1 fit
    dataloader_set_position(d, shard, (long)(random_mix64(h) % offsets));
}

// windows in one pass over all shards (each holds those that fit whole, with their extra target)
static inline long dataloader_windows(const DataLoader* d) {
    long windows = 0;
    for (int i = 0; i < d->num_shards; i++) { windows += (d->shard_tokens[i] - 1) / dataloader_window(d); }
    return windows;
}

static inline void dataloader_reset(DataLoader* d) {
    dataloader_set_position(d, 0, 0);
}

// the stream moves past its next window
static inline void dataloader_advance(DataLoader* d) {
    d->shard_offset += dataloader_window(d);
    if (!dataloader_fits(d, d->shard_index, d->shard_offset)) {  // on to the next shard, or back to the first
        d->shard_index = (d->shard_index + 1) % d->num_shards;
        d->shard_offset = 0;
        dataloader_load_shard(d, d->shard_index);
    }
}

// fill inputs and targets with this process's batch: of the next num_processes windows of the
// stream, the one numbered process_rank; the stream moves past all of them
static inline void dataloader_next_batch(DataLoader* d) {
    for (int k = 0; k < d->num_processes; k++) {
        if (k == d->process_rank) {  // copied before the stream can move on to (and load) another shard
            const uint16_t* row = d->tokens + d->shard_offset;
            int n = d->B * d->T;
            for (int i = 0; i < n; i++) {
                d->inputs[i] = row[i];
                d->targets[i] = row[i + 1];
            }
        }
        dataloader_advance(d);
    }
}

static inline void dataloader_free(DataLoader* d) {
    for (int i = 0; i < d->num_shards; i++) { free(d->shard_paths[i]); }
    free(d->shard_paths);
    free(d->shard_tokens);
    free(d->tokens);
    free(d->inputs);
    free(d->targets);
    memset(d, 0, sizeof(*d));
}

// The folder of the first file matching a glob pattern ("." for a bare name), e.g. to find the
// tokenizer.bin written next to the shards. Returns 0 (and sets dir to "") when nothing matches.
static inline int dataloader_first_dir(const char* glob_pattern, char* dir, size_t cap) {
    if (cap > 0) { dir[0] = '\0'; }
    glob_t g;
    int found = glob(glob_pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    if (found) {
        const char* first = g.gl_pathv[0];
        const char* slash = strrchr(first, '/');
        if (slash == NULL) {
            snprintf(dir, cap, ".");
        } else if (slash == first) {
            snprintf(dir, cap, "/");
        } else {
            snprintf(dir, cap, "%.*s", (int)(slash - first), first);
        }
    }
    globfree(&g);
    return found;
}

#endif // COMMON_DATALOADER_H
