/*
tests/test_train_loop.c: the arithmetic of one optimizer step that common/ shares between the two
trainers, checked against values worked out by hand:
  - learning_rate_at (common/train_loop.h): every -K schedule at chosen steps (the warmup, the
    start, middle and last step of each decay, wsd's stable part and its decay start, a wsd decay
    longer than the run after the warmup, -w 0, a warmup longer than the run) against its closed
    form in double, written out here with the progress p of each step counted by hand;
  - grad_clip_scale: below, at and above the clip;
  - param_slices (common/params.h), which both trainers' AdamW walk: for ranges that start and end
    inside, at and across tensor boundaries, including empty tensors (pre mode), the pieces cover
    the range end to end, in tensor order, each within its tensor.
`make test-train-cli` runs it.
*/
#include "harness.h"
#include "../common/train_loop.h"

// -l 1e-3 -u 10 -q 0.1 -x 110: the decays of cosine and linear run over steps 10..109, p = (s - 10) / 100
static TrainArgs schedule(LrSchedule k, float wsd_frac) {
    TrainArgs a = args_defaults();
    a.learning_rate = 1e-3f;
    a.warmup_steps = 10;
    a.final_lr_frac = 0.1f;
    a.max_steps = 110;
    a.lr_schedule = k;
    a.wsd_decay_frac = wsd_frac;
    return a;
}

static int lr_checks = 0;

static void expect_lr(const TrainArgs* a, int step, double expected) {
    float got = learning_rate_at(a, step);
    double rel = fabs(got - expected) / expected;
    lr_checks++;
    CHECK(rel < 2e-6, "-K %s -w %g -u %d -x %d: step %d lr %.9g, expected %.9g (relative error %.2g)",
          LR_SCHEDULE_NAMES[a->lr_schedule], a->wsd_decay_frac, a->warmup_steps, a->max_steps, step, got, expected,
          rel);
}

// lr * (f + (1 - f) * left) with lr 1e-3, f 0.1
static double decayed(double left) { return 1e-3 * (0.1 + 0.9 * left); }

static void check_schedules(void) {
    for (int k = 0; k < NUM_LR_SCHEDULES; k++) {  // the warmup is the same for every schedule
        TrainArgs a = schedule((LrSchedule)k, 0.2f);
        expect_lr(&a, 0, 1e-4);  // (0 + 1) / 10
        expect_lr(&a, 4, 5e-4);
        expect_lr(&a, 9, 1e-3);
        expect_lr(&a, 10, 1e-3);  // the first step after the warmup: p = 0 (wsd: stable)
    }
    TrainArgs a = schedule(LR_COSINE, 0.2f);
    expect_lr(&a, 35, decayed((1.0 + cos(M_PI * 0.25)) / 2));  // p = 25/100
    expect_lr(&a, 60, decayed(0.5));                            // p = 1/2: half way
    expect_lr(&a, 109, decayed((1.0 + cos(M_PI * 0.99)) / 2));  // the last step, p = 99/100
    a = schedule(LR_LINEAR, 0.2f);
    expect_lr(&a, 35, decayed(0.75));
    expect_lr(&a, 85, decayed(0.25));
    expect_lr(&a, 109, decayed(0.01));
    a = schedule(LR_CONSTANT, 0.2f);
    expect_lr(&a, 60, 1e-3);
    expect_lr(&a, 109, 1e-3);
    // wsd -w 0.2: 22 decay steps, 88..109, p = (s - 88) / 22; stable before
    a = schedule(LR_WSD, 0.2f);
    expect_lr(&a, 60, 1e-3);
    expect_lr(&a, 87, 1e-3);
    expect_lr(&a, 88, 1e-3);  // p = 0
    expect_lr(&a, 93, decayed(1.0 - sqrt(5.0 / 22.0)));
    expect_lr(&a, 99, decayed(1.0 - sqrt(0.5)));
    expect_lr(&a, 109, decayed(1.0 - sqrt(21.0 / 22.0)));
    // wsd -w 0.95 would start decaying at step 110 - 105 = 5, inside the warmup: it starts after it,
    // at 10, p = (s - 10) / 100
    a = schedule(LR_WSD, 0.95f);
    expect_lr(&a, 9, 1e-3);
    expect_lr(&a, 60, decayed(1.0 - sqrt(0.5)));
    // wsd -w 0.7 of -x 10: 7 decay steps, 3..9 (0.7f times 10 in double is 6.99999988: rounded, not
    // truncated), no warmup
    a = schedule(LR_WSD, 0.7f);
    a.warmup_steps = 0;
    a.max_steps = 10;
    expect_lr(&a, 2, 1e-3);
    expect_lr(&a, 3, 1e-3);
    expect_lr(&a, 5, decayed(1.0 - sqrt(2.0 / 7.0)));
    // wsd -w 0: no decay at all
    a = schedule(LR_WSD, 0.0f);
    expect_lr(&a, 109, 1e-3);
    // a warmup longer than the run: the last step is still in it
    a = schedule(LR_COSINE, 0.2f);
    a.warmup_steps = 20;
    a.max_steps = 10;
    expect_lr(&a, 9, 5e-4);  // 10 / 20
    printf("learning_rate_at: %d values checked\n", lr_checks);
}

static void check_clip(void) {
    CHECK(grad_clip_scale(0.5f, GRAD_CLIP) == 1.0f, "norm 0.5: no clip");
    CHECK(grad_clip_scale(0.0f, GRAD_CLIP) == 1.0f, "norm 0: no clip");
    float s = grad_clip_scale(4.0f, GRAD_CLIP);
    CHECK(fabs(s - 1.0 / (4.0 + 1e-6)) < 1e-7, "norm 4: scale %.9g, expected 1 / (4 + 1e-6)", s);
    CHECK(fabs(4.0f * s - 1.0f) < 1e-6, "norm 4: the clipped norm %.9g, expected 1", 4.0f * s);
}

// the slices of [lo, hi) against a walk over the tensors one parameter at a time
static void check_slices_of(const size_t sizes[NUM_PARAMETER_TENSORS], size_t lo, size_t hi, const char* what) {
    ParamSlice slices[NUM_PARAMETER_TENSORS];
    int count = param_slices(sizes, lo, hi, slices);
    size_t next = lo;  // where the next slice must start
    int prev_tensor = -1, ok = 1;
    for (int s = 0; s < count && ok; s++) {
        size_t begin = 0;  // where the slice's tensor starts
        for (int i = 0; i < slices[s].tensor; i++) { begin += sizes[i]; }
        ok = slices[s].n > 0 && slices[s].start == next && slices[s].tensor > prev_tensor &&
             slices[s].start >= begin && slices[s].start + slices[s].n <= begin + sizes[slices[s].tensor];
        // a slice that stops before hi stops at the end of its tensor, and the next tensor with
        // parameters is the next slice's
        if (ok && slices[s].start + slices[s].n < hi) { ok = slices[s].start + slices[s].n == begin + sizes[slices[s].tensor]; }
        next = slices[s].start + slices[s].n;
        prev_tensor = slices[s].tensor;
    }
    CHECK(ok && next == (hi > lo ? hi : lo), "%s: [%zu, %zu) cut into %d slices that do not cover it tensor by tensor",
          what, lo, hi, count);
}

static void check_slices(void) {
    for (int mode = 0; mode < NUM_NORM_MODES; mode++) {  // pre mode: the siamese tensors are empty
        GPT2Config cfg = gpt2_config_for_depth(2, (NormMode)mode, 200, 64);
        cfg.channels = 16;
        cfg.num_heads = 2;
        size_t sizes[NUM_PARAMETER_TENSORS];
        fill_param_sizes(sizes, &cfg);
        size_t n = count_parameters(&cfg), boundary = sizes[P_WTE] + sizes[P_WPE];
        check_slices_of(sizes, 0, n, "all");
        check_slices_of(sizes, 0, 1, "the first");
        check_slices_of(sizes, n - 1, n, "the last");
        check_slices_of(sizes, boundary, boundary, "empty, at a boundary");
        check_slices_of(sizes, boundary - 1, boundary + 1, "across the wpe/next boundary");
        check_slices_of(sizes, boundary, n, "from a boundary");
        for (int ranks = 2; ranks <= 7; ranks++) {  // shards as ZeRO-1 cuts them, roughly
            for (int r = 0; r < ranks; r++) { check_slices_of(sizes, n * r / ranks, n * (r + 1) / ranks, "a shard"); }
        }
        ParamSlice slices[NUM_PARAMETER_TENSORS];
        int count = param_slices(sizes, 0, n, slices), nonempty = 0;
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { nonempty += sizes[i] > 0; }
        CHECK(count == nonempty, "%s: all parameters in %d slices, expected one per non-empty tensor (%d)",
              NORM_MODE_NAMES[mode], count, nonempty);
    }
}

int main(void) {
    check_schedules();
    check_clip();
    check_slices();
    return harness_finish("test_train_loop");
}
