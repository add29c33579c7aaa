/*
common/logger.h: the run log. Every step line printed to the terminal also goes, as key=value
pairs that tools can parse (dev/plot.py), to <output folder>/main.log:
    step=12 train_loss=5.123456 norm=1.2345 lr=3.0000e-04 ms=812.34 tok_per_s=315
    step=20 val_loss=5.012345
Each line is flushed as it is written, so a crash loses nothing already logged. A resumed run
appends; a reader takes the last line written for each step.
*/
#ifndef COMMON_LOGGER_H
#define COMMON_LOGGER_H

#include "utils.h"

typedef struct {
    FILE* f;  // NULL when there is no output folder
} Logger;

static inline void logger_init(Logger* lg, const char* output_dir, int resume) {
    lg->f = NULL;
    if (output_dir == NULL || output_dir[0] == '\0') { return; }
    char path[1024];
    snprintf(path, sizeof(path), "%s/main.log", output_dir);
    lg->f = fopen(path, resume ? "a" : "w");
    if (lg->f == NULL) { fatal("cannot open log file %s: %s", path, strerror(errno)); }
}

static inline void logger_line(Logger* lg, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void logger_line(Logger* lg, const char* fmt, ...) {
    if (lg->f == NULL) { return; }
    va_list args;
    va_start(args, fmt);
    vfprintf(lg->f, fmt, args);
    va_end(args);
    fputc('\n', lg->f);
    if (fflush(lg->f) != 0) { fatal("writing the log failed: %s", strerror(errno)); }
}

static inline void logger_free(Logger* lg) {
    if (lg->f) { fclose(lg->f); }
    lg->f = NULL;
}

#endif // COMMON_LOGGER_H
