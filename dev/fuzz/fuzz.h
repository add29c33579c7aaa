/*
dev/fuzz/fuzz.h: what the five fuzz harnesses share. Build with -DFUZZING (dev/fuzz/run.sh does):
common/utils.h then includes common/fuzz_hooks.h, which makes fatal() jump back here instead of
exiting, so a rejected input is an ordinary outcome, and tracks the files the readers open so that
an error leaves none open.

The readers take a path, so each input is written to a per-process temporary file first (removed
again when the process exits normally).
FUZZ_TRY(body, cleanup) runs body; when it ends in fatal(), cleanup runs instead of the rest of body.
A fatal message must be one line (the project's error rule): a newline in it aborts (a finding).
Objects that body modifies and cleanup reads must be static (setjmp/longjmp rules).
*/
#ifndef DEV_FUZZ_FUZZ_H
#define DEV_FUZZ_FUZZ_H

#ifndef FUZZING
#error "build the fuzz harnesses with -DFUZZING (see dev/fuzz/run.sh)"
#endif

#include <stddef.h>
#include <stdint.h>
#include "common/utils.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

// writes data to "<dir>/fuzz_<name>_<pid>.bin" and returns that path; the folder is /dev/shm where
// there is one (a file system in memory: a file per input costs little there), else /tmp
static char fuzz_input_path[256];
static void fuzz_remove_input(void) { remove(fuzz_input_path); }

static const char* fuzz_input_file(const char* name, const uint8_t* data, size_t size) {
    char* path = fuzz_input_path;
    if (path[0] == '\0') {
        atexit(fuzz_remove_input);
        struct stat st;
        const char* dir = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(path, sizeof(fuzz_input_path), "%s/fuzz_%s_%d.bin", dir, name, (int)getpid());
    }
    FILE* f = fopen(path, "wb");
    if (f == NULL || (size > 0 && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
    return path;
}

static void fuzz_check_message(void) {
    if (strchr(fuzz_fatal_message, '\n') != NULL || fuzz_fatal_message[0] == '\0') {
        fprintf(stderr, "fatal message is not one non-empty line: [%s]\n", fuzz_fatal_message);
        abort();
    }
}

#define FUZZ_TRY(body, cleanup)                  \
    do {                                         \
        if (setjmp(fuzz_fatal_jump) == 0) {      \
            fuzz_fatal_armed = 1;                \
            body;                                \
            fuzz_fatal_armed = 0;                \
        } else {                                 \
            fuzz_fatal_armed = 0;                \
            fuzz_check_message();                \
            cleanup;                             \
        }                                        \
        fuzz_close_files();                      \
    } while (0)

// little-endian reads of the first bytes of an input (0 past its end)
static uint32_t fuzz_u16(const uint8_t* data, size_t size, size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 2; i++) { v |= (uint32_t)(at + i < size ? data[at + i] : 0) << (8 * i); }
    return v;
}

#endif // DEV_FUZZ_FUZZ_H
