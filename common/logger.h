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
    // one write(2) per line, no stdio buffer: when the disk is full, the part of the line that got
    // out is cut off again, so the log never ends in half a line
    char line[1024];
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(line, sizeof(line) - 1, fmt, args);
    va_end(args);
    if (n < 0) { n = 0; }
    if (n > (int)sizeof(line) - 2) { n = (int)sizeof(line) - 2; }
    line[n++] = '\n';
    int fd = fileno(lg->f);
    off_t start = lseek(fd, 0, SEEK_END);
    for (int done = 0; done < n;) {
        ssize_t w = write(fd, line + done, (size_t)(n - done));
        if (w < 0 && errno == EINTR) { continue; }
        if (w <= 0) {
            int err = w < 0 ? errno : EIO;
            if (start >= 0 && ftruncate(fd, start) != 0) { /* nothing more we can do */ }
            fatal("writing the log failed (%s); its earlier lines are intact", strerror(err));
        }
        done += (int)w;
    }
}

static inline void logger_free(Logger* lg) {
    if (lg->f) { fclose(lg->f); }
    lg->f = NULL;
}

#endif // COMMON_LOGGER_H
