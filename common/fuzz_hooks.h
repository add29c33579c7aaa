/*
common/fuzz_hooks.h: what a fuzz build (-DFUZZING, dev/fuzz/) changes in common/utils.h. Nothing
else includes it, and in a normal build it is never read.

A fuzz harness feeds thousands of inputs to a reader in one process, and most of them are bad:
the reader must reject them with fatal(), which normally ends the process. In a fuzz build,
once a harness has armed fuzz_fatal_jump (setjmp, see FUZZ_TRY in dev/fuzz/fuzz.h):
  - fatal() formats its message into fuzz_fatal_message and jumps back to the harness
    (fuzz_catch_fatal) instead of exiting;
  - the files fopen_check opened are tracked (fuzz_track_file; fclose is redirected to
    fuzz_fclose), so that the harness can close the ones an error left open (fuzz_close_files).
*/
#ifndef COMMON_FUZZ_HOOKS_H
#define COMMON_FUZZ_HOOKS_H

#ifndef FUZZING
#error "common/fuzz_hooks.h is for fuzz builds only (-DFUZZING)"
#endif

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static jmp_buf fuzz_fatal_jump;
static int fuzz_fatal_armed = 0;
static char fuzz_fatal_message[2048];
static FILE* fuzz_open_files[16];

// called by fatal() first: returns only when no harness is armed (then fatal() exits as usual)
static inline void fuzz_catch_fatal(const char* fmt, va_list args) {
    if (fuzz_fatal_armed) {
        vsnprintf(fuzz_fatal_message, sizeof(fuzz_fatal_message), fmt, args);
        longjmp(fuzz_fatal_jump, 1);
    }
}

static inline void fuzz_track_file(FILE* f) {
    for (int i = 0; i < 16; i++) { if (fuzz_open_files[i] == NULL) { fuzz_open_files[i] = f; return; } }
    abort();  // a reader holds more than 16 files open at once: a leak worth a crash
}

static inline int fuzz_fclose(FILE* f) {
    for (int i = 0; i < 16; i++) { if (fuzz_open_files[i] == f) { fuzz_open_files[i] = NULL; } }
    return fclose(f);
}

static inline void fuzz_close_files(void) {
    for (int i = 0; i < 16; i++) { if (fuzz_open_files[i]) { fclose(fuzz_open_files[i]); fuzz_open_files[i] = NULL; } }
}

// every fclose after this point (the readers in common/ and train_gpt2.c) goes through the tracker
#define fclose(f) fuzz_fclose(f)

#endif // COMMON_FUZZ_HOOKS_H
