/*
common/utils.h: the few helpers every program in this project shares.

Error policy: bad input (a missing file, a truncated file, a wrong magic number, an absurd flag)
ends the program with ONE line on stderr, "error: ...", and exit status 1. Nothing is allowed to
crash, and nothing already on disk is half-overwritten: files we produce are written to a
temporary name, flushed to disk and then renamed over the old one (atomic_open / atomic_commit).

These headers are included both by the C trainer (gcc) and by the CUDA trainer (nvcc, C++), so
they stick to the common subset of C and C++: explicit casts from void*, no VLAs in signatures.
*/
#ifndef COMMON_UTILS_H
#define COMMON_UTILS_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// ----------------------------------------------------------------------------
// fatal errors: one line, non-zero exit

#ifdef FUZZING
#include "fuzz_hooks.h"  // fuzz builds only (dev/fuzz/): fatal() returns to the harness instead of exiting
#endif

// the rank of a process of a multi-process job (common/dist.h), named in its errors; -1 otherwise.
// An error that every rank meets alike (a flag, a damaged shard) is reported once: rank 0 reports
// it at once and ends the job; the other ranks wait FATAL_RANK_DELAY seconds before reporting
// theirs, and mpirun has ended them by then unless the error was theirs alone.
static int fatal_rank = -1;
static volatile int fatal_started = 0;  // fatal() is under way (common/dist.h's SIGTERM handler reads it)
#define FATAL_RANK_DELAY 3

static inline void fatal(const char* fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static inline void fatal(const char* fmt, ...) {
#ifdef FUZZING
    va_list fuzz_args;
    va_start(fuzz_args, fmt);
    fuzz_catch_fatal(fmt, fuzz_args);  // does not return while a fuzz harness is armed
    va_end(fuzz_args);
#endif
    fatal_started = 1;
    fflush(stdout);
    if (fatal_rank > 0) { sleep(FATAL_RANK_DELAY); }
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "error: ");
    if (fatal_rank >= 0) { fprintf(stderr, "rank %d: ", fatal_rank); }
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
    va_end(args);
    exit(1);
}

// ----------------------------------------------------------------------------
// checked allocation

static inline void* malloc_check(size_t size, const char* what) {
    void* ptr = malloc(size > 0 ? size : 1);
    if (ptr == NULL) { fatal("out of memory allocating %zu bytes for %s", size, what); }
    return ptr;
}

static inline void* calloc_check(size_t count, size_t size, const char* what) {
    void* ptr = calloc(count > 0 ? count : 1, size > 0 ? size : 1);
    if (ptr == NULL) { fatal("out of memory allocating %zu x %zu bytes for %s", count, size, what); }
    return ptr;
}

// ----------------------------------------------------------------------------
// checked file reading: every failure names the file

static inline FILE* fopen_check(const char* path, const char* mode) {
    FILE* f = fopen(path, mode);
    if (f == NULL) { fatal("cannot open %s: %s", path, strerror(errno)); }
    struct stat st;  // a folder opens for reading, and then fails with a puzzling "seek failed"
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) { fclose(f); fatal("cannot open %s: it is a folder", path); }
#ifdef FUZZING
    fuzz_track_file(f);
#endif
    return f;
}

static inline void fread_check(void* ptr, size_t size, size_t count, FILE* f, const char* path) {
    size_t got = fread(ptr, size, count, f);
    if (got != count) {
        if (ferror(f)) { fatal("%s: read failed: %s", path, strerror(errno)); }
        fatal("%s: file is truncated (expected %zu more bytes)", path, (count - got) * size);
    }
}

static inline void fseek_check(FILE* f, long offset, int whence, const char* path) {
    if (fseek(f, offset, whence) != 0) { fatal("%s: seek failed: %s", path, strerror(errno)); }
}

// size of an open file in bytes (leaves the position at the start)
static inline long file_size_check(FILE* f, const char* path) {
    fseek_check(f, 0, SEEK_END, path);
    long size = ftell(f);
    if (size < 0) { fatal("%s: cannot determine file size", path); }
    fseek_check(f, 0, SEEK_SET, path);
    return size;
}

static inline int file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// ----------------------------------------------------------------------------
// atomic file writing: write to "<path>.tmp", fsync, then rename over <path>.
// A crash or a full disk at any point leaves the previous <path> untouched.

typedef struct {
    FILE* f;
    char path[1024];
    char tmp_path[1040];
} AtomicFile;

static inline void atomic_open(AtomicFile* af, const char* path) {
    if (strlen(path) >= sizeof(af->path)) { fatal("output path too long: %s", path); }
    strcpy(af->path, path);
    snprintf(af->tmp_path, sizeof(af->tmp_path), "%s.tmp", af->path);
    af->f = fopen(af->tmp_path, "wb");
    if (af->f == NULL) { fatal("cannot write %s: %s", af->tmp_path, strerror(errno)); }
}

// a failed write: the temporary file goes, <path> stays as it was (or absent), one error line
static inline void atomic_fail(AtomicFile* af, int err) __attribute__((noreturn));
static inline void atomic_fail(AtomicFile* af, int err) {
    remove(af->tmp_path);
    if (file_exists(af->path)) {
        fatal("writing %s failed (%s); the previous %s is intact", af->tmp_path, strerror(err), af->path);
    }
    fatal("writing %s failed (%s); %s was not written", af->tmp_path, strerror(err), af->path);
}

// on failure the temporary file is removed and the previous <path> is left as it was
static inline void atomic_write(AtomicFile* af, const void* ptr, size_t size, size_t count) {
    if (count > 0 && fwrite(ptr, size, count, af->f) != count) {
        int err = errno;
        fclose(af->f);
        atomic_fail(af, err);
    }
}

static inline void atomic_commit(AtomicFile* af) {
    int err = 0;
    if (fflush(af->f) != 0 || fsync(fileno(af->f)) != 0) { err = errno; }
    if (fclose(af->f) != 0 && err == 0) { err = errno; }
    if (err != 0) { atomic_fail(af, err); }
    if (rename(af->tmp_path, af->path) != 0) {
        err = errno;
        remove(af->tmp_path);
        fatal("cannot rename %s to %s: %s", af->tmp_path, af->path, strerror(err));
    }
    // make the rename itself durable by syncing the directory that holds the file
    char dir[1024];
    strcpy(dir, af->path);
    char* slash = strrchr(dir, '/');
    if (slash == NULL) { strcpy(dir, "."); } else if (slash == dir) { dir[1] = '\0'; } else { *slash = '\0'; }
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) { fsync(fd); close(fd); }
}

// ----------------------------------------------------------------------------
// directories

// Checks that `dir` is, or can become, a folder we can write into: each part of the path that
// exists must be a folder. create 1: makes the missing ones (as mkdir -p); create 0: creates
// nothing, and the deepest part that exists must be writable where the rest is missing.
static inline void writable_dir_check(const char* dir, int create) {
    char path[1024];
    if (strlen(dir) >= sizeof(path)) { fatal("output folder path too long: %s", dir); }
    strcpy(path, dir);
    for (char* p = path + 1;; p++) {  // each prefix that ends before a '/', then the whole path
        if (*p != '/' && *p != '\0') { continue; }
        char c = *p;
        *p = '\0';
        struct stat st;
        if (stat(path, &st) != 0) {
            if (!create) {  // missing from here on: its parent must take a new folder
                char* slash = strrchr(path, '/');
                if (slash == path) { slash[1] = '\0'; } else if (slash) { *slash = '\0'; } else { strcpy(path, "."); }
                if (access(path, W_OK | X_OK) != 0) { fatal("cannot create output folder %s: %s", dir, strerror(errno)); }
                return;
            }
            if (mkdir(path, 0755) != 0 && errno != EEXIST) { fatal("cannot create output folder %s: %s", dir, strerror(errno)); }
        } else if (!S_ISDIR(st.st_mode)) {
            if (c == '\0') { fatal("output folder %s exists and is not a folder", dir); }
            fatal("cannot create output folder %s: %s is not a folder", dir, path);
        }
        *p = c;
        if (c == '\0') { break; }
    }
    if (access(dir, W_OK) != 0) { fatal("output folder %s is not writable", dir); }
}

// creates the folder and any missing parents (as mkdir -p), and checks that we can write into it
static inline void ensure_writable_dir(const char* dir) { writable_dir_check(dir, 1); }

#endif // COMMON_UTILS_H
