/*
tests/cudacpu/runtime.cpp: the host side of the CPU execution layer (see README.md here): fibers
and their scheduler, the CUDA runtime functions our sources call, and a cuBLASLt / cuBLAS subset
computed by a plain GEMM. Anything outside that subset stops the program with a message that
names it ("cudacpu: ... not modelled"), never a silent guess.
*/
#define CUDACPU_RUNTIME 1  // the runtime functions themselves: no call-site macros
#include "cudacpu.h"

#include <cublasLt.h>
#include <cublas_api.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define CUDACPU_ASAN 1
extern "C" {
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
}
#else
#define CUDACPU_ASAN 0
#endif

namespace cudacpu {

thread_local ThreadState* current_thread = nullptr;
thread_local BlockState* current_block = nullptr;

void fail(const char* fmt, ...) {
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cudacpu: error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(70);
}

void outside_kernel(const char* what) { fail("%s used outside a running kernel", what); }

// CUDACPU_LAUNCH_LOG=FILE: every kernel launch and cuBLASLt matmul of the process, in order, one a
// line: "kernel NAME FILE:LINE" (NAME as written before <<<, a variable where the launch goes
// through one) and "matmul M N K" (cuBLASLt's column-major sizes); dev/roofline.py --launches
// checks its model of a training step against it
void launch_log(const char* fmt, ...) {
    static FILE* f = nullptr;
    static bool opened = false;
    if (!opened) {
        opened = true;
        const char* path = getenv("CUDACPU_LAUNCH_LOG");
        if (path && path[0] && !(f = fopen(path, "w"))) { fail("cannot write CUDACPU_LAUNCH_LOG %s", path); }
    }
    if (!f) { return; }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fflush(f);
}

static const char* env_or(const char* name, const char* fallback) {
    const char* v = getenv(name);
    return v && v[0] ? v : fallback;
}

// ---------------------------------------------------------------------------------------------
// the schedule: in which order the ready fibers of a block (and the blocks of a grid) run, and
// whether the warps of a block take turns between two block barriers (warp_serial)

enum ScheduleKind { SCHEDULE_FORWARD, SCHEDULE_REVERSE, SCHEDULE_SHUFFLE };
static ScheduleKind schedule_kind = SCHEDULE_FORWARD;
static bool warp_serial = false;
static uint64_t schedule_seed = 0;
static bool schedule_read = false;

static void read_schedule() {
    if (schedule_read) { return; }
    schedule_read = true;
    const char* s = env_or("CUDACPU_SCHEDULE", "forward");
    const char* order = s;
    if (strcmp(s, "warp") == 0) {
        warp_serial = true;
        order = "forward";
    } else if (strncmp(s, "warp-", 5) == 0) {
        warp_serial = true;
        order = s + 5;
    }
    if (strcmp(order, "forward") == 0) {
        schedule_kind = SCHEDULE_FORWARD;
    } else if (strcmp(order, "reverse") == 0) {
        schedule_kind = SCHEDULE_REVERSE;
    } else if (strncmp(order, "shuffle:", 8) == 0 && order[8] != '\0') {
        char* end = NULL;
        schedule_seed = strtoull(order + 8, &end, 10);
        if (*end != '\0') { fail("CUDACPU_SCHEDULE=%s: the seed must be a decimal number", s); }
        schedule_kind = SCHEDULE_SHUFFLE;
    } else {
        fail("CUDACPU_SCHEDULE=%s: expected forward, reverse, shuffle:SEED, warp, warp-reverse or warp-shuffle:SEED", s);
    }
}

// splitmix64: the shuffle schedule's random numbers (a fixed sequence per seed)
static uint64_t next_random(uint64_t* state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t shuffle_state = 0;

// puts idx[0..n) in schedule order (idx holds increasing indices on entry)
static void schedule_order(int* idx, int n) {
    if (schedule_kind == SCHEDULE_REVERSE) {
        for (int i = 0; i < n / 2; i++) { std::swap(idx[i], idx[n - 1 - i]); }
    } else if (schedule_kind == SCHEDULE_SHUFFLE) {
        for (int i = n - 1; i > 0; i--) { std::swap(idx[i], idx[next_random(&shuffle_state) % (uint64_t)(i + 1)]); }
    }
}

// ---------------------------------------------------------------------------------------------
// fibers: one per CUDA thread of the running block, each with its own stack (a guard page below)

enum FiberState { READY, AT_BLOCK_BARRIER, AT_WARP_OP, DONE };

struct Fiber {
    ThreadState ts;
    FiberState state;
    const char* file;  // where it waits
    int line;
    WarpOp op;
    const char* what;  // WARP_COLLECTIVE, WARP_GATHER: the WMMA call
    unsigned mask;
    uint64_t value, result;
    int arg, width;
    unsigned char* stack_lo;
    size_t stack_size;
#if defined(__x86_64__)
    void* sp;
#else
    ucontext_t ctx;
#endif
    void* asan_fake_stack;
};

struct Worker {
    std::vector<Fiber> fibers;
    int nthreads;
    size_t stack_size;
    BlockState block;
    std::vector<unsigned char> smem;
    std::vector<std::pair<void*, size_t>> static_smem;  // the static __shared__ variables seen (static_smem)
    std::map<const void*, size_t> static_bytes;          // their bytes per kernel
    const void* func;                                    // the kernel running (run_grid's func)
    std::vector<uint64_t> gathered;  // 32 per warp: what the lanes posted at the last warp_gather
    void (*body)(void*);
    void* ctx;
    const LaunchConfig* cfg;
    Fiber* running;
#if defined(__x86_64__)
    void* scheduler_sp;
#else
    ucontext_t scheduler_ctx;
#endif
    std::vector<int> order;  // the fibers of the current round, in schedule order
    std::vector<int> warps;  // the warps of the block in schedule order (warp_serial)
    int order_pos, order_len;
    void* asan_fake_stack;
    const void* asan_bottom;
    size_t asan_size;
    bool from_scheduler;
};

static thread_local Worker* worker = nullptr;

#if defined(__x86_64__)
// cudacpu_switch(save, to): saves the callee-saved registers and the stack pointer in *save,
// continues on stack `to` (which was saved the same way, or built by fiber_stack_init).
// cudacpu_fiber_start: the first return address of a new fiber: calls r13(r12) and never returns.
extern "C" void cudacpu_switch(void** save, void* to);
extern "C" void cudacpu_fiber_start(void);
asm(R"(
    .text
    .globl cudacpu_switch
    .type cudacpu_switch, @function
cudacpu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cudacpu_switch, .-cudacpu_switch
    .globl cudacpu_fiber_start
    .type cudacpu_fiber_start, @function
cudacpu_fiber_start:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size cudacpu_fiber_start, .-cudacpu_fiber_start
    .section .note.GNU-stack,"",@progbits
    .text
)");
#endif

static void fiber_main(void* arg);
#if !defined(__x86_64__)
static void fiber_main_trampoline(void);
#endif

static void fiber_prepare(Worker* w, Fiber* f) {
#if defined(__x86_64__)
    // the image cudacpu_switch pops: r15 r14 r13 r12 rbx rbp, then the return address
    uintptr_t top = ((uintptr_t)(f->stack_lo + f->stack_size)) & ~(uintptr_t)15;
    void** sp = (void**)(top - 72);  // 16-byte aligned stack after the `ret`, as a call expects
    sp[0] = 0;
    sp[1] = 0;
    sp[2] = (void*)&fiber_main;  // r13
    sp[3] = (void*)f;            // r12
    sp[4] = 0;
    sp[5] = 0;
    sp[6] = (void*)&cudacpu_fiber_start;
    f->sp = sp;
    (void)w;
#else
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack_lo;
    f->ctx.uc_stack.ss_size = f->stack_size;
    f->ctx.uc_link = NULL;
    makecontext(&f->ctx, (void (*)(void))fiber_main_trampoline, 0);
    (void)w;
#endif
}

// scheduler -> the first fiber of a round; returns when every fiber of the round has run until
// it waits at a barrier or has finished (each one switches straight to the next, see leave)
static void switch_to_fiber(Worker* w, Fiber* f) {
    w->running = f;
    current_thread = &f->ts;
#if CUDACPU_ASAN
    w->from_scheduler = true;
    __sanitizer_start_switch_fiber(&w->asan_fake_stack, f->stack_lo, f->stack_size);
#endif
#if defined(__x86_64__)
    cudacpu_switch(&w->scheduler_sp, f->sp);
#else
    swapcontext(&w->scheduler_ctx, &f->ctx);
#endif
#if CUDACPU_ASAN
    __sanitizer_finish_switch_fiber(w->asan_fake_stack, NULL, NULL);
#endif
    current_thread = NULL;
    w->running = NULL;
}

static void after_switch_in(Worker* w, Fiber* f) {
#if CUDACPU_ASAN
    const void* bottom;
    size_t size;
    __sanitizer_finish_switch_fiber(f->asan_fake_stack, &bottom, &size);
    if (w->from_scheduler) {  // the scheduler's stack, to switch back to at the end of the round
        w->asan_bottom = bottom;
        w->asan_size = size;
        w->from_scheduler = false;
    }
#else
    (void)w;
    (void)f;
#endif
}

// fiber f waits (or has finished): run the next fiber of the round, or go back to the scheduler.
// Returns when f runs again (never when it has finished).
static void leave(Worker* w, Fiber* f) {
    Fiber* g = w->order_pos < w->order_len ? &w->fibers[(size_t)w->order[(size_t)w->order_pos++]] : NULL;
#if CUDACPU_ASAN
    void** fake = f->state == DONE ? NULL : &f->asan_fake_stack;
    if (g) {
        __sanitizer_start_switch_fiber(fake, g->stack_lo, g->stack_size);
    } else {
        __sanitizer_start_switch_fiber(fake, w->asan_bottom, w->asan_size);
    }
#endif
    if (g) {
        w->running = g;
        current_thread = &g->ts;
    }
#if defined(__x86_64__)
    cudacpu_switch(&f->sp, g ? g->sp : w->scheduler_sp);
#else
    swapcontext(&f->ctx, g ? &g->ctx : &w->scheduler_ctx);
#endif
    after_switch_in(w, f);
}

static void fiber_main(void* arg) {
    Fiber* f = (Fiber*)arg;
    Worker* w = worker;
    after_switch_in(w, f);
    w->body(w->ctx);
    f->state = DONE;
    leave(w, f);
    fail("a finished CUDA thread was resumed");
}

#if !defined(__x86_64__)
static void fiber_main_trampoline(void) { fiber_main(worker->running); }
#endif

static Worker* get_worker() {
    if (!worker) {
        worker = new Worker();
        worker->nthreads = 0;
        long kb = atol(env_or("CUDACPU_STACK_KB", CUDACPU_ASAN ? "512" : "128"));
        if (kb < 16) { fail("CUDACPU_STACK_KB=%ld: at least 16", kb); }
        worker->stack_size = (size_t)kb * 1024;
    }
    return worker;
}

// stacks for n fibers, made once and kept (a block has at most 1024 threads)
static void ensure_fibers(Worker* w, int n) {
    if ((int)w->fibers.size() >= n) { return; }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t old = w->fibers.size();
    w->fibers.resize(n);
    for (size_t i = old; i < (size_t)n; i++) {
        size_t bytes = w->stack_size + page;
        void* mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (mem == MAP_FAILED) { fail("cannot map a fiber stack of %zu bytes", bytes); }
        if (mprotect(mem, page, PROT_NONE) != 0) { fail("cannot protect a fiber stack's guard page"); }
        w->fibers[i].stack_lo = (unsigned char*)mem + page;
        w->fibers[i].stack_size = w->stack_size;
    }
}

// ---------------------------------------------------------------------------------------------
// barriers

static const char* op_name(WarpOp op) {
    switch (op) {
        case WARP_SYNC: return "__syncwarp";
        case SHFL_IDX: return "__shfl_sync";
        case SHFL_XOR: return "__shfl_xor_sync";
        case SHFL_UP: return "__shfl_up_sync";
        case SHFL_DOWN: return "__shfl_down_sync";
        case VOTE_BALLOT: return "a warp vote (__ballot_sync/__any_sync/__all_sync)";
        case WARP_COLLECTIVE:
        case WARP_GATHER: return "a WMMA operation";
    }
    return "?";
}

static const char* fiber_op_name(const Fiber* f) {
    return f->op == WARP_COLLECTIVE || f->op == WARP_GATHER ? f->what : op_name(f->op);
}

static Worker* running_worker(const char* what) {
    Worker* w = worker;
    if (!w || !w->running) { outside_kernel(what); }
    return w;
}

static void where(char* buf, size_t cap, const Worker* w, const Fiber* f) {
    snprintf(buf, cap, "kernel %s (launched at %s:%d), block (%u,%u,%u), thread (%u,%u,%u)", w->cfg->name,
             w->cfg->file, w->cfg->line, w->block.block_idx.x, w->block.block_idx.y, w->block.block_idx.z,
             f->ts.thread_idx.x, f->ts.thread_idx.y, f->ts.thread_idx.z);
}

void sync_block(const char* file, int line) {
    Worker* w = running_worker("__syncthreads");
    Fiber* f = w->running;
    f->state = AT_BLOCK_BARRIER;
    f->file = file;
    f->line = line;
    leave(w, f);
}

uint64_t warp_exchange(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line) {
    Worker* w = running_worker(op_name(op));
    Fiber* f = w->running;
    if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
        char at[256];
        where(at, sizeof(at), w, f);
        fail("%s at %s:%d: width %d is not a power of two up to 32 (%s)", op_name(op), file, line, width, at);
    }
    f->state = AT_WARP_OP;
    f->op = op;
    f->what = NULL;
    f->mask = mask;
    f->value = value;
    f->arg = arg;
    f->width = width;
    f->file = file;
    f->line = line;
    leave(w, f);
    return f->result;
}

static uint64_t warp_wmma(WarpOp op, uint64_t value, const char* what, const char* file, int line) {
    Worker* w = running_worker(what);
    Fiber* f = w->running;
    f->state = AT_WARP_OP;
    f->op = op;
    f->what = what;
    f->mask = 0xffffffffu;
    f->value = value;
    f->arg = 0;
    f->width = 32;
    f->file = file;
    f->line = line;
    leave(w, f);
    return f->result;
}

void warp_collective(const char* what, const char* file, int line) { warp_wmma(WARP_COLLECTIVE, 0, what, file, line); }

const uint64_t* warp_gather(uint64_t value, const char* what, const char* file, int line) {
    return (const uint64_t*)(uintptr_t)warp_wmma(WARP_GATHER, value, what, file, line);
}

// the lane whose value lane `lane` receives, or -1 for its own
static int shuffle_source(const Fiber* f, int lane) {
    int seg = lane & ~(f->width - 1), src = lane;
    switch (f->op) {
        case SHFL_IDX: src = seg + (f->arg & (f->width - 1)); break;
        case SHFL_XOR: src = lane ^ f->arg; if (src >= seg + f->width || src < 0 || src > 31) { src = lane; } break;
        case SHFL_UP: src = lane - f->arg; if (src < seg) { src = lane; } break;
        case SHFL_DOWN: src = lane + f->arg; if (src >= seg + f->width) { src = lane; } break;
        default: break;
    }
    return src;
}

// the warp operations of fibers [lo, hi) (whole warps) that every named lane has reached
// complete; returns whether any did
static bool resolve_warps(Worker* w, int lo, int hi) {
    bool progress = false;
    int n = w->nthreads;
    char at[256];
    for (int base = lo; base < hi; base += 32) {
        int lanes = n - base < 32 ? n - base : 32;
        for (int l = 0; l < lanes; l++) {
            Fiber* f = &w->fibers[base + l];
            if (f->state != AT_WARP_OP) { continue; }
            unsigned mask = f->mask;
            if (!(mask & (1u << l))) {
                where(at, sizeof(at), w, f);
                fail("%s at %s:%d: mask 0x%08x does not include the calling lane %d (%s)", fiber_op_name(f), f->file,
                     f->line, mask, l, at);
            }
            if (lanes < 32 && (mask >> lanes) != 0) {
                where(at, sizeof(at), w, f);
                fail("%s at %s:%d: mask 0x%08x names lanes beyond the %d lanes of this warp (%s)", fiber_op_name(f),
                     f->file, f->line, mask, lanes, at);
            }
            bool all = true;
            for (int k = 0; k < lanes; k++) {
                if (!(mask & (1u << k))) { continue; }
                Fiber* g = &w->fibers[base + k];
                if (g->state == DONE) {
                    if (f->op == WARP_SYNC) { continue; }  // __syncwarp may name exited threads
                    where(at, sizeof(at), w, f);
                    fail("%s at %s:%d: mask 0x%08x names lane %d, which has exited (%s)", fiber_op_name(f), f->file,
                         f->line, mask, k, at);
                }
                if (g->state != AT_WARP_OP) { all = false; continue; }
                if (g->op != f->op || g->mask != mask || g->what != f->what) {
                    where(at, sizeof(at), w, f);
                    fail("lanes of one warp meet at different warp operations: lane %d at %s (mask 0x%08x) %s:%d, "
                         "lane %d at %s (mask 0x%08x) %s:%d (%s)",
                         l, fiber_op_name(f), mask, f->file, f->line, k, fiber_op_name(g), g->mask, g->file, g->line, at);
                }
            }
            if (!all) { continue; }
            uint64_t ballot = 0;
            for (int k = 0; k < lanes; k++) {
                if ((mask & (1u << k)) && w->fibers[base + k].state == AT_WARP_OP && (w->fibers[base + k].value & 1)) {
                    ballot |= 1ull << k;
                }
            }
            for (int k = 0; k < lanes; k++) {
                if (!(mask & (1u << k))) { continue; }
                Fiber* g = &w->fibers[base + k];
                if (g->state != AT_WARP_OP) { continue; }
                if (g->op == VOTE_BALLOT) {
                    g->result = ballot;
                } else if (g->op == WARP_GATHER) {
                    uint64_t* table = &w->gathered[(size_t)base];
                    table[k] = g->value;
                    g->result = (uint64_t)(uintptr_t)table;
                } else if (g->op != WARP_SYNC && g->op != WARP_COLLECTIVE) {
                    int src = shuffle_source(g, k);
                    if (src < 0 || src >= lanes || !(mask & (1u << src))) {
                        where(at, sizeof(at), w, g);
                        fail("%s at %s:%d: lane %d reads lane %d, which is not in the mask 0x%08x (%s)", op_name(g->op),
                             g->file, g->line, k, src, mask, at);
                    }
                    g->result = w->fibers[base + src].value;
                }
            }
            for (int k = 0; k < lanes; k++) {
                Fiber* g = &w->fibers[base + k];
                if ((mask & (1u << k)) && g->state == AT_WARP_OP) { g->state = READY; }
            }
            progress = true;
        }
    }
    return progress;
}

// no fiber can run and no warp operation can complete: complete the block barrier, or report
// the deadlock
static void resolve_barrier(Worker* w) {
    int n = w->nthreads, at_bar = 0, done = 0, at_warp = 0;
    const Fiber* first_bar = NULL;
    const Fiber* first_warp = NULL;
    const Fiber* other_site = NULL;
    const Fiber* first_done = NULL;
    for (int i = 0; i < n; i++) {
        const Fiber* f = &w->fibers[i];
        if (f->state == AT_BLOCK_BARRIER) {
            if (!first_bar) {
                first_bar = f;
            } else if (!other_site && (f->line != first_bar->line || strcmp(f->file, first_bar->file) != 0)) {
                other_site = f;
            }
            at_bar++;
        } else if (f->state == DONE) {
            if (!first_done) { first_done = f; }
            done++;
        } else if (f->state == AT_WARP_OP) {
            if (!first_warp) { first_warp = f; }
            at_warp++;
        }
    }
    char at[256];
    if (at_bar == n && !other_site) {
        for (int i = 0; i < n; i++) { w->fibers[i].state = READY; }
        return;
    }
    snprintf(at, sizeof(at), "kernel %s (launched at %s:%d), block (%u,%u,%u)", w->cfg->name, w->cfg->file,
             w->cfg->line, w->block.block_idx.x, w->block.block_idx.y, w->block.block_idx.z);
    if (other_site) {
        fail("deadlock: threads wait at different __syncthreads: thread (%u,%u,%u) at %s:%d, thread (%u,%u,%u) at "
             "%s:%d (%s)",
             first_bar->ts.thread_idx.x, first_bar->ts.thread_idx.y, first_bar->ts.thread_idx.z, first_bar->file,
             first_bar->line, other_site->ts.thread_idx.x, other_site->ts.thread_idx.y, other_site->ts.thread_idx.z,
             other_site->file, other_site->line, at);
    }
    if (at_bar > 0 && done > 0) {
        fail("deadlock: %d of %d threads wait at __syncthreads (%s:%d) that thread (%u,%u,%u) and %d others never "
             "reach: they have exited (%s)",
             at_bar, n, first_bar->file, first_bar->line, first_done->ts.thread_idx.x, first_done->ts.thread_idx.y,
             first_done->ts.thread_idx.z, done - 1, at);
    }
    if (at_bar > 0 && first_warp) {
        fail("deadlock: %d threads wait at __syncthreads (%s:%d) while %d wait at %s (%s:%d) (%s)", at_bar,
             first_bar->file, first_bar->line, at_warp, fiber_op_name(first_warp), first_warp->file, first_warp->line,
             at);
    }
    fail("deadlock: %d threads wait at warp operations that cannot complete, e.g. %s at %s:%d (%s)", at_warp,
         first_warp ? fiber_op_name(first_warp) : "?", first_warp ? first_warp->file : "?",
         first_warp ? first_warp->line : 0, at);
}

// fibers [lo, hi) (whole warps) run until none of them can: each round runs the ready ones in
// schedule order, each until it waits or exits; between rounds the warp operations whose lanes
// have all arrived complete
static void run_fibers(Worker* w, int lo, int hi) {
    std::vector<int>& order = w->order;
    for (;;) {
        int ready = 0;
        for (int i = lo; i < hi; i++) {
            if (w->fibers[(size_t)i].state == READY) { order[(size_t)ready++] = i; }
        }
        if (ready == 0) {
            if (!resolve_warps(w, lo, hi)) { return; }
            continue;
        }
        schedule_order(order.data(), ready);
        w->order_pos = 1;
        w->order_len = ready;
        switch_to_fiber(w, &w->fibers[(size_t)order[0]]);
    }
}

// One block, from one block barrier to the next: all its fibers together, or (warp_serial) one
// warp after the other in schedule order, each alone until every lane of it waits at a block
// barrier or has exited; then the barrier completes (or the block has finished, or a deadlock).
static void run_block(Worker* w) {
    int n = w->nthreads;
    dim3 bd = w->block.block_dim;
    for (int i = 0; i < n; i++) {
        Fiber* f = &w->fibers[i];
        f->ts.thread_idx = make_uint3(i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y));
        f->ts.linear = i;
        f->state = READY;
        f->asan_fake_stack = NULL;
        fiber_prepare(w, f);
    }
    w->order.resize((size_t)n);
    int nwarps = (n + 31) / 32;
    std::vector<int>& warps = w->warps;
    warps.resize((size_t)nwarps);
    for (;;) {
        if (warp_serial) {
            for (int k = 0; k < nwarps; k++) { warps[(size_t)k] = k; }
            schedule_order(warps.data(), nwarps);
            for (int k : warps) { run_fibers(w, 32 * k, 32 * k + 32 < n ? 32 * k + 32 : n); }
        } else {
            run_fibers(w, 0, n);
        }
        int done = 0;
        for (int i = 0; i < n; i++) { done += w->fibers[i].state == DONE; }
        if (done == n) { return; }
        resolve_barrier(w);
    }
}

// the largest dynamic shared memory each kernel was allowed (cudaFuncSetAttribute), and each kernel's static
// __shared__ bytes once it ran: a launch fails where dynamic and static together pass the limit, as on a GPU
static std::map<const void*, int> max_dynamic_smem;
static std::map<const void*, size_t> static_smem_of;
static cudaError_t last_error = cudaSuccess;
static const size_t DEFAULT_SMEM = 48 * 1024, OPTIN_SMEM = 227 * 1024;

// the dynamic shared memory a launch of func may ask for beside static bytes of static __shared__ variables
static size_t dynamic_smem_allowed(const void* func, size_t stat) {
    auto it = max_dynamic_smem.find(func);
    size_t limit = it == max_dynamic_smem.end() ? DEFAULT_SMEM : OPTIN_SMEM;
    size_t allowed = limit > stat ? limit - stat : 0;
    return it == max_dynamic_smem.end() ? allowed : std::min(allowed, (size_t)it->second);
}

bool static_smem(void* p, size_t bytes) {
    Worker* w = running_worker("__shared__");
    memset(p, 0xff, bytes);
    w->static_smem.push_back(std::make_pair(p, bytes));
    size_t stat = (w->static_bytes[w->func] += bytes);
    static_smem_of[w->func] = std::max(static_smem_of[w->func], stat);
    if (w->cfg->smem > dynamic_smem_allowed(w->func, stat)) {
        fail("launch of %s at %s:%d: %zu bytes of dynamic shared memory beside %zu static, above the %zu allowed "
             "(cudaFuncSetAttribute)", w->cfg->name, w->cfg->file, w->cfg->line, w->cfg->smem, stat,
             dynamic_smem_allowed(w->func, stat));
    }
    return true;
}

static void launch_error(const LaunchConfig& cfg, cudaError_t err, const char* why) {
    fprintf(stderr, "cudacpu: launch of %s at %s:%d failed: %s\n", cfg.name, cfg.file, cfg.line, why);
    last_error = err;
}

void run_grid(const LaunchConfig& cfg, void (*body)(void*), void* ctx, const void* func) {
    read_schedule();
    if (current_thread) { fail("kernel %s launched from inside a kernel (dynamic parallelism is not modelled)", cfg.name); }
    launch_log("kernel %s %s:%d", cfg.name, cfg.file, cfg.line);
    dim3 g = cfg.grid, b = cfg.block;
    unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    char why[200];
    if (g.x == 0 || g.y == 0 || g.z == 0 || threads == 0) {
        snprintf(why, sizeof(why), "empty grid (%u,%u,%u) or block (%u,%u,%u)", g.x, g.y, g.z, b.x, b.y, b.z);
        return launch_error(cfg, cudaErrorInvalidConfiguration, why);
    }
    if (threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64 || g.y > 65535 || g.z > 65535 || g.x > 2147483647u) {
        snprintf(why, sizeof(why), "grid (%u,%u,%u) block (%u,%u,%u) exceeds the limits", g.x, g.y, g.z, b.x, b.y, b.z);
        return launch_error(cfg, cudaErrorInvalidConfiguration, why);
    }
    size_t stat = static_smem_of.count(func) ? static_smem_of[func] : 0, allowed = dynamic_smem_allowed(func, stat);
    if (cfg.smem > allowed) {
        snprintf(why, sizeof(why), "%zu bytes of dynamic shared memory beside %zu static, above the %zu allowed "
                 "(cudaFuncSetAttribute)", cfg.smem, stat, allowed);
        return launch_error(cfg, cudaErrorInvalidValue, why);
    }
    Worker* w = get_worker();
    ensure_fibers(w, (int)threads);
    w->nthreads = (int)threads;
    w->body = body;
    w->ctx = ctx;
    w->cfg = &cfg;
    w->func = func;
    w->smem.resize(cfg.smem > 0 ? cfg.smem : 1);
    w->gathered.resize(((size_t)threads + 31) / 32 * 32);
    w->block.block_dim = b;
    w->block.grid_dim = g;
    w->block.dynamic_smem = cfg.smem > 0 ? w->smem.data() : NULL;
    if (schedule_kind == SCHEDULE_SHUFFLE) {
        shuffle_state = schedule_seed * 0x2545f4914f6cdd1dull + (uint64_t)cfg.line;
    }
    size_t nblocks = (size_t)g.x * g.y * g.z;
    std::vector<size_t> blocks;
    bool ordered = schedule_kind == SCHEDULE_FORWARD;
    if (!ordered) {
        blocks.resize(nblocks);
        for (size_t i = 0; i < nblocks; i++) { blocks[i] = i; }
        if (schedule_kind == SCHEDULE_REVERSE) {
            for (size_t i = 0; i < nblocks / 2; i++) { std::swap(blocks[i], blocks[nblocks - 1 - i]); }
        } else {
            for (size_t i = nblocks - 1; i > 0; i--) { std::swap(blocks[i], blocks[next_random(&shuffle_state) % (i + 1)]); }
        }
    }
    current_block = &w->block;
    for (size_t bi = 0; bi < nblocks; bi++) {
        size_t k = ordered ? bi : blocks[bi];
        w->block.block_idx = make_uint3((unsigned)(k % g.x), (unsigned)((k / g.x) % g.y), (unsigned)(k / ((size_t)g.x * g.y)));
        if (cfg.smem > 0) { memset(w->smem.data(), 0xff, cfg.smem); }  // NaN in every float of it
        for (const auto& v : w->static_smem) { memset(v.first, 0xff, v.second); }
        run_block(w);
    }
    current_block = NULL;
}

// ---------------------------------------------------------------------------------------------
// device memory: ordinary host memory, 256-byte aligned, filled with 0xff bytes (NaN as float and
// bf16, -1 as int) so that a read of something never written shows

static std::map<uintptr_t, size_t> allocations;

// whether one allocation of `table` (start -> bytes) holds all of [p, p + bytes)
static bool in_one_allocation(const std::map<uintptr_t, size_t>& table, const void* p, size_t bytes) {
    uintptr_t a = (uintptr_t)p;
    auto it = table.upper_bound(a);
    if (it == table.begin()) { return false; }
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
}

static bool in_device_memory(const void* p, size_t bytes) { return in_one_allocation(allocations, p, bytes); }

void check_device_range(const void* p, size_t bytes, const char* what) {
    if (!in_device_memory(p, bytes)) {
        fail("%s: %zu bytes at %p are not inside one device allocation (an illegal memory access on a GPU)", what,
             bytes, p);
    }
}

// ---------------------------------------------------------------------------------------------
// host memory: pinned (cudaMallocHost, cudaHostAlloc) or pageable (everything else)

static std::map<uintptr_t, size_t> pinned_allocations;

static bool in_pinned_memory(const void* p, size_t bytes) { return in_one_allocation(pinned_allocations, p, bytes); }

// ---------------------------------------------------------------------------------------------
// calls that make the host wait for the GPU. On a GPU (cuda_runtime_api.h, "API synchronization
// behavior"): cudaMemcpy unless device to device, cudaMemcpyAsync with pageable host memory on
// either side (or host to host), cudaDeviceSynchronize, cudaStreamSynchronize,
// cudaEventSynchronize, and cudaFree / cudaFreeHost (which may synchronize). Every launch and copy
// runs at once here, so nothing waits; the layer counts these calls per call site (cudacpu.h
// records the site) and, with CUDACPU_BLOCKING_LOG=FILE, writes the counts at exit, one line per
// site: "COUNT CALL FUNCTION FILE:LINE".
//
// Asynchronous copies are modelled where they can go wrong: a cudaMemcpyAsync from pinned memory
// to the device may read its source any time before the host next waits, so the source must not
// change before then (checked at the next blocking call: "written before ... was waited for");
// one from the device to pinned memory lands there only at the next blocking call, so a host
// that reads it earlier reads the old bytes, as it may on a GPU. The model has one stream: any
// blocking call completes every earlier copy.

struct CallSite {
    const char* file;
    int line;
    const char* func;
};
static thread_local CallSite next_site = {NULL, 0, NULL};

void call_site(const char* file, int line, const char* func) { next_site = {file, line, func}; }

// the site cudacpu.h recorded for the call being made (then forgotten)
static CallSite take_site() {
    CallSite s = next_site;
    next_site = {NULL, 0, NULL};
    return s;
}

struct PendingUpload {
    const void* src;
    size_t bytes;
    uint64_t hash;
    CallSite site;
};
struct PendingDownload {
    void* dst;
    std::vector<unsigned char> bytes;
};
static std::vector<PendingUpload> pending_uploads;
static std::vector<PendingDownload> pending_downloads;

static uint64_t hash_bytes(const void* p, size_t n) {  // FNV-1a
    const unsigned char* b = (const unsigned char*)p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) { h = (h ^ b[i]) * 0x100000001b3ull; }
    return h;
}

static std::map<std::string, long> blocking_counts;  // "CALL FUNCTION FILE:LINE" -> calls

static void write_blocking_log() {
    const char* path = getenv("CUDACPU_BLOCKING_LOG");
    if (!path || !path[0]) { return; }
    FILE* f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cudacpu: cannot write CUDACPU_BLOCKING_LOG %s\n", path);
        return;
    }
    for (const auto& kv : blocking_counts) { fprintf(f, "%ld %s\n", kv.second, kv.first.c_str()); }
    fclose(f);
}

// registered after blocking_counts is constructed, so it runs before that is destroyed
static struct BlockingLogAtExit {
    BlockingLogAtExit() { atexit(write_blocking_log); }
} blocking_log_at_exit;

// the host waits at `call` (made at `site`): every earlier copy has completed
static void host_waits(const char* call, const CallSite& site) {
    for (const PendingUpload& u : pending_uploads) {
        if (hash_bytes(u.src, u.bytes) != u.hash) {
            fail("pinned host memory at %p (%zu bytes) was written before the cudaMemcpyAsync from it at %s:%d (in %s) "
                 "was waited for (%s at %s:%d): on a GPU the copy may read the new bytes",
                 u.src, u.bytes, u.site.file ? u.site.file : "?", u.site.line, u.site.func ? u.site.func : "?", call,
                 site.file ? site.file : "?", site.line);
        }
    }
    pending_uploads.clear();
    for (const PendingDownload& d : pending_downloads) { memcpy(d.dst, d.bytes.data(), d.bytes.size()); }
    pending_downloads.clear();
    char key[512];
    snprintf(key, sizeof(key), "%s %s %s:%d", call, site.func ? site.func : "?", site.file ? site.file : "?", site.line);
    blocking_counts[key]++;
}

}  // namespace cudacpu

using namespace cudacpu;

extern "C" {

// cudaMalloc and cudaHostAlloc: a new allocation of `table`, 256-byte aligned, filled with 0xff
static cudaError_t allocate(std::map<uintptr_t, size_t>& table, void** p, size_t bytes) {
    if (!p) { return cudaErrorInvalidValue; }
    size_t n = bytes > 0 ? bytes : 1;
    void* mem = NULL;
    if (posix_memalign(&mem, 256, n) != 0) { return cudaErrorMemoryAllocation; }
    memset(mem, 0xff, n);
    table[(uintptr_t)mem] = n;
    *p = mem;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) { return allocate(allocations, p, bytes); }

// cudaFree and cudaFreeHost: p must be an allocation of `table` (or NULL: nothing happens)
static cudaError_t release(std::map<uintptr_t, size_t>& table, void* p, const char* call, const char* what) {
    CallSite site = take_site();
    if (!p) { return cudaSuccess; }
    host_waits(call, site);
    auto it = table.find((uintptr_t)p);
    if (it == table.end()) {
        fprintf(stderr, "cudacpu: %s(%p): not a %s (or freed twice)\n", call, p, what);
        return cudaErrorInvalidValue;
    }
    table.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaFree(void* p) { return release(allocations, p, "cudaFree", "device allocation"); }

// pinned host memory: ordinary host memory the layer remembers, filled with 0xff bytes like
// device memory (cudaHostAllocMapped, a device view of it, is not modelled)
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int flags) {
    if (flags & cudaHostAllocMapped) { fail("cudaHostAlloc: cudaHostAllocMapped not modelled"); }
    return allocate(pinned_allocations, p, bytes);
}

cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* p) { return release(pinned_allocations, p, "cudaFreeHost", "pinned host allocation"); }

// the sides of a copy (checked against the allocations), for cudaMemcpy and cudaMemcpyAsync
struct CopySides {
    bool dst_dev, src_dev;
};

static CopySides copy_sides(const char* call, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind == cudaMemcpyDefault) {
        dst_dev = in_device_memory(dst, bytes);
        src_dev = in_device_memory(src, bytes);
    } else if (kind == cudaMemcpyHostToHost) {
        dst_dev = src_dev = false;
    } else if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice) {
        fail("%s: kind %d not modelled", call, (int)kind);
    }
    char what[64];
    if (dst_dev) { snprintf(what, sizeof(what), "%s destination", call); check_device_range(dst, bytes, what); }
    if (src_dev) { snprintf(what, sizeof(what), "%s source", call); check_device_range(src, bytes, what); }
    if (!dst_dev && in_device_memory(dst, 1)) { fail("%s: the host destination %p is device memory", call, dst); }
    if (!src_dev && in_device_memory(src, 1)) { fail("%s: the host source %p is device memory", call, src); }
    return CopySides{dst_dev, src_dev};
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    CallSite site = take_site();
    if (bytes == 0) { return cudaSuccess; }
    CopySides s = copy_sides("cudaMemcpy", dst, src, bytes, kind);
    if (!(s.dst_dev && s.src_dev)) { host_waits("cudaMemcpy", site); }  // device to device: no wait
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    (void)stream;
    CallSite site = take_site();
    if (bytes == 0) { return cudaSuccess; }
    CopySides s = copy_sides("cudaMemcpyAsync", dst, src, bytes, kind);
    bool pageable = (!s.dst_dev && !in_pinned_memory(dst, bytes)) || (!s.src_dev && !in_pinned_memory(src, bytes));
    if (pageable || (!s.dst_dev && !s.src_dev)) {
        host_waits(pageable ? "cudaMemcpyAsync(pageable)" : "cudaMemcpyAsync(host to host)", site);
        memmove(dst, src, bytes);
    } else if (s.dst_dev && !s.src_dev) {  // pinned -> device: the source must hold still until the host waits
        pending_uploads.push_back(PendingUpload{src, bytes, hash_bytes(src, bytes), site});
        memmove(dst, src, bytes);
    } else if (!s.dst_dev) {  // device -> pinned: lands when the host waits
        const unsigned char* b = (const unsigned char*)src;
        pending_downloads.push_back(PendingDownload{dst, std::vector<unsigned char>(b, b + bytes)});
    } else {
        memmove(dst, src, bytes);
    }
    return cudaSuccess;
}

cudaError_t cudaMemset(void* p, int value, size_t bytes) {
    if (bytes == 0) { return cudaSuccess; }
    check_device_range(p, bytes, "cudaMemset");
    memset(p, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
    (void)stream;
    return cudaMemset(p, value, bytes);
}

cudaError_t cudaDeviceSynchronize(void) {
    host_waits("cudaDeviceSynchronize", take_site());
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    (void)stream;
    host_waits("cudaStreamSynchronize", take_site());
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

// CUDACPU_DEVICES=N (1 to 64, default 1): the layer shows N alike devices. They share the host's
// memory; what differs is only the number cudaGetDevice returns (a program that wants one
// device per process of an MPI job, as train_gpt2cu with NCCL does, then gets one).
static int device_count() {
    static int count = 0;
    if (count == 0) {
        const char* s = env_or("CUDACPU_DEVICES", "1");
        char* end = NULL;
        long n = strtol(s, &end, 10);
        if (end == s || *end != '\0' || n < 1 || n > 64) { fail("CUDACPU_DEVICES=%s: a count of devices from 1 to 64", s); }
        count = (int)n;
    }
    return count;
}
static int current_device = 0;
static bool is_device(int device) { return device >= 0 && device < device_count(); }

cudaError_t cudaGetDeviceCount(int* n) {
    *n = device_count();
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    if (!is_device(device)) { return cudaErrorInvalidDevice; }
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
    *device = current_device;
    return cudaSuccess;
}

// an H100-like device: compute capability 9.0, the limits the layer checks launches against
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (!is_device(device)) { return cudaErrorInvalidDevice; }
    memset(prop, 0, sizeof(*prop));
    snprintf(prop->name, sizeof(prop->name), "CPU execution layer (tests/cudacpu)");
    prop->major = 9;
    prop->minor = 0;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    prop->totalGlobalMem = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : (size_t)1 << 32;
    prop->multiProcessorCount = 132;
    prop->sharedMemPerBlock = DEFAULT_SMEM;
    prop->sharedMemPerBlockOptin = OPTIN_SMEM;
    prop->maxThreadsPerBlock = 1024;
    prop->warpSize = 32;
    prop->l2CacheSize = 50 * 1024 * 1024;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (!is_device(device)) { return cudaErrorInvalidDevice; }
    switch (attr) {
        case cudaDevAttrL2CacheSize: *value = 50 * 1024 * 1024; return cudaSuccess;
        case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)OPTIN_SMEM; return cudaSuccess;
        case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
        case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
        case cudaDevAttrWarpSize: *value = 32; return cudaSuccess;
        case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
        default: fail("cudaDeviceGetAttribute: attribute %d not modelled", (int)attr);
    }
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) {
        fail("cudaFuncSetAttribute: attribute %d not modelled", (int)attr);
    }
    if (value < 0 || (size_t)value > OPTIN_SMEM) { return cudaErrorInvalidValue; }
    max_dynamic_smem[func] = value;
    return cudaSuccess;
}

// events measure host time: the layer says nothing about GPU timing
struct CpuEvent {
    double t;
};
static double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) {
    *e = (cudaEvent_t) new CpuEvent{0.0};
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete (CpuEvent*)e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
    (void)stream;
    ((CpuEvent*)e)->t = now_ms();
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
    (void)flags;
    return cudaEventCreate(e);
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    (void)e;
    host_waits("cudaEventSynchronize", take_site());
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    *ms = (float)(((CpuEvent*)end)->t - ((CpuEvent*)start)->t);
    return cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t err) {
    switch (err) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        default: return "unknown error (cudacpu)";
    }
}

const char* cudaGetErrorName(cudaError_t err) {
    switch (err) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        default: return "cudaErrorUnknown";
    }
}

}  // extern "C"
