/*
common/test_hooks.h: faults that the tests plant in a run, compiled only into test builds
(-DTEST_HOOKS: tests/bin/train_gpt2_hooks, built by tests/robust.mk). The trainers that `make`
builds hold none of this: common/train_loop.h includes this file only under TEST_HOOKS.

TRAIN_GPT2_NAN_STEPS="3,5-9" makes the gradient norm of those (1-based) optimizer steps NaN, as an
overflow in a real run would: the tests of the non-finite guard (nonfinite_step in
common/train_common.h) use it. The hook wraps the trainer's grad_sumsq, which the loop calls once
per step (train_reduce_gradients), so it needs nothing from either trainer; with several ranks
every rank's sum is NaN, and so is their total.
*/
#ifndef COMMON_TEST_HOOKS_H
#define COMMON_TEST_HOOKS_H

#include <math.h>
#include <stdlib.h>

// is `step` (1-based) one of TRAIN_GPT2_NAN_STEPS? A malformed list is a fatal error.
static inline int nan_injected_at(int step) {
    const char* spec = getenv("TRAIN_GPT2_NAN_STEPS");
    while (spec && *spec) {
        char* end;
        long lo = strtol(spec, &end, 10), hi = lo;
        if (end == spec) { fatal("TRAIN_GPT2_NAN_STEPS: expected steps like \"3,5-9\""); }
        if (*end == '-') { spec = end + 1; hi = strtol(spec, &end, 10); }
        if (step >= lo && step <= hi) { return 1; }
        spec = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0') { fatal("TRAIN_GPT2_NAN_STEPS: expected steps like \"3,5-9\""); }
    }
    return 0;
}

static struct {
    const TrainerOps* inner;  // the trainer's functions
    int step;                 // the steps whose gradient norm was asked for so far
} test_hooks;

static double test_hooks_grad_sumsq(GPT2* model, size_t lo, size_t hi) {
    double sumsq = test_hooks.inner->grad_sumsq(model, lo, hi);
    return nan_injected_at(++test_hooks.step) ? NAN : sumsq;
}

// the trainer's functions with the hooks in front; `first_step` is the step the run starts from
// (0, or the one resumed from). A malformed TRAIN_GPT2_NAN_STEPS ends the program here.
static inline TrainerOps test_hooks_wrap(const TrainerOps* ops, int first_step) {
    (void)nan_injected_at(0);
    test_hooks.inner = ops;
    test_hooks.step = first_step;
    TrainerOps hooked = *ops;
    hooked.grad_sumsq = test_hooks_grad_sumsq;
    return hooked;
}

#endif // COMMON_TEST_HOOKS_H
