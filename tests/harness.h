/*
tests/harness.h: the little the C tests need, and nothing more.

  CHECK(condition, printf-style message)   counts and reports a failure, carries on
  tmpdir_create() / tmpdir_path()          a fresh folder under /tmp for the files a test writes
  write_bytes(path, data, n)               put exact bytes in a file
  expect_fatal(what, fn, arg, needle...)   run fn(arg) in a child process (fork) and check that it
                                           ends the way fatal() does: exit status 1 and exactly one
                                           line "error: ..." on stderr, containing every needle
  expect_ok(what, fn, arg)                 run fn(arg) in a child and check it exits 0, stderr empty
  harness_finish(name)                     removes the folder, prints a summary, gives the exit status

Include it FIRST: it asks for the POSIX functions (fork, mkdtemp, ...) before any system header.
*/
#ifndef TESTS_HARNESS_H
#define TESTS_HARNESS_H

#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int harness_checks = 0;
static int harness_failures = 0;

#define CHECK(cond, ...)                                                        \
    do {                                                                        \
        harness_checks++;                                                       \
        if (!(cond)) {                                                          \
            harness_failures++;                                                 \
            fprintf(stdout, "FAIL (%s:%d): ", __FILE__, __LINE__);              \
            fprintf(stdout, __VA_ARGS__);                                       \
            fprintf(stdout, "\n");                                              \
        }                                                                       \
    } while (0)

// ----------------------------------------------------------------------------
// a temporary folder

static char harness_dir[256];

static void tmpdir_create(const char* prefix) {
    snprintf(harness_dir, sizeof(harness_dir), "/tmp/%s_XXXXXX", prefix);
    if (mkdtemp(harness_dir) == NULL) { perror("mkdtemp"); exit(2); }
}

// "<folder>/<name>" in a rotating set of buffers, so a few can be in use at once
static const char* tmpdir_path(const char* name) {
    static char buffers[8][512];
    static int next = 0;
    char* out = buffers[next];
    next = (next + 1) % 8;
    snprintf(out, 512, "%s/%s", harness_dir, name);
    return out;
}

static void tmpdir_remove(void) {
    DIR* dir = opendir(harness_dir);
    if (dir == NULL) { return; }
    struct dirent* entry;
    while ((entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) { continue; }
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", harness_dir, entry->d_name);
        if (remove(path) != 0) { rmdir(path); }
    }
    closedir(dir);
    rmdir(harness_dir);
}

static void write_bytes(const char* path, const void* data, size_t n) {
    FILE* f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, n, f) != n || fclose(f) != 0) { perror(path); exit(2); }
}

// ----------------------------------------------------------------------------
// running code that is supposed to fail (or not) in a child process

// runs fn(arg) in a child; returns its wait status and puts (up to cap-1 bytes of) its stderr in err
static int run_in_child(void (*fn)(void*), void* arg, char* err, size_t cap) {
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); exit(2); }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(2); }
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        if (freopen("/dev/null", "w", stdout) == NULL) { _exit(3); }
        fn(arg);
        fflush(NULL);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    char chunk[256];
    ssize_t got;
    while ((got = read(fds[0], chunk, sizeof(chunk))) > 0) {
        size_t copy = (size_t)got < cap - 1 - len ? (size_t)got : cap - 1 - len;
        memcpy(err + len, chunk, copy);
        len += copy;
    }
    err[len] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

// the needles are a NULL-terminated list of strings the error line must contain
static void expect_fatal(const char* what, void (*fn)(void*), void* arg, ...) {
    char err[4096];
    int status = run_in_child(fn, arg, err, sizeof(err));
    int exited_1 = WIFEXITED(status) && WEXITSTATUS(status) == 1;
    size_t len = strlen(err);
    char* newline = strchr(err, '\n');
    int one_line = len > 0 && newline == err + len - 1;
    CHECK(exited_1, "%s: expected exit status 1, got %s %d", what,
          WIFEXITED(status) ? "exit status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    CHECK(strncmp(err, "error: ", 7) == 0 && one_line, "%s: expected one line \"error: ...\", got \"%s\"", what, err);
    va_list needles;
    va_start(needles, arg);
    const char* needle;
    while ((needle = va_arg(needles, const char*)) != NULL) {
        CHECK(strstr(err, needle) != NULL, "%s: the error \"%.*s\" does not mention \"%s\"",
              what, (int)(one_line ? len - 1 : len), err, needle);
    }
    va_end(needles);
    printf("  %-34s -> %s%s", what, err, one_line ? "" : "\n");
}

static void expect_ok(const char* what, void (*fn)(void*), void* arg) {
    char err[4096];
    int status = run_in_child(fn, arg, err, sizeof(err));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && err[0] == '\0',
          "%s: expected success, got status %d and stderr \"%s\"", what, status, err);
}

static int harness_finish(const char* name) {
    tmpdir_remove();
    if (harness_failures > 0) {
        printf("%s: %d of %d checks FAILED\n", name, harness_failures, harness_checks);
        return 1;
    }
    printf("%s: all %d checks passed\n", name, harness_checks);
    return 0;
}

#endif // TESTS_HARNESS_H
