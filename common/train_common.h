/*
common/train_common.h: host-side pieces of the training loop that train_gpt2.c (CPU) and
train_gpt2.cu (GPU) share: a clock, the output-folder rules (resume, or refuse to overwrite a
run) and the handling of a step whose loss or gradient norm is not finite.
*/
#ifndef COMMON_TRAIN_COMMON_H
#define COMMON_TRAIN_COMMON_H

#include <strings.h>
#include <time.h>
#include <dirent.h>
#include "args.h"
#include "arithmetic.h"
#include "dataloader.h"
#include "logger.h"
#include "state.h"
#include "tokenizer.h"

// OpenMP threads that wait by spinning fight other processes for the cores: on a 2-core machine
// running two other busy processes, 2 threads took 4 times as long as 1 (dev/cpu/RESULTS.md, "Under
// load"); threads that sleep while they wait (OMP_WAIT_POLICY=PASSIVE) were faster than 1. The
// OpenMP runtime reads its settings once, when it is loaded, before main() runs, so setting the
// variable from main() is too late: when the user has set neither OMP_WAIT_POLICY nor
// GOMP_SPINCOUNT, this sets OMP_WAIT_POLICY=PASSIVE and runs the program again with the same
// arguments (execv of /proc/self/exe), which loads the runtime afresh. Call it first thing in
// main(). Without OpenMP, or where /proc/self/exe cannot be executed, it does nothing.
// OMP_WAIT_POLICY=ACTIVE (or any GOMP_SPINCOUNT) keeps the runtime's own spinning.
static inline void openmp_wait_passively(char** argv) {
#if defined(_OPENMP) && defined(__linux__)
    if (getenv("OMP_WAIT_POLICY") != NULL || getenv("GOMP_SPINCOUNT") != NULL) { return; }
    if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) { return; }
    fflush(NULL);
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY");  // the exec failed: go on as we are, with the runtime's default
#else
    (void)argv;
#endif
}

// how OpenMP threads wait, for the start-up line: "passive", "active" or "default" (spin a while)
static inline const char* openmp_wait_policy_name(void) {
    const char* p = getenv("OMP_WAIT_POLICY");
    if (p == NULL) { return getenv("GOMP_SPINCOUNT") ? "GOMP_SPINCOUNT" : "default"; }
    return strcasecmp(p, "passive") == 0 ? "passive" : strcasecmp(p, "active") == 0 ? "active" : p;
}

static inline double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// ----------------------------------------------------------------------------
// the output folder (-o)

// the pid of the process that holds the lock of the open lock file fd, or 0
static inline int lock_holder(int fd) {
    struct flock holder;
    memset(&holder, 0, sizeof(holder));
    holder.l_type = F_WRLCK;
    holder.l_whence = SEEK_SET;
    return fcntl(fd, F_GETLK, &holder) == 0 && holder.l_type != F_UNLCK ? (int)holder.l_pid : 0;
}

static inline void output_dir_in_use(const char* dir, int pid) {
    fatal("output folder %s is in use by another run (pid %d); wait for it to end or choose another -o", dir, pid);
}

// refuses a folder whose lock another run holds, creating nothing. Only before output_dir_lock:
// closing a descriptor of the lock file would drop this process's own lock.
static inline void output_dir_check_unlocked(const char* dir) {
    char path[1100];
    snprintf(path, sizeof(path), "%s/.lock", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { return; }
    int pid = lock_holder(fd);
    close(fd);
    if (pid != 0) { output_dir_in_use(dir, pid); }
}

// Only one run at a time may use an output folder: two would interleave main.log and overwrite each
// other's checkpoints. The run holds a POSIX record lock (fcntl) on <dir>/.lock for as long as it
// lives; the kernel drops the lock when the process ends, however it ends, so a killed run leaves
// no stale lock. A second run is refused with the holder's pid, which fcntl reports (the pid is
// also written into the file, for people). The descriptor stays open until the process exits; no
// other descriptor of that file may be opened and closed meanwhile (that would drop the lock).
static inline void output_dir_lock(const char* dir) {
    char path[1100];
    snprintf(path, sizeof(path), "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) { fatal("cannot create the lock file %s: %s", path, strerror(errno)); }
    struct flock lock;
    memset(&lock, 0, sizeof(lock));
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;  // start 0, length 0: the whole file
    if (fcntl(fd, F_SETLK, &lock) != 0) {
        if (errno != EACCES && errno != EAGAIN) {  // e.g. a network file system without locks
            printf("note: cannot lock %s (%s): nothing stops a second run from using this folder\n", path, strerror(errno));
            close(fd);
            return;
        }
        int pid = lock_holder(fd);
        if (pid != 0) { output_dir_in_use(dir, pid); }
        fatal("output folder %s was in use by another run a moment ago; try again", dir);
    }
    char pid[32];
    int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) { /* the lock is what counts */ }
}

// a checkpoint file's temporary name ("model_00000020.bin.tmp", "state_..."): a write that was
// interrupted (killed, power lost) leaves it behind; nothing ever reads it
static inline int is_checkpoint_tmp_name(const char* name) {
    int step;
    char tail;
    return strlen(name) == 22 && strcmp(name + 18, ".tmp") == 0 &&
           (sscanf(name, "model_%8d.bi%c", &step, &tail) == 2 || sscanf(name, "state_%8d.bi%c", &step, &tail) == 2);
}

// removes (and names) the temporary checkpoint files of interrupted writes; call with the lock held,
// since a live run's temporary file is not debris. Anything but a regular file is left alone.
static inline void output_dir_remove_tmp(const char* dir) {
    DIR* d = opendir(dir);
    if (d == NULL) { return; }
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (!is_checkpoint_tmp_name(e->d_name)) { continue; }
        char path[1100];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (file_exists(path) && remove(path) == 0) {
            printf("note: removed %s, left by an interrupted checkpoint write\n", path);
        }
    }
    closedir(d);
}

// does `dir` hold any file of a run: main.log, or a model_ or state_ file (not the temporary file of
// an interrupted write, which the run removes when it starts)?
static inline int output_dir_has_run_files(const char* dir) {
    char log_path[1100];
    snprintf(log_path, sizeof(log_path), "%s/main.log", dir);
    if (file_exists(log_path)) { return 1; }
    DIR* d = opendir(dir);
    if (d == NULL) { return 0; }
    int found = 0;
    struct dirent* e;
    while (!found && (e = readdir(d)) != NULL) {
        found = (strncmp(e->d_name, "model_", 6) == 0 || strncmp(e->d_name, "state_", 6) == 0) &&
                !is_checkpoint_tmp_name(e->d_name);
    }
    closedir(d);
    return found;
}

// Start-up checks of the output folder (-o), which create and change nothing (a run that fails
// to start leaves no folder or lock behind; output_dir_claim makes them once the run can start).
// The path must be, or be able to become, a writable folder, not locked by another run. Returns the
// step of the newest complete checkpoint to resume from with -y 1 (-1: start fresh). Refused:
// without -y 1 a folder that already holds a run; with -y 1 a folder that holds a log or
// model/state files but no complete pair (a resume would silently start from zero and append to
// the old log).
static inline int output_dir_inspect(const TrainArgs* a) {
    int resume_step = -1;
    if (a->output_dir[0] != '\0') {
        writable_dir_check(a->output_dir, 0);
        output_dir_check_unlocked(a->output_dir);
        int latest = latest_checkpoint(a->output_dir);
        int has_files = latest >= 0 || output_dir_has_run_files(a->output_dir);
        if (a->resume && latest >= 0) {
            resume_step = latest;
        } else if (a->resume && has_files) {
            fatal("%s holds files of a run (main.log, model_ or state_ files) but no complete checkpoint pair to "
                  "resume from; remove them or choose another -o", a->output_dir);
        } else if (a->resume) {
            printf("note: no checkpoint in %s to resume from; starting fresh\n", a->output_dir);
        } else if (has_files) {
            fatal("%s already holds a run; resume it with -y 1 or choose another -o folder", a->output_dir);
        }
    }
    return resume_step;
}

// The run starts: creates the output folder (and its parents), locks it for this run
// (output_dir_lock) and removes the temporary files of interrupted writes. What output_dir_inspect
// found must still hold (another run may have written there in between): the same checkpoint to
// resume from, or no run at all.
static inline void output_dir_claim(const TrainArgs* a, int resume_step) {
    if (a->output_dir[0] == '\0') { return; }
    ensure_writable_dir(a->output_dir);
    output_dir_lock(a->output_dir);
    output_dir_remove_tmp(a->output_dir);
    if (latest_checkpoint(a->output_dir) != resume_step ||
        (resume_step < 0 && output_dir_has_run_files(a->output_dir))) {
        fatal("output folder %s changed while this run was starting (another run wrote to it); start again",
              a->output_dir);
    }
}

// a NaN or Inf loss or gradient norm at `step` (0-based): the update is skipped (the weights stay
// as they were), the step is printed and logged, and MAX_NONFINITE_STEPS in a row stop the run
static inline void nonfinite_step(Logger* lg, const TrainArgs* a, TrainState* st, int step, double loss, float norm) {
    st->nonfinite_in_a_row++;
    printf("step %d/%d | loss %.6f | norm %.4f | non-finite: update skipped (%d in a row)\n", step + 1, a->max_steps,
           loss, norm, st->nonfinite_in_a_row);
    logger_line(lg, "step=%d train_loss=%.6f norm=%.4f skipped=1", step + 1, loss, norm);
    if (st->nonfinite_in_a_row >= MAX_NONFINITE_STEPS) {
        int good = a->output_dir[0] != '\0' ? latest_checkpoint(a->output_dir) : -1;
        char where[1100] = "none was written";
        if (good >= 0) { checkpoint_paths(a->output_dir, good, where, NULL, sizeof(where)); }
        fatal("%d non-finite steps in a row, stopping at step %d; last good checkpoint: %s", st->nonfinite_in_a_row,
              step + 1, where);
    }
}

// a state read back for -y 1 must be the one its name says, from a run with the same batch shape:
// with another -b, -t or -d the data position and the accumulation would not continue the run
static inline void resume_check_state(const TrainState* st, const TrainArgs* a, const char* state_path, int resume_step) {
    if (st->step != resume_step) { fatal("%s says step %d, its name says %d", state_path, st->step, resume_step); }
    if (st->B != a->B || st->T != a->T || st->total_batch != a->total_batch) {
        fatal("%s was written with -b %d -t %d -d %ld; resume with the same (not -b %d -t %d -d %ld)", state_path,
              st->B, st->T, st->total_batch, a->B, a->T, a->total_batch);
    }
}

// ----------------------------------------------------------------------------
// the data side of a run, before the model exists

typedef struct {
    Tokenizer tokenizer;  // the tokenizer.bin beside the first training shard (may be absent)
    int is_arith;         // the data folder holds the arithmetic corpus (its marker file)
    ArithSpec arith;      // and how it was made
} RunData;

// Without -i the default dataset is generated first (common/arithmetic.h). The data folder (of the
// first training shard) holds the tokenizer.bin the data scripts write, and for arithmetic data
// the marker that turns on the accuracy. -i without -j means no validation, -i without -H no
// multiple-choice eval (the defaults of -j and -H belong to the arithmetic data).
static inline void run_data_prepare(RunData* rd, TrainArgs* a) {
    int default_data = strcmp(a->train_pattern, ARITH_DEFAULT_TRAIN) == 0;
    if (default_data) { arith_ensure_dataset(ARITH_DIR); }
    char data_dir[1024], tok_path[1100];
    dataloader_first_dir(a->train_pattern, data_dir, sizeof(data_dir));
    snprintf(tok_path, sizeof(tok_path), "%s/tokenizer.bin", data_dir);
    tokenizer_init(&rd->tokenizer, tok_path);
    rd->is_arith = data_dir[0] != '\0' && arith_read_marker(data_dir, &rd->arith);
    if (!default_data && !rd->is_arith && strcmp(a->val_pattern, ARITH_DEFAULT_VAL) == 0 && a->val_every > 0) {
        printf("note: -i given without -j: no validation (the default -j belongs to the arithmetic data)\n");
        a->val_pattern = "";
    }
    if (!default_data && !a->eval_file_given) { a->eval_file = ""; }
}

// the order of the training batches: from the start of the data, or with -S from a position the
// seed chooses (common/dataloader.h); a resumed run then continues from its saved position
static inline void run_data_order(DataLoader* train_loader, const TrainArgs* a) {
    if (!a->seed_given) { return; }
    dataloader_start_at_seed(train_loader, a->seed);
    printf("data order: seed %llu, the training batches start at shard %d, token %ld\n", a->seed,
           train_loader->shard_index, train_loader->shard_offset);
}

// the vocabulary of a fresh model: the tokenizer's (257 for the arithmetic data), else GPT-2's
static inline int run_data_vocab_size(const RunData* rd) { return rd->tokenizer.loaded ? rd->tokenizer.vocab_size : 50257; }

// arithmetic data: sets up exact-match accuracy on held-out problems at every validation;
// returns whether it runs (it needs -t long enough and a vocabulary with GPT-2's byte tokens)
static inline int run_arith_eval_init(ArithEval* e, const RunData* rd, const TrainArgs* a, const GPT2Config* cfg) {
    if (!rd->is_arith || a->arith_problems <= 0 || a->val_every <= 0) { return 0; }
    int ok = cfg->vocab_size > arith_tokens().newline && arith_eval_init(e, &rd->arith, a->arith_problems, a->B, a->T);
    if (ok) {
        char settings[96];
        printf("arithmetic accuracy: %d held-out problems (%s, %d solved ones before each), greedy answers\n",
               a->arith_problems, arith_describe(&rd->arith, settings, sizeof(settings)), e->context);
    } else {
        printf("note: no arithmetic accuracy (the problems need -t >= %d and a vocabulary with GPT-2's byte tokens)\n",
               arith_eval_row_tokens(&rd->arith, 0));
    }
    // padded problems have one length; rows of a multiple of it start where the prompts do
    int length = arith_problem_tokens(&rd->arith);
    if (ok && (rd->arith.format & ARITH_PAD) && (a->T % length != 0 || a->seed_given)) {
        char why[96] = "-S moves the start of the data";
        if (a->T % length != 0) { snprintf(why, sizeof(why), "-t %d is not a multiple of the problem length %d", a->T, length); }
        printf("note: %s: training rows start inside problems, not at the newline before one as the accuracy "
               "prompts do, and the model learns far slower (doc/data.md)\n", why);
    }
    return ok;
}

// one evaluation line: the validation loss (when have_val), the multiple-choice accuracy (when
// eval_total > 0: eval_correct of eval_total examples, common/eval.h) and the arithmetic accuracy
// (when arith is not NULL, decoding greedily with `greedy`), printed and logged for `step`; at the
// last step also a line of held-out problems with the model's answers
static inline void run_report_evaluation(Logger* lg, int step, int last, int have_val, float val_loss,
                                         long eval_correct, long eval_total, ArithEval* arith, ArithGreedyFn greedy,
                                         void* model) {
    char line[256] = "", log[256] = "";
    if (have_val) {
        snprintf(line, sizeof(line), "val loss %.6f", val_loss);
        snprintf(log, sizeof(log), " val_loss=%.6f", val_loss);
    }
    if (eval_total > 0) {
        float acc = (float)eval_correct / (float)eval_total;
        size_t n = strlen(line), k = strlen(log);
        snprintf(line + n, sizeof(line) - n, "%seval acc %.4f (%ld/%ld)", n ? " | " : "", acc, eval_correct,
                 eval_total);
        snprintf(log + k, sizeof(log) - k, " eval_acc=%.4f", acc);
    }
    if (arith) {
        float acc = arith_eval_run(arith, greedy, model);
        size_t n = strlen(line), k = strlen(log);
        snprintf(line + n, sizeof(line) - n, "%sarith acc %.4f (%d/%d) | %s | %s", n ? " | " : "", acc, arith->correct,
                 arith->K, arith->shown[0], arith->shown[1]);
        snprintf(log + k, sizeof(log) - k, " arith_acc=%.4f", acc);
    }
    printf("%s\n", line);
    logger_line(lg, "step=%d%s", step, log);
    if (arith && last) {
        char examples[ARITH_SHOWN * 64 + 96];
        arith_eval_examples(arith, examples, sizeof(examples));
        printf("held-out problems, greedy answers: %s\n", examples);
    }
}

#endif // COMMON_TRAIN_COMMON_H
