/*
train_gpt2.c: SiameseNorm GPT-2 on the CPU, in fp32 with OpenMP. The model, its forward and
backward passes and AdamW are all in this file; what it shares with train_gpt2.cu (the parameter
table and checkpoint format, the command line, the training loop) and the fast matmul are headers
in common/.

What this trains. A GPT-2 whose residual stream is wired in one of three ways (dev/MODEL.md
describes the model, its equations and its backward paths in full):

    pre      x = x + F(LN(x))          GPT-2. Stable, but x grows with depth and deep layers fade.
    post     x = LN(x + F(x))          The original Transformer. Expressive, hard to train.
    siamese  two streams share every block F:
                 a = LN_x(x)                    the Post-Norm stream X, re-normalised
                 u = LN_in(a + LN_y(y))         the block input sees both streams
                 z = F(u)                       the block (attention or MLP) runs ONCE
                 x = a + z / c_l                X takes the update scaled by 1/c_l, c_l = sqrt(2(l+1))
                 y = y + z                      Y takes it whole: a clean identity path
             and at the end h = LN_f(LN_fx(x) + LN_fy(y)).

Each of the L layers has two sublayers (attention, then MLP); sublayer k = 2l + s. The streams are
stored at every sublayer boundary: resx[0] is the embedding, resx[k+1] the X stream after sublayer
k (in pre and post mode X is the only stream). The matmuls are the same in all three modes; SiameseNorm
adds only LayerNorms and element-wise adds, which cost little next to the matmuls.

How to read this file. Part 1 holds the layers, each with its forward and backward next to each
other, in the order the forward pass uses them: embedding, LayerNorm, the two-stream (siamese)
kernels, matmul, attention, GELU, the classifier. Part 2 wires them into the model: parameters,
activations, forward, backward, AdamW. Part 3 hands the model to the training loop shared with
train_gpt2.cu (common/train_loop.h) and walks through one training step, from the micro-batches
to AdamW, naming where each piece (schedule, clip, betas, weight decay) lives. Backward functions
ACCUMULATE (+=) into parameter gradients, which are zeroed once per optimizer step, so gradient
accumulation over micro-batches is free. Everything is allocated once, up front, from the
configuration.

Determinism: every parallel loop partitions its work statically and every reduction is summed in
a fixed order that does not depend on the number of threads, so a run is bit-for-bit repeatable.

The test program test_gpt2.c includes this file (with TESTING defined) and checks it against
PyTorch.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "common/utils.h"
#include "common/params.h"
#include "common/args.h"
#include "common/rng.h"
#include "common/matmul_tiled.h"  // matmul_tiled, the fast matmul (Part 1, "matmul")
#include "common/vec_math.h"      // vec_exp, an exp the compiler vectorizes (GELU, the softmaxes)

// ============================================================================
// Part 1: the layers
// ============================================================================

// ----------------------------------------------------------------------------
// embedding: e[b,t] = wte[token] + wpe[t]

static void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C) {
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float* o = out + ((size_t)b * T + t) * C;
            const float* we = wte + (size_t)tokens[b * T + t] * C;
            const float* pe = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) { o[i] = we[i] + pe[i]; }
        }
    }
}

// a token can appear many times in a batch, so threads split the CHANNELS (never the rows) to
// scatter-add into wte without races, and every channel is summed in the same (b, t) order
static void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C) {
    const int block = 16;
    #pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += block) {
        int c1 = c0 + block < C ? c0 + block : C;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                const float* d = dout + ((size_t)b * T + t) * C;
                float* dwe = dwte + (size_t)tokens[b * T + t] * C;
                float* dpe = dwpe + (size_t)t * C;
                for (int i = c0; i < c1; i++) { dwe[i] += d[i]; dpe[i] += d[i]; }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// LayerNorm over the C channels of a row: out = (x - mean) / sqrt(var + 1e-5) * w + b
// Forward saves mean and rstd = 1/sqrt(var + 1e-5); backward recomputes xhat from x with them.
// With recompute (-r 2) the backward also rebuilds the output itself from x and the saved mean and
// rstd: layernorm_row with STATS_SAVED skips the statistics and runs the same output loop, so the
// rebuilt row is the forward's, bit for bit.

typedef enum { STATS_COMPUTE, STATS_SAVED } StatsUse;  // compute and store mean, rstd; or read the stored ones

// (restrict: a row's output is never one of its inputs, so the compiler vectorizes the last loop)
static void layernorm_row(float* restrict out, float* mean_io, float* rstd_io, const float* restrict x,
                          const float* restrict w, const float* restrict b, int C, StatsUse stats) {
    if (stats == STATS_COMPUTE) {
        float sum = 0.0f;
        #pragma omp simd reduction(+ : sum)
        for (int i = 0; i < C; i++) { sum += x[i]; }
        float m = sum / C;
        float sq = 0.0f;
        #pragma omp simd reduction(+ : sq)
        for (int i = 0; i < C; i++) { float d = x[i] - m; sq += d * d; }
        *mean_io = m;
        *rstd_io = 1.0f / sqrtf(sq / C + 1e-5f);
    }
    float mean = *mean_io, rstd = *rstd_io;
    for (int i = 0; i < C; i++) { out[i] = (x[i] - mean) * rstd * w[i] + b[i]; }
}

// dinp += dL/dx of one row; dw, db accumulate the parameter gradients
static void layernorm_backward_row(float* restrict dinp, float* restrict dw, float* restrict db,
                                   const float* restrict dout, const float* restrict x, const float* restrict w,
                                   float mean, float rstd, int C) {
    // dL/dxhat = w * dout; dL/dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
    float dmean = 0.0f, dmean_xhat = 0.0f;
    #pragma omp simd reduction(+ : dmean, dmean_xhat)
    for (int i = 0; i < C; i++) {
        float xhat = (x[i] - mean) * rstd;
        float dxhat = w[i] * dout[i];
        dmean += dxhat;
        dmean_xhat += dxhat * xhat;
    }
    dmean /= C;
    dmean_xhat /= C;
    for (int i = 0; i < C; i++) {
        float xhat = (x[i] - mean) * rstd;
        dw[i] += dout[i] * xhat;
        db[i] += dout[i];
        dinp[i] += (w[i] * dout[i] - dmean - xhat * dmean_xhat) * rstd;
    }
}

// LayerNorm parameter gradients are sums over all rows. To keep them deterministic and independent
// of the thread count, rows are split into LN_CHUNKS fixed chunks; chunk k sums into its own slice of
// `partials` and the slices are added in chunk order at the end (add_partials).
#define LN_CHUNKS 16

static void chunk_rows(int chunk, int N, int* r0, int* r1) {
    *r0 = (int)((long)N * chunk / LN_CHUNKS);
    *r1 = (int)((long)N * (chunk + 1) / LN_CHUNKS);
}

// dst[d][i] += sum over chunks of partials[chunk][d][i], for d < n_dst and i < C. One thread: at most
// 6 x 16 x C additions, less work than waking a second thread for them.
static void add_partials(float* const* dst, int n_dst, const float* partials, int C) {
    for (int d = 0; d < n_dst; d++) {
        for (int i = 0; i < C; i++) {
            float sum = 0.0f;
            for (int k = 0; k < LN_CHUNKS; k++) { sum += partials[((size_t)k * n_dst + d) * C + i]; }
            dst[d][i] += sum;
        }
    }
}

// STATS_COMPUTE: the forward pass, which writes mean and rstd; STATS_SAVED: the backward's recompute
static void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                              const float* b, int N, int C, StatsUse stats) {
    #pragma omp parallel for
    for (int r = 0; r < N; r++) {
        layernorm_row(out + (size_t)r * C, mean + r, rstd + r, inp + (size_t)r * C, w, b, C, stats);
    }
}

// dinp += dL/dinp; dw, db += their gradients. `partials` holds LN_CHUNKS * 2C floats.
static void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                               const float* w, const float* mean, const float* rstd, int N, int C,
                               float* partials) {
    #pragma omp parallel for
    for (int k = 0; k < LN_CHUNKS; k++) {
        float* pdw = partials + (size_t)k * 2 * C;
        float* pdb = pdw + C;
        memset(pdw, 0, 2 * C * sizeof(float));
        int r0, r1;
        chunk_rows(k, N, &r0, &r1);
        for (int r = r0; r < r1; r++) {
            size_t o = (size_t)r * C;
            layernorm_backward_row(dinp + o, pdw, pdb, dout + o, inp + o, w, mean[r], rstd[r], C);
        }
    }
    float* dst[2] = {dw, db};
    add_partials(dst, 2, partials, C);
}

// ----------------------------------------------------------------------------
// The two-stream (siamese) kernels.
//
// siamese_input: the input side of a siamese sublayer, one pass over each row of x and y:
//     a = LN(x; lnx)    r = a + LN(y; lny)    u = LN(r; ln)
// It saves a (the base of the X update), r (the input of the last LN) and the three (mean, rstd)
// pairs. The final merge h = LN(LN(x; lnfx) + LN(y; lnfy); lnf) is the same computation without
// keeping a (a_out = NULL).

typedef struct {
    float *xw, *xb;  // LN of stream X (lnx1, lnx2 or lnfx)
    float *yw, *yb;  // LN of stream Y (lny1, lny2 or lnfy)
    float *w, *b;    // the LN that makes the block input (ln1, ln2 or lnf)
} SiameseNorms;

typedef struct {
    float *x_mean, *x_rstd, *y_mean, *y_rstd, *mean, *rstd;  // (N) each
} SiameseStats;

// STATS_SAVED: the backward's recompute (-r 2), which rebuilds a, r and u from x, y and the saved
// statistics through the same rows, bit for bit as the forward made them
static void siamese_input_forward(float* a_out, float* r_out, float* u_out, SiameseStats st, const float* x,
                                  const float* y, SiameseNorms p, int N, int C, StatsUse stats) {
    #pragma omp parallel for
    for (int row = 0; row < N; row++) {
        size_t o = (size_t)row * C;
        float* u = u_out + o;
        float* r = r_out + o;
        float* a = a_out ? a_out + o : u;  // without a_out, u's row holds a until u is written
        layernorm_row(a, st.x_mean + row, st.x_rstd + row, x + o, p.xw, p.xb, C, stats);  // a = LN(x)
        layernorm_row(r, st.y_mean + row, st.y_rstd + row, y + o, p.yw, p.yb, C, stats);  // r = LN(y) ...
        for (int i = 0; i < C; i++) { r[i] += a[i]; }                                     // ... + a
        layernorm_row(u, st.mean + row, st.rstd + row, r, p.w, p.b, C, stats);            // u = LN(r)
    }
}

// Backward of siamese_input for one row (all pointers at that row; mean and rstd in st[row]). On
// entry dx holds the gradient that reaches a directly (dL/dx_next, since x_next = a + z/c; 0 at
// the final merge), dy holds dL/dy_next (y_next = y + z passes it unchanged: the identity path)
// and du is dL/du. On exit dx = dL/dx and dy = dL/dy; dr and da receive dL/dr and dL/da, and the
// six LayerNorm parameter gradients accumulate into g:
//     dr = LN_back(du; r, ln)    da = dr + dx    dy += LN_back(dr; y, lny)    dx = LN_back(da; x, lnx)
static void siamese_input_backward_row(float* dx, float* dy, float* dr, float* da, const float* du, SiameseNorms g,
                                       SiameseNorms p, SiameseStats st, int row, const float* x, const float* y,
                                       const float* r, int C) {
    memset(dr, 0, C * sizeof(float));
    layernorm_backward_row(dr, g.w, g.b, du, r, p.w, st.mean[row], st.rstd[row], C);
    for (int i = 0; i < C; i++) { da[i] = dr[i] + dx[i]; }
    layernorm_backward_row(dy, g.yw, g.yb, dr, y, p.yw, st.y_mean[row], st.y_rstd[row], C);
    memset(dx, 0, C * sizeof(float));
    layernorm_backward_row(dx, g.xw, g.xb, da, x, p.xw, st.x_mean[row], st.x_rstd[row], C);
}

// all N rows; dr and da are (N, C) buffers for dL/dr and dL/da. The parameter gradients go through
// per-chunk partial sums (as in layernorm_backward): `partials` holds LN_CHUNKS * 6C floats.
static void siamese_input_backward(float* dx, float* dy, float* dr, float* da, const float* du, SiameseNorms grads,
                                   SiameseNorms params, SiameseStats st, const float* x, const float* y,
                                   const float* r, int N, int C, float* partials) {
    #pragma omp parallel for
    for (int k = 0; k < LN_CHUNKS; k++) {
        float* part = partials + (size_t)k * 6 * C;  // this chunk's share of the six gradients
        memset(part, 0, 6 * C * sizeof(float));
        SiameseNorms g = {part, part + C, part + 2 * C, part + 3 * C, part + 4 * C, part + 5 * C};
        int r0, r1;
        chunk_rows(k, N, &r0, &r1);
        for (int row = r0; row < r1; row++) {
            size_t o = (size_t)row * C;
            siamese_input_backward_row(dx + o, dy + o, dr + o, da + o, du + o, g, params, st, row, x + o, y + o,
                                       r + o, C);
        }
    }
    float* dst[6] = {grads.xw, grads.xb, grads.yw, grads.yb, grads.w, grads.b};  // SiameseNorms order
    add_partials(dst, 6, partials, C);
}

// siamese_update: the two residual updates after the block, x_next = a + z / c and y_next = y + z
static void siamese_update_forward(float* x_next, float* y_next, const float* a, const float* y, const float* z,
                                   float c, size_t n) {
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        x_next[i] = a[i] + z[i] / c;
        y_next[i] = y[i] + z[i];
    }
}

// its backward for the block output: dz = dx_next / c + dy_next (a's share is in siamese_input_backward)
static void siamese_update_backward(float* dz, const float* dx_next, const float* dy_next, float c, size_t n) {
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) { dz[i] = dx_next[i] / c + dy_next[i]; }
}

// pre and post mode: the plain residual add out = x + z
static void residual_forward(float* out, const float* x, const float* z, size_t n) {
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) { out[i] = x[i] + z[i]; }
}

// ----------------------------------------------------------------------------
// matmul, the linear layer: out (BT, OC) = inp (BT, C) . weight^T + bias, weight (OC, C) is (out, in)
// like nn.Linear. Its backward is two more products and a column sum:
//     dinp (BT, C)     += dout (BT, OC) . weight
//     dweight (OC, C)  += dout^T . inp
//     dbias (OC)       += the column sums of dout
// The plain loops below are exactly that. The matmuls are ~90% of the work, so the model calls
// matmul_forward and matmul_backward (after the loops), which hand the two products to
// matmul_tiled, C = bias + A . B or C += A . B with A and B read through strides, register-tiled
// and cache-blocked in common/matmul_tiled.h. It adds each element's terms in the same order as the
// loops; only its fused multiply-adds round differently, so the two agree to rounding (test_gpt2
// holds both to a sum in double). The plain loops are not called in training (`inline` keeps
// the compiler from warning about that).

// dbias += the column sums of dout (both versions below use it). Each column is summed down the
// rows in order; a thread takes 64 columns at a time and walks along the rows, so the inner loop
// reads dout contiguously (and in vectors) rather than one number per row.
static void bias_backward(float* dbias, const float* dout, int BT, int OC) {
    enum { COLS = 64 };
    #pragma omp parallel for
    for (int o0 = 0; o0 < OC; o0 += COLS) {
        int n = OC - o0 < COLS ? OC - o0 : COLS;
        float db[COLS] = {0};
        for (int bt = 0; bt < BT; bt++) {
            const float* row = dout + (size_t)bt * OC + o0;
            for (int i = 0; i < n; i++) { db[i] += row[i]; }
        }
        for (int i = 0; i < n; i++) { dbias[o0 + i] += db[i]; }
    }
}

static inline void matmul_forward_plain(float* out, const float* inp, const float* weight, const float* bias, int BT,
                                        int C, int OC) {
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        for (int o = 0; o < OC; o++) {
            float sum = bias ? bias[o] : 0.0f;
            for (int i = 0; i < C; i++) { sum += inp[(size_t)bt * C + i] * weight[(size_t)o * C + i]; }
            out[(size_t)bt * OC + o] = sum;
        }
    }
}

static inline void matmul_backward_plain(float* dinp, float* dweight, float* dbias, const float* dout,
                                         const float* inp, const float* weight, int BT, int C, int OC) {
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {  // dinp[bt][i] += sum over o of dout[bt][o] weight[o][i]
        for (int o = 0; o < OC; o++) {
            float d = dout[(size_t)bt * OC + o];
            for (int i = 0; i < C; i++) { dinp[(size_t)bt * C + i] += d * weight[(size_t)o * C + i]; }
        }
    }
    #pragma omp parallel for
    for (int o = 0; o < OC; o++) {  // dweight[o][i] += sum over bt of dout[bt][o] inp[bt][i]
        for (int bt = 0; bt < BT; bt++) {
            float d = dout[(size_t)bt * OC + o];
            for (int i = 0; i < C; i++) { dweight[(size_t)o * C + i] += d * inp[(size_t)bt * C + i]; }
        }
    }
    if (dbias) { bias_backward(dbias, dout, BT, OC); }
}

// what the model calls: the same products through the tiled kernel
static void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int BT, int C,
                           int OC) {
    matmul_tiled(out, bias, 0, inp, C, 1, weight, 1, C, BT, OC, C);  // out = bias + inp . weight^T: B[k][n] = weight[n][k]
}

static void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int BT, int C, int OC) {
    matmul_tiled(dinp, NULL, 1, dout, OC, 1, weight, C, 1, BT, C, OC);     // dinp += dout . weight
    matmul_tiled(dweight, NULL, 1, dout, 1, OC, inp, C, 1, OC, C, BT);     // dweight += dout^T . inp
    if (dbias) { bias_backward(dbias, dout, BT, OC); }
}

// ----------------------------------------------------------------------------
// causal self-attention. qkv rows are [q | k | v], each C = NH heads of HS = C/NH channels.
// For each (b, head, t): att[t2] = softmax over t2 <= t of q_t . k_t2 / sqrt(HS);  out_t = sum att[t2] v_t2.
// att (B, NH, T, T) keeps the softmax probabilities (zero above the diagonal) for the backward pass.
// The plain loops below are exactly that, one query at a time. Per (b, head) the three sums are
// matrix products (scores = Q K^T, out = P V, and in the backward four more), so the model calls
// attention_forward and attention_backward (after the loops), which compute them with the tiled
// matmul of common/matmul_tiled.h, one thread per (b, head); the plain loops are not called in
// training (test_gpt2 holds both to a sum in double).

// The softmax of row t in place: a[t2] = softmax over t2 <= t of scale a[t2] (the scores), 0 for
// t < t2 < T. And its backward for row t: d[t2] = a[t2] (d[t2] - sum_j a[j] d[j]) scale for
// t2 <= t, d holding dL/datt on entry and dL/d(score) on exit (score = q_t . k_t2).
static void attention_softmax_row(float* a, int t, int T, float scale) {
    float maxval = -INFINITY;
    #pragma omp simd reduction(max : maxval)
    for (int t2 = 0; t2 <= t; t2++) {
        a[t2] *= scale;
        maxval = a[t2] > maxval ? a[t2] : maxval;
    }
    for (int t2 = 0; t2 <= t; t2++) { a[t2] = vec_exp(a[t2] - maxval); }
    float sum = 0.0f;
    #pragma omp simd reduction(+ : sum)
    for (int t2 = 0; t2 <= t; t2++) { sum += a[t2]; }
    float inv = 1.0f / sum;
    for (int t2 = 0; t2 <= t; t2++) { a[t2] *= inv; }
    for (int t2 = t + 1; t2 < T; t2++) { a[t2] = 0.0f; }
}

static void attention_softmax_backward_row(float* d, const float* a, int t, float scale) {
    float sum = 0.0f;
    #pragma omp simd reduction(+ : sum)
    for (int t2 = 0; t2 <= t; t2++) { sum += a[t2] * d[t2]; }
    for (int t2 = 0; t2 <= t; t2++) { d[t2] = a[t2] * (d[t2] - sum) * scale; }
}

static inline void attention_forward_plain(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    size_t C3 = 3 * (size_t)C;
    #pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float* q = qkv + ((size_t)b * T + t) * C3 + h * HS;
                float* a = att + (((size_t)b * NH + h) * T + t) * T;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = qkv + ((size_t)b * T + t2) * C3 + C + h * HS;
                    float dot = 0.0f;
                    for (int i = 0; i < HS; i++) { dot += q[i] * k[i]; }
                    a[t2] = dot;
                }
                attention_softmax_row(a, t, T, scale);
                float* o = out + ((size_t)b * T + t) * C + h * HS;
                for (int i = 0; i < HS; i++) { o[i] = 0.0f; }
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * HS;
                    for (int i = 0; i < HS; i++) { o[i] += a[t2] * v[i]; }
                }
            }
        }
    }
}

// dqkv += the gradient of qkv. One thread owns a whole (b, head): the k and v of position t2 receive
// gradient from every t >= t2 of the same head, so no two threads touch the same element.
// datt_scratch holds (B, NH, T) floats (or more).
static inline void attention_backward_plain(float* dqkv, float* datt_scratch, const float* dout, const float* qkv,
                                            const float* att, int B, int T, int C, int NH) {
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    size_t C3 = 3 * (size_t)C;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            float* datt = datt_scratch + ((size_t)b * NH + h) * T;
            for (int t = 0; t < T; t++) {
                const float* a = att + (((size_t)b * NH + h) * T + t) * T;
                const float* d = dout + ((size_t)b * T + t) * C + h * HS;
                const float* q = qkv + ((size_t)b * T + t) * C3 + h * HS;
                float* dq = dqkv + ((size_t)b * T + t) * C3 + h * HS;
                // through out_t = sum att[t2] v_t2
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * HS;
                    float* dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * C + h * HS;
                    float dot = 0.0f;
                    for (int i = 0; i < HS; i++) { dot += d[i] * v[i]; }
                    datt[t2] = dot;
                    for (int i = 0; i < HS; i++) { dv[i] += a[t2] * d[i]; }
                }
                attention_softmax_backward_row(datt, a, t, scale);  // datt[t2]: dL/d(score)
                // through score[t2] = q_t . k_t2
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = qkv + ((size_t)b * T + t2) * C3 + C + h * HS;
                    float* dk = dqkv + ((size_t)b * T + t2) * C3 + C + h * HS;
                    for (int i = 0; i < HS; i++) { dq[i] += datt[t2] * k[i]; dk[i] += datt[t2] * q[i]; }
                }
            }
        }
    }
}

// what the model calls: per (b, head), the same sums as products through the tiled matmul, in blocks
// of ATT_ROWS queries: the queries [t0, t1) see only the keys [0, t1), so the scores, and the terms
// of the products after them, of the keys past the block's last query are neither computed nor
// added. Q, K and V are read in place (rows 3C apart); one thread computes a whole (b, head).
//     scores  att[t][t2] = q_t . k_t2                 (A = Q, B = K^T)      t2 < t1
//     softmax of att[t][t2] / sqrt(HS) over t2 <= t, 0 for t2 > t
//     out     out_t = sum_t2 att[t][t2] v_t2          (A = att, B = V)      t2 < t1
#define ATT_ROWS 64

static void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    size_t C3 = 3 * (size_t)C;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float* q = qkv + (size_t)b * T * C3 + h * HS;  // q_t = q + t C3; k and v C and 2C further
            const float* k = q + C;
            const float* v = q + 2 * C;
            float* a = att + ((size_t)b * NH + h) * T * T;
            float* o = out + (size_t)b * T * C + h * HS;
            for (int t0 = 0; t0 < T; t0 += ATT_ROWS) {
                int t1 = t0 + ATT_ROWS < T ? t0 + ATT_ROWS : T;
                matmul_tiled_serial(a + (size_t)t0 * T, T, NULL, 0, q + t0 * C3, C3, 1, k, 1, C3, t1 - t0, t1, HS);
                for (int t = t0; t < t1; t++) { attention_softmax_row(a + (size_t)t * T, t, T, scale); }
                matmul_tiled_serial(o + (size_t)t0 * C, C, NULL, 0, a + (size_t)t0 * T, T, 1, v, C3, 1, t1 - t0, HS, t1);
            }
        }
    }
}

// dqkv += the gradient of qkv, per (b, head), with datt (B, NH, T, T) as scratch:
//     datt[t][t2] = dout_t . v_t2                        t2 < t1 of the query block
//     dpre[t][t2] = att (datt - sum_j att[t][j] datt[t][j]) / sqrt(HS), in place of datt (0 for t2 > t)
//     dq_t  += sum_t2 dpre[t][t2] k_t2                   t2 < t1
// and, in blocks of ATT_ROWS keys [s0, s1) that only the queries t >= s0 see:
//     dv_t2 += sum_t att[t][t2] dout_t                   (A = att^T, B = dout)    t >= s0
//     dk_t2 += sum_t dpre[t][t2] q_t                     (A = dpre^T, B = Q)      t >= s0
static void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B,
                               int T, int C, int NH) {
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    size_t C3 = 3 * (size_t)C;
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            size_t bh = (size_t)b * NH + h;
            const float* q = qkv + (size_t)b * T * C3 + h * HS;
            const float* k = q + C;
            const float* v = q + 2 * C;
            float* dq = dqkv + (size_t)b * T * C3 + h * HS;
            float* dk = dq + C;
            float* dv = dq + 2 * C;
            const float* a = att + bh * T * T;
            float* d = datt + bh * T * T;
            const float* g = dout + (size_t)b * T * C + h * HS;
            for (int t0 = 0; t0 < T; t0 += ATT_ROWS) {
                int t1 = t0 + ATT_ROWS < T ? t0 + ATT_ROWS : T;
                matmul_tiled_serial(d + (size_t)t0 * T, T, NULL, 0, g + t0 * C, C, 1, v, 1, C3, t1 - t0, t1, HS);
                for (int t = t0; t < t1; t++) {  // through the softmax
                    float* dr = d + (size_t)t * T;
                    attention_softmax_backward_row(dr, a + (size_t)t * T, t, scale);
                    for (int t2 = t + 1; t2 < t1; t2++) { dr[t2] = 0.0f; }
                }
                matmul_tiled_serial(dq + t0 * C3, C3, NULL, 1, d + (size_t)t0 * T, T, 1, k, C3, 1, t1 - t0, HS, t1);
            }
            for (int s0 = 0; s0 < T; s0 += ATT_ROWS) {
                int s1 = s0 + ATT_ROWS < T ? s0 + ATT_ROWS : T;
                size_t first = (size_t)s0 * T + s0;  // att[s0][s0]: A[m][k] = att[s0 + k][s0 + m]
                matmul_tiled_serial(dv + s0 * C3, C3, NULL, 1, a + first, 1, T, g + s0 * C, C, 1, s1 - s0, HS, T - s0);
                matmul_tiled_serial(dk + s0 * C3, C3, NULL, 1, d + first, 1, T, q + s0 * C3, C3, 1, s1 - s0, HS, T - s0);
            }
        }
    }
}

// ----------------------------------------------------------------------------
// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). With u the argument of
// tanh, 0.5 (1 + tanh(u)) is the logistic function s = 1 / (1 + e), e = e^(-2u), so GELU(x) = x s;
// that form needs one exp, which vec_exp (common/vec_math.h) computes in vector code. Its derivative:
//     GELU'(x) = s + x s' = s + 2 x s (1 - s) du/dx,   du/dx = sqrt(2/pi) (1 + 3 0.044715 x^2)
// (1 - tanh(u)^2 = 4 s (1 - s)). 1 - s is taken as e s where s is near 1 (x > 0), which 1 - s would
// round away, and as 1 - s elsewhere (where e s could be inf times 0).

#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)

static inline float gelu_exp(float x) { return vec_exp(-2.0f * GELU_SCALE * (x + 0.044715f * x * x * x)); }

static void gelu_forward(float* out, const float* inp, size_t n) {
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) { out[i] = inp[i] / (1.0f + gelu_exp(inp[i])); }
}

// dinp = dout * GELU'(inp)  (overwrites: the MLP hidden gradient has this single source)
static void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
    #pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], e = gelu_exp(x);
        float s = 1.0f / (1.0f + e);
        float one_minus_s = s < 0.5f ? 1.0f - s : e * s;
        float du = GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = dout[i] * (s + 2.0f * x * du * (s * one_minus_s));
    }
}

// ----------------------------------------------------------------------------
// the classifier: softmax cross-entropy over the V real vocabulary entries of each logits row
// (entries V..Vp-1 are padding). Forward saves the log-sum-exp of each row; backward turns the
// logits IN PLACE into dL/dlogits = (softmax - onehot) * dloss, so the probabilities never need
// a buffer of their own.

static void crossentropy_forward(float* losses, float* lse, const float* logits, const int* targets, int BT, int V,
                                 int Vp) {
    #pragma omp parallel for
    for (int r = 0; r < BT; r++) {
        const float* l = logits + (size_t)r * Vp;
        float maxval = -INFINITY;
        #pragma omp simd reduction(max : maxval)
        for (int i = 0; i < V; i++) { maxval = l[i] > maxval ? l[i] : maxval; }
        float sum = 0.0f;
        #pragma omp simd reduction(+ : sum)
        for (int i = 0; i < V; i++) { sum += vec_exp(l[i] - maxval); }
        lse[r] = maxval + logf(sum);
        losses[r] = lse[r] - l[targets[r]];
    }
}

static void crossentropy_backward(float* logits, const float* lse, const int* targets, float dloss, int BT, int V,
                                  int Vp) {
    #pragma omp parallel for
    for (int r = 0; r < BT; r++) {
        float* l = logits + (size_t)r * Vp;
        for (int i = 0; i < V; i++) { l[i] = vec_exp(l[i] - lse[r]) * dloss; }
        for (int i = V; i < Vp; i++) { l[i] = 0.0f; }
        l[targets[r]] -= dloss;
    }
}

// ============================================================================
// Part 2: the model
// ============================================================================

// the parameters, in checkpoint order: a pointer per tensor, named and shaped in common/params.h's
// PARAMETER_TENSORS (wte, wpe, then per layer the attention and MLP sublayers' LayerNorms and
// matrices, then the final LayerNorms); their sizes come from fill_param_sizes.
#define PARAM_FIELD(index, name) float* name;
typedef struct { PARAMETER_TENSORS(PARAM_FIELD) } ParameterTensors;
_Static_assert(sizeof(ParameterTensors) == NUM_PARAMETER_TENSORS * sizeof(float*), "one pointer per tensor");

static void point_parameters(ParameterTensors* p, float* memory, const size_t sizes[NUM_PARAMETER_TENSORS]) {
    float** ptrs = (float**)p;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { ptrs[i] = memory; memory += sizes[i]; }
}

// The activations and the backward scratch each live in one allocation. next_tensor hands out the
// next n floats of it; with memory NULL it only counts, so one function both sizes and points.
static float* next_tensor(float* memory, size_t* used, size_t n) {
    float* t = memory ? memory + *used : NULL;
    *used += n;
    return t;
}

// the activations the backward pass needs, saved by the forward pass. k indexes sublayers (2L), l
// layers; the math's names (dev/MODEL.md) are a = LN(x), r = a + LN(y) (post: x + z), u, z, h.
//
// Recompute (-r, as llm.c's flag) trades memory for a little work in the backward pass:
//   -r 0  every tensor below is kept for every layer;
//   -r 1  fch_gelu holds one layer: the backward rebuilds each layer's GELU output from its fch;
//   -r 2  also lnx, lnsum and blockin hold one sublayer: the backward rebuilds r and u from the
//         streams (x, y; post: x and z) and the saved row statistics (mean, rstd).
// What is rebuilt comes out of the same function on the same inputs as in the forward pass (gelu_forward,
// layernorm_forward or siamese_input_forward with STATS_SAVED, residual_forward), so it is the same
// floats: losses, gradients and checkpoints do not depend on -r, bit for bit.
typedef struct {
    float* resx;       // (2L+1, B, T, C) stream X at each sublayer boundary; resx[0] is the embedding
    float* resy;       // (2L+1, B, T, C) siamese: stream Y
    float* lnx;        // (2L, B, T, C)   siamese: a = LN(x), the base of the X update (-r 2: one sublayer)
    float* lnsum;      // (2L, B, T, C)   r, what the sublayer's main LN normalises: siamese a + LN(y), post x + z
                       //                 (-r 2: one sublayer)
    float* blockin;    // (2L, B, T, C)   the block input u: pre LN(x), siamese LN(r); post reads x (-r 2: one sublayer)
    float* ln_mean;    // (2L, B, T)      statistics of the sublayer's main LN (ln1 / ln2)
    float* ln_rstd;    // (2L, B, T)
    float* lnx_mean;   // (2L, B, T)      siamese: statistics of LN(x)
    float* lnx_rstd;   // (2L, B, T)
    float* lny_mean;   // (2L, B, T)      siamese: statistics of LN(y)
    float* lny_rstd;   // (2L, B, T)
    float* qkv;        // (L, B, T, 3C)
    float* att;        // (L, B, NH, T, T) attention probabilities
    float* atty;       // (L, B, T, C)    attention output before its projection
    float* fch;        // (L, B, T, 4C)   MLP hidden pre-activation
    float* fch_gelu;   // (L, B, T, 4C)   GELU(fch) (-r 1 and 2: one layer)
    float* blockout;   // (2L, B, T, C)   z, the block output
    float* lnfsum;     // (B, T, C)       siamese: r of the final merge, LN(x; lnfx) + LN(y; lnfy)
    float* lnfx_mean;  // (B, T)          siamese: statistics of the final LN(x)
    float* lnfx_rstd;  // (B, T)
    float* lnfy_mean;  // (B, T)          siamese: statistics of the final LN(y)
    float* lnfy_rstd;  // (B, T)
    float* lnf;        // (B, T, C)       h, the final LN output
    float* lnf_mean;   // (B, T)
    float* lnf_rstd;   // (B, T)
    float* logits;     // (B, T, Vp)      overwritten by dL/dlogits in the backward pass
    float* lse;        // (B, T)          log-sum-exp of each logits row
    float* losses;     // (B, T)
} ActivationTensors;

// points every activation tensor into `memory` (NULL: only counts); returns the floats they take.
// recompute is -r (0, 1 or 2).
static size_t point_activations(ActivationTensors* t, float* memory, const GPT2Config* cfg, int B, int T,
                                int recompute) {
    size_t L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads, Vp = cfg->padded_vocab_size;
    size_t BT = (size_t)B * T;
    // the mode-dependent tensors exist or are empty (common/params.h, NORM_MODE_LAYOUTS): S, U, R are 0 or 1
    const NormModeLayout* mode = norm_mode_layout(cfg->norm_mode);
    size_t S = mode->two_streams, U = mode->block_input, R = mode->ln_sum;
    size_t gelu_layers = recompute >= 1 ? 1 : L;      // layers of fch_gelu kept
    size_t ln_sublayers = recompute >= 2 ? 1 : 2 * L;  // sublayers of lnx, lnsum and blockin kept
    size_t n = 0;
    t->resx = next_tensor(memory, &n, (2 * L + 1) * BT * C);
    t->resy = next_tensor(memory, &n, S * (2 * L + 1) * BT * C);
    t->lnx = next_tensor(memory, &n, S * ln_sublayers * BT * C);
    t->lnsum = next_tensor(memory, &n, R * ln_sublayers * BT * C);
    t->blockin = next_tensor(memory, &n, U * ln_sublayers * BT * C);
    t->ln_mean = next_tensor(memory, &n, 2 * L * BT);
    t->ln_rstd = next_tensor(memory, &n, 2 * L * BT);
    t->lnx_mean = next_tensor(memory, &n, S * 2 * L * BT);
    t->lnx_rstd = next_tensor(memory, &n, S * 2 * L * BT);
    t->lny_mean = next_tensor(memory, &n, S * 2 * L * BT);
    t->lny_rstd = next_tensor(memory, &n, S * 2 * L * BT);
    t->qkv = next_tensor(memory, &n, L * BT * 3 * C);
    t->att = next_tensor(memory, &n, L * B * NH * T * T);
    t->atty = next_tensor(memory, &n, L * BT * C);
    t->fch = next_tensor(memory, &n, L * BT * 4 * C);
    t->fch_gelu = next_tensor(memory, &n, gelu_layers * BT * 4 * C);
    t->blockout = next_tensor(memory, &n, 2 * L * BT * C);
    t->lnfsum = next_tensor(memory, &n, S * BT * C);
    t->lnfx_mean = next_tensor(memory, &n, S * BT);
    t->lnfx_rstd = next_tensor(memory, &n, S * BT);
    t->lnfy_mean = next_tensor(memory, &n, S * BT);
    t->lnfy_rstd = next_tensor(memory, &n, S * BT);
    t->lnf = next_tensor(memory, &n, BT * C);
    t->lnf_mean = next_tensor(memory, &n, BT);
    t->lnf_rstd = next_tensor(memory, &n, BT);
    t->logits = next_tensor(memory, &n, BT * Vp);
    t->lse = next_tensor(memory, &n, BT);
    t->losses = next_tensor(memory, &n, BT);
    return n;
}

// scratch for the backward pass, reused by every layer (only the streams' gradients travel)
typedef struct {
    float* dx;          // (B, T, C)  dL/d(stream X) at the current sublayer boundary
    float* dy;          // (B, T, C)  dL/d(stream Y)
    float* dblockout;   // (B, T, C)  dz
    float* dblockin;    // (B, T, C)  du
    float* dlnsum;      // (B, T, C)  dr, the gradient of the main LN's input
    float* dlnx;        // (B, T, C)  siamese: da, the gradient of a = LN(x)
    float* dqkv;        // (B, T, 3C)
    float* datty;       // (B, T, C)
    float* dfch;        // (B, T, 4C)
    float* dfch_gelu;   // (B, T, 4C)
    float* datt;        // (B, NH, T, T) the gradient of the attention probabilities
    float* dlnf;        // (B, T, C)  dh
    float* ln_partials; // (LN_CHUNKS, 6C) per-chunk LayerNorm parameter gradients
} GradScratch;

// points every scratch tensor into `memory` (NULL: only counts); returns the floats they take
static size_t point_scratch(GradScratch* t, float* memory, const GPT2Config* cfg, int B, int T) {
    size_t C = cfg->channels, NH = cfg->num_heads, BT = (size_t)B * T;
    size_t S = norm_mode_layout(cfg->norm_mode)->two_streams;
    size_t n = 0;
    t->dx = next_tensor(memory, &n, BT * C);
    t->dy = next_tensor(memory, &n, BT * C);
    t->dblockout = next_tensor(memory, &n, BT * C);
    t->dblockin = next_tensor(memory, &n, BT * C);
    t->dlnsum = next_tensor(memory, &n, BT * C);
    t->dlnx = next_tensor(memory, &n, S * BT * C);
    t->dqkv = next_tensor(memory, &n, BT * 3 * C);
    t->datty = next_tensor(memory, &n, BT * C);
    t->dfch = next_tensor(memory, &n, BT * 4 * C);
    t->dfch_gelu = next_tensor(memory, &n, BT * 4 * C);
    t->datt = next_tensor(memory, &n, B * NH * T * T);
    t->dlnf = next_tensor(memory, &n, BT * C);
    t->ln_partials = next_tensor(memory, &n, LN_CHUNKS * 6 * C);
    return n;
}

typedef struct GPT2 {
    GPT2Config config;
    size_t param_sizes[NUM_PARAMETER_TENSORS];  // floats in each parameter tensor (common/params.h)
    size_t num_parameters;
    ParameterTensors params;  // the tensors, pointing into params_memory
    float* params_memory;     // (num_parameters) all parameters, in checkpoint order
    ParameterTensors grads;   // the same layout, pointing into grads_memory
    float* grads_memory;      // (num_parameters)
    float* m_memory;  // (opt_hi - opt_lo) AdamW first moment, of parameters [opt_lo, opt_hi)
    float* v_memory;  // (opt_hi - opt_lo) AdamW second moment, of the same
    size_t opt_lo, opt_hi;  // all parameters (set by gpt2_allocate), or a rank's shard (ZeRO-1: set before it)
    ActivationTensors acts;
    float* acts_memory;       // (num_activations) every activation tensor
    size_t num_activations;
    GradScratch scratch;
    float* scratch_memory;    // every scratch tensor
    int batch_size, seq_len;  // the (B, T) the buffers were allocated for
    int recompute;            // -r: 0, 1 or 2 (ActivationTensors); set before gpt2_allocate, 0 unless set
    int cur_B, cur_T;         // the (B, T) of the last forward pass
    int* inputs;              // (B, T) tokens of the last forward pass
    int* targets;             // (B, T) its targets, or none
    int has_targets;
    float mean_loss;          // of the last forward pass with targets
    // NULL in training. test_gpt2.c sets it to see the stream gradients: gpt2_backward calls it at
    // every sublayer boundary b (2L down to 0) with dL/dx and dL/dy there (dy NULL outside siamese).
    void (*stream_grad_hook)(void* ctx, int boundary, const float* dx, const float* dy);
    void* stream_grad_ctx;
} GPT2;

static void observe_stream_grads(GPT2* m, int boundary) {
    if (m->stream_grad_hook) {
        const float* dy = norm_mode_layout(m->config.norm_mode)->two_streams ? m->scratch.dy : NULL;
        m->stream_grad_hook(m->stream_grad_ctx, boundary, m->scratch.dx, dy);
    }
}

// sets the config and allocates the parameters (not yet initialised)
static void gpt2_init_params(GPT2* m, const GPT2Config* cfg) {
    memset(m, 0, sizeof(*m));
    m->config = *cfg;
    fill_param_sizes(m->param_sizes, cfg);
    m->num_parameters = count_parameters(cfg);
    m->params_memory = (float*)malloc_check(m->num_parameters * sizeof(float), "parameters");
    point_parameters(&m->params, m->params_memory, m->param_sizes);
}

// our checkpoint, or llm.c's GPT-2 (float32 or bf16) as a pre-mode model (common/params.h)
static void gpt2_build_from_checkpoint(GPT2* m, const char* path) {
    CheckpointFile ck;
    checkpoint_open(&ck, path);
    gpt2_init_params(m, &ck.config);
    checkpoint_read_params(&ck, m->params_memory);
}

static void gpt2_build_fresh(GPT2* m, const GPT2Config* cfg, uint64_t seed) {
    gpt2_init_params(m, cfg);
    params_init_fresh(m->params_memory, cfg, seed);
}

// allocates, once, everything training with micro-batches of (B, T) needs
static void gpt2_allocate(GPT2* m, int B, int T) {
    const GPT2Config* cfg = &m->config;
    m->batch_size = B;
    m->seq_len = T;
    m->grads_memory = (float*)calloc_check(m->num_parameters, sizeof(float), "gradients");
    point_parameters(&m->grads, m->grads_memory, m->param_sizes);
    if (m->opt_hi == 0) { m->opt_hi = m->num_parameters; }
    m->m_memory = (float*)calloc_check(m->opt_hi - m->opt_lo, sizeof(float), "AdamW m");
    m->v_memory = (float*)calloc_check(m->opt_hi - m->opt_lo, sizeof(float), "AdamW v");
    if (m->recompute < 0 || m->recompute > RECOMPUTE_MAX) {
        fatal("recompute -r %d is out of range [0, %d]", m->recompute, RECOMPUTE_MAX);
    }
    m->num_activations = point_activations(&m->acts, NULL, cfg, B, T, m->recompute);
    m->acts_memory = (float*)malloc_check(m->num_activations * sizeof(float), "activations");
    point_activations(&m->acts, m->acts_memory, cfg, B, T, m->recompute);
    size_t num_scratch = point_scratch(&m->scratch, NULL, cfg, B, T);
    m->scratch_memory = (float*)malloc_check(num_scratch * sizeof(float), "backward scratch");
    point_scratch(&m->scratch, m->scratch_memory, cfg, B, T);
    m->inputs = (int*)malloc_check((size_t)B * T * sizeof(int), "inputs");
    m->targets = (int*)malloc_check((size_t)B * T * sizeof(int), "targets");
}

static void gpt2_free(GPT2* m) {
    free(m->params_memory);
    free(m->grads_memory);
    free(m->m_memory);
    free(m->v_memory);
    free(m->acts_memory);
    free(m->scratch_memory);
    free(m->inputs);
    free(m->targets);
}

// the three LayerNorms of sublayer s (0 attention, 1 MLP) of layer l, for parameters or gradients
static SiameseNorms sublayer_norms(const ParameterTensors* p, int l, int s, int C) {
    size_t o = (size_t)l * C;
    SiameseNorms n;
    n.xw = (s == 0 ? p->lnx1w : p->lnx2w) + o;
    n.xb = (s == 0 ? p->lnx1b : p->lnx2b) + o;
    n.yw = (s == 0 ? p->lny1w : p->lny2w) + o;
    n.yb = (s == 0 ? p->lny1b : p->lny2b) + o;
    n.w = (s == 0 ? p->ln1w : p->ln2w) + o;
    n.b = (s == 0 ? p->ln1b : p->ln2b) + o;
    return n;
}

static SiameseNorms final_norms(const ParameterTensors* p) {
    SiameseNorms n = {p->lnfxw, p->lnfxb, p->lnfyw, p->lnfyb, p->lnfw, p->lnfb};
    return n;
}

static SiameseStats sublayer_stats(const ActivationTensors* acts, int k, size_t BT) {
    SiameseStats st = {acts->lnx_mean + k * BT, acts->lnx_rstd + k * BT, acts->lny_mean + k * BT,
                       acts->lny_rstd + k * BT, acts->ln_mean + k * BT,  acts->ln_rstd + k * BT};
    return st;
}

static SiameseStats final_stats(const ActivationTensors* acts) {
    SiameseStats st = {acts->lnfx_mean, acts->lnfx_rstd, acts->lnfy_mean, acts->lnfy_rstd, acts->lnf_mean, acts->lnf_rstd};
    return st;
}

// where sublayer k's a, r and u are kept (-r 2: all sublayers share one), and layer l's GELU output
// (-r 1 and 2: all layers share one), counted in (B, T, C) and (B, T, 4C) tensors
static size_t ln_slot(const GPT2* m, int k) { return m->recompute >= 2 ? 0 : (size_t)k; }
static size_t gelu_slot(const GPT2* m, int l) { return m->recompute >= 1 ? 0 : (size_t)l; }

// ----------------------------------------------------------------------------
// forward

// the block of sublayer s of layer l: z = Attn_l(u) or z = MLP_l(u)
static void block_forward(GPT2* m, int l, int s, float* z, const float* u, int B, int T) {
    const GPT2Config* cfg = &m->config;
    int C = cfg->channels, NH = cfg->num_heads, BT = B * T;
    ParameterTensors* p = &m->params;
    ActivationTensors* acts = &m->acts;
    size_t lBT = (size_t)l * BT;
    if (s == 0) {
        float* qkv = acts->qkv + lBT * 3 * C;
        float* atty = acts->atty + lBT * C;
        matmul_forward(qkv, u, p->qkvw + (size_t)l * 3 * C * C, p->qkvb + (size_t)l * 3 * C, BT, C, 3 * C);
        attention_forward(atty, acts->att + lBT * NH * T, qkv, B, T, C, NH);
        matmul_forward(z, atty, p->attprojw + (size_t)l * C * C, p->attprojb + (size_t)l * C, BT, C, C);
    } else {
        float* fch = acts->fch + lBT * 4 * C;
        float* fch_gelu = acts->fch_gelu + gelu_slot(m, l) * BT * 4 * C;
        matmul_forward(fch, u, p->fcw + (size_t)l * 4 * C * C, p->fcb + (size_t)l * 4 * C, BT, C, 4 * C);
        gelu_forward(fch_gelu, fch, (size_t)BT * 4 * C);
        matmul_forward(z, fch_gelu, p->fcprojw + (size_t)l * C * 4 * C, p->fcprojb + (size_t)l * C, BT, 4 * C, C);
    }
}

// forward pass on tokens (B, T); with targets, also the mean cross-entropy loss, returned and kept
// in m->mean_loss (-1 without). B and T may be smaller than allocated (sampling runs B = 1).
static float gpt2_forward(GPT2* m, const int* inputs, const int* targets, int B, int T) {
    const GPT2Config* cfg = &m->config;
    if (m->acts_memory == NULL) { fatal("gpt2_forward: buffers not allocated (call gpt2_allocate)"); }
    if (B > m->batch_size || T > m->seq_len || B < 1 || T < 1) {
        fatal("gpt2_forward: batch (%d, %d) exceeds the allocated (%d, %d)", B, T, m->batch_size, m->seq_len);
    }
    int V = cfg->vocab_size, Vp = cfg->padded_vocab_size, L = cfg->num_layers, C = cfg->channels;
    int BT = B * T;
    check_tokens(inputs, targets, BT, V);
    m->cur_B = B;
    m->cur_T = T;
    memcpy(m->inputs, inputs, (size_t)BT * sizeof(int));
    m->has_targets = targets != NULL;
    if (targets) { memcpy(m->targets, targets, (size_t)BT * sizeof(int)); }

    ParameterTensors* p = &m->params;
    ActivationTensors* acts = &m->acts;
    size_t N = (size_t)BT * C;  // floats in one (B, T, C) tensor
    NormMode mode = cfg->norm_mode;

    encoder_forward(acts->resx, inputs, p->wte, p->wpe, B, T, C);
    if (norm_mode_layout(mode)->two_streams) { memcpy(acts->resy, acts->resx, N * sizeof(float)); }  // both start as e

    for (int k = 0; k < 2 * L; k++) {
        int l = k / 2, s = k % 2;
        float* x = acts->resx + k * N;
        float* x_next = acts->resx + (k + 1) * N;
        float* z = acts->blockout + k * N;
        float* lnw = (s == 0 ? p->ln1w : p->ln2w) + (size_t)l * C;
        float* lnb = (s == 0 ? p->ln1b : p->ln2b) + (size_t)l * C;
        float* mean = acts->ln_mean + (size_t)k * BT;
        float* rstd = acts->ln_rstd + (size_t)k * BT;
        switch (mode) {  // no default: -Wswitch names a mode this does not handle
            case NORM_PRE: {
                float* u = acts->blockin + ln_slot(m, k) * N;
                layernorm_forward(u, mean, rstd, x, lnw, lnb, BT, C, STATS_COMPUTE);  // u = LN(x)
                block_forward(m, l, s, z, u, B, T);                              // z = F(u)
                residual_forward(x_next, x, z, N);                               // x = x + z
                break;
            }
            case NORM_POST: {
                float* r = acts->lnsum + ln_slot(m, k) * N;
                block_forward(m, l, s, z, x, B, T);                              // z = F(x)
                residual_forward(r, x, z, N);                                    // r = x + z
                layernorm_forward(x_next, mean, rstd, r, lnw, lnb, BT, C, STATS_COMPUTE);  // x = LN(r)
                break;
            }
            case NORM_SIAMESE: {
                float* a = acts->lnx + ln_slot(m, k) * N;
                float* r = acts->lnsum + ln_slot(m, k) * N;
                float* u = acts->blockin + ln_slot(m, k) * N;
                float* y = acts->resy + k * N;
                float* y_next = acts->resy + (k + 1) * N;
                // a = LN(x), r = a + LN(y), u = LN(r)
                siamese_input_forward(a, r, u, sublayer_stats(acts, k, BT), x, y, sublayer_norms(p, l, s, C), BT, C,
                                      STATS_COMPUTE);
                block_forward(m, l, s, z, u, B, T);                              // z = F(u)
                siamese_update_forward(x_next, y_next, a, y, z, siamese_scale(l), N);  // x = a + z/c, y = y + z
                break;
            }
        }
    }

    float* x_final = acts->resx + 2 * L * N;
    switch (mode) {
        case NORM_PRE:
        case NORM_POST:
            layernorm_forward(acts->lnf, acts->lnf_mean, acts->lnf_rstd, x_final, p->lnfw, p->lnfb, BT, C,
                              STATS_COMPUTE);                                                   // h = LN(x)
            break;
        case NORM_SIAMESE:
            siamese_input_forward(NULL, acts->lnfsum, acts->lnf, final_stats(acts), x_final, acts->resy + 2 * L * N,
                                  final_norms(p), BT, C, STATS_COMPUTE);         // h = LN(LN(x) + LN(y))
            break;
    }
    matmul_forward(acts->logits, acts->lnf, p->wte, NULL, BT, C, Vp);              // tied output layer
    if (targets) {
        crossentropy_forward(acts->losses, acts->lse, acts->logits, targets, BT, V, Vp);
        double sum = 0.0;
        for (int i = 0; i < BT; i++) { sum += acts->losses[i]; }
        m->mean_loss = (float)(sum / BT);
    } else {
        m->mean_loss = -1.0f;
    }
    return m->mean_loss;
}

// ----------------------------------------------------------------------------
// backward

static void gpt2_zero_grad(GPT2* m) { memset(m->grads_memory, 0, m->num_parameters * sizeof(float)); }

// backward of the block of sublayer s of layer l: du += dL/du given dz (and the weight gradients)
static void block_backward(GPT2* m, int l, int s, float* du, const float* dz, const float* u, int B, int T) {
    const GPT2Config* cfg = &m->config;
    int C = cfg->channels, NH = cfg->num_heads, BT = B * T;
    ParameterTensors* p = &m->params;
    ParameterTensors* g = &m->grads;
    ActivationTensors* acts = &m->acts;
    GradScratch* sc = &m->scratch;
    size_t lBT = (size_t)l * BT;
    if (s == 0) {
        memset(sc->datty, 0, (size_t)BT * C * sizeof(float));
        matmul_backward(sc->datty, g->attprojw + (size_t)l * C * C, g->attprojb + (size_t)l * C, dz, acts->atty + lBT * C,
                        p->attprojw + (size_t)l * C * C, BT, C, C);
        memset(sc->dqkv, 0, (size_t)BT * 3 * C * sizeof(float));
        attention_backward(sc->dqkv, sc->datt, sc->datty, acts->qkv + lBT * 3 * C, acts->att + lBT * NH * T, B, T, C, NH);
        matmul_backward(du, g->qkvw + (size_t)l * 3 * C * C, g->qkvb + (size_t)l * 3 * C, sc->dqkv, u,
                        p->qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C);
    } else {
        float* fch_gelu = acts->fch_gelu + gelu_slot(m, l) * BT * 4 * C;
        if (m->recompute >= 1) { gelu_forward(fch_gelu, acts->fch + lBT * 4 * C, (size_t)BT * 4 * C); }  // GELU(fch) again
        memset(sc->dfch_gelu, 0, (size_t)BT * 4 * C * sizeof(float));
        matmul_backward(sc->dfch_gelu, g->fcprojw + (size_t)l * C * 4 * C, g->fcprojb + (size_t)l * C, dz,
                        fch_gelu, p->fcprojw + (size_t)l * C * 4 * C, BT, 4 * C, C);
        gelu_backward(sc->dfch, acts->fch + lBT * 4 * C, sc->dfch_gelu, (size_t)BT * 4 * C);
        matmul_backward(du, g->fcw + (size_t)l * 4 * C * C, g->fcb + (size_t)l * 4 * C, sc->dfch, u,
                        p->fcw + (size_t)l * 4 * C * C, BT, C, 4 * C);
    }
}

// backward pass of the last forward pass (which must have had targets); ACCUMULATES into m->grads.
// loss_scale multiplies the loss, e.g. 1/grad_accum_steps so accumulated gradients are a mean.
static void gpt2_backward(GPT2* m, float loss_scale) {
    if (!m->has_targets) { fatal("gpt2_backward: the last forward pass had no targets"); }
    const GPT2Config* cfg = &m->config;
    int B = m->cur_B, T = m->cur_T, BT = B * T;
    int V = cfg->vocab_size, Vp = cfg->padded_vocab_size, L = cfg->num_layers, C = cfg->channels;
    ParameterTensors* p = &m->params;
    ParameterTensors* g = &m->grads;
    ActivationTensors* acts = &m->acts;
    GradScratch* sc = &m->scratch;
    size_t N = (size_t)BT * C;
    NormMode mode = cfg->norm_mode;

    // classifier and the tied output layer: dlogits (in place), then dh and dwte
    crossentropy_backward(acts->logits, acts->lse, m->targets, loss_scale / BT, BT, V, Vp);
    memset(sc->dlnf, 0, N * sizeof(float));
    matmul_backward(sc->dlnf, g->wte, NULL, acts->logits, acts->lnf, p->wte, BT, C, Vp);

    // the final LayerNorm(s): dx (and dy) at the last boundary
    float* x_final = acts->resx + 2 * L * N;
    memset(sc->dx, 0, N * sizeof(float));
    switch (mode) {  // no default: -Wswitch names a mode this does not handle
        case NORM_PRE:
        case NORM_POST:
            layernorm_backward(sc->dx, g->lnfw, g->lnfb, sc->dlnf, x_final, p->lnfw, acts->lnf_mean, acts->lnf_rstd, BT, C,
                               sc->ln_partials);
            break;
        case NORM_SIAMESE:
            memset(sc->dy, 0, N * sizeof(float));
            siamese_input_backward(sc->dx, sc->dy, sc->dlnsum, sc->dlnx, sc->dlnf, final_norms(g), final_norms(p),
                                   final_stats(acts), x_final, acts->resy + 2 * L * N, acts->lnfsum, BT, C, sc->ln_partials);
            break;
    }
    observe_stream_grads(m, 2 * L);

    // the sublayers, last to first; dx (dy) enter holding dL/d(stream) after sublayer k, leave before it
    for (int k = 2 * L - 1; k >= 0; k--) {
        int l = k / 2, s = k % 2;
        float* x = acts->resx + k * N;
        float* lnw = (s == 0 ? p->ln1w : p->ln2w) + (size_t)l * C;
        float* lnb = (s == 0 ? p->ln1b : p->ln2b) + (size_t)l * C;
        float* dlnw = (s == 0 ? g->ln1w : g->ln2w) + (size_t)l * C;
        float* dlnb = (s == 0 ? g->ln1b : g->ln2b) + (size_t)l * C;
        float* mean = acts->ln_mean + (size_t)k * BT;
        float* rstd = acts->ln_rstd + (size_t)k * BT;
        float* a = acts->lnx + ln_slot(m, k) * N;
        float* r = acts->lnsum + ln_slot(m, k) * N;
        float* u = acts->blockin + ln_slot(m, k) * N;
        int rebuild = m->recompute >= 2;  // a, r and u of this sublayer again, as the forward made them
        switch (mode) {
            case NORM_PRE:
                // x_next = x + F(LN(x)): dz = dx_next, and dx = dx_next + LN_back(du)
                if (rebuild) { layernorm_forward(u, mean, rstd, x, lnw, lnb, BT, C, STATS_SAVED); }
                memset(sc->dblockin, 0, N * sizeof(float));
                block_backward(m, l, s, sc->dblockin, sc->dx, u, B, T);
                layernorm_backward(sc->dx, dlnw, dlnb, sc->dblockin, x, lnw, mean, rstd, BT, C, sc->ln_partials);
                break;
            case NORM_POST:
                // x_next = LN(x + F(x)): dr = LN_back(dx_next); dz = dr; dx = dr + F_back(dr)
                if (rebuild) { residual_forward(r, x, acts->blockout + k * N, N); }
                memset(sc->dlnsum, 0, N * sizeof(float));
                layernorm_backward(sc->dlnsum, dlnw, dlnb, sc->dx, r, lnw, mean, rstd, BT, C, sc->ln_partials);
                memcpy(sc->dx, sc->dlnsum, N * sizeof(float));
                block_backward(m, l, s, sc->dx, sc->dlnsum, x, B, T);
                break;
            case NORM_SIAMESE: {
                // dz = dx_next / c + dy_next; the block; then the three LNs of the input side
                float* y = acts->resy + k * N;
                SiameseStats st = sublayer_stats(acts, k, BT);
                if (rebuild) { siamese_input_forward(a, r, u, st, x, y, sublayer_norms(p, l, s, C), BT, C, STATS_SAVED); }
                siamese_update_backward(sc->dblockout, sc->dx, sc->dy, siamese_scale(l), N);
                memset(sc->dblockin, 0, N * sizeof(float));
                block_backward(m, l, s, sc->dblockin, sc->dblockout, u, B, T);
                siamese_input_backward(sc->dx, sc->dy, sc->dlnsum, sc->dlnx, sc->dblockin, sublayer_norms(g, l, s, C),
                                       sublayer_norms(p, l, s, C), st, x, y, r, BT, C, sc->ln_partials);
                break;
            }
        }
        observe_stream_grads(m, k);
    }

    // the embedding feeds both streams when there are two
    if (norm_mode_layout(mode)->two_streams) {
        for (size_t i = 0; i < N; i++) { sc->dx[i] += sc->dy[i]; }
    }
    encoder_backward(g->wte, g->wpe, sc->dx, m->inputs, B, T, C);
}

// ----------------------------------------------------------------------------
// optimizer

// the sum of squares of gradients [lo, hi), in double over fixed chunks (deterministic)
static double gpt2_grad_sumsq(GPT2* m, size_t lo, size_t hi) {
    enum { CHUNKS = 64 };
    double partial[CHUNKS];
    size_t n = hi - lo;
    #pragma omp parallel for
    for (int k = 0; k < CHUNKS; k++) {
        size_t i0 = lo + n * k / CHUNKS, i1 = lo + n * (k + 1) / CHUNKS;
        // 8 running sums (one vector of doubles) instead of one, so the loop is not one long chain of
        // dependent additions; they are added in a fixed order at the end
        const float* g = m->grads_memory;
        double acc[8] = {0};
        size_t i = i0;
        for (; i + 8 <= i1; i += 8) {
            for (int j = 0; j < 8; j++) { acc[j] += (double)g[i + j] * g[i + j]; }
        }
        for (; i < i1; i++) { acc[0] += (double)g[i] * g[i]; }
        double sum = 0.0;
        for (int j = 0; j < 8; j++) { sum += acc[j]; }
        partial[k] = sum;
    }
    double total = 0.0;
    for (int k = 0; k < CHUNKS; k++) { total += partial[k]; }
    return total;
}

// the global L2 norm of all gradients (the tests call it and gpt2_update; the trainer works on shards)
static inline float gpt2_grad_norm(GPT2* m) { return (float)sqrt(gpt2_grad_sumsq(m, 0, m->num_parameters)); }

// AdamW step `t` (1-based) with decoupled weight decay and bias correction, of parameters [lo, hi)
// (within [opt_lo, opt_hi), whose moments the model holds); the gradients are multiplied by
// grad_scale first (clipping). Decay applies to matrices and embeddings only.
static void gpt2_update_range(GPT2* m, float lr, float beta1, float beta2, float eps, float weight_decay,
                              float grad_scale, int t, size_t lo, size_t hi) {
    float inv_bc1 = 1.0f / (1.0f - powf(beta1, (float)t));  // bias corrections, as multipliers
    float inv_bc2 = 1.0f / (1.0f - powf(beta2, (float)t));
    // one parallel region for all tensors, and no barrier between them (nowait: the tensors are
    // disjoint): a region per tensor woke the threads 28 times a step, mostly for LayerNorm weights
    // and biases of a few hundred floats (dev/cpu/RESULTS.md, "Under load")
    ParamSlice slices[NUM_PARAMETER_TENSORS];
    int num_slices = param_slices(m->param_sizes, lo, hi, slices);
    #pragma omp parallel
    {
        for (int s = 0; s < num_slices; s++) {
            size_t start = slices[s].start, n = slices[s].n;
            float wd = param_tensor_decays(slices[s].tensor) ? weight_decay : 0.0f;
            float* param = m->params_memory + start;
            float* grad = m->grads_memory + start;
            float* mm = m->m_memory + (start - m->opt_lo);
            float* vv = m->v_memory + (start - m->opt_lo);
            #pragma omp for nowait
            for (size_t j = 0; j < n; j++) {
                float gj = grad[j] * grad_scale;
                mm[j] = beta1 * mm[j] + (1.0f - beta1) * gj;
                vv[j] = beta2 * vv[j] + (1.0f - beta2) * gj * gj;
                float mhat = mm[j] * inv_bc1;
                float vhat = vv[j] * inv_bc2;
                param[j] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * param[j]);
            }
        }
    }
}

// AdamW step `t` of all parameters
static inline void gpt2_update(GPT2* m, float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                        int t) {
    gpt2_update_range(m, lr, beta1, beta2, eps, weight_decay, grad_scale, t, 0, m->num_parameters);
}

#ifndef TESTING
// ============================================================================
// Part 3: training
// ============================================================================
// The training loop (flags, data, evaluation, sampling, checkpoints, the step line) is shared with
// train_gpt2.cu: train_run_loop in common/train_loop.h. It reaches the model only through the
// functions main() below hands it (TrainerOps). One training step, in the order it runs:
//
//   1. ops.zero_grad       gpt2_zero_grad: every parameter gradient to 0.
//   2. grad_accum times    (-d total batch / (B * T) micro-batches; 1 by default)
//                          the next (B, T) tokens and their targets (common/dataloader.h), then
//      ops.forward         gpt2_forward: the activations and the mean loss;
//      ops.backward        gpt2_backward with loss_scale 1/grad_accum: the gradients ACCUMULATE,
//                          so after the last micro-batch they are the mean over all of them.
//   3. ops.grad_sumsq      gpt2_grad_sumsq: the sum of the squares of all gradients; its square
//                          root is the global L2 norm.
//   4. the learning rate   learning_rate_at (common/train_loop.h): -l times (step+1)/-u during the
//                          -u warmup steps, then the schedule -K: by default a cosine from -l down
//                          to -q times -l at step -x (also linear, constant, wsd).
//   5. the clip            grad_clip_scale (common/train_loop.h): min(1, 1.0 / (norm + 1e-6)), i.e.
//                          the global norm clipped to 1.0 as torch's clip_grad_norm_ does; it reaches
//                          AdamW as grad_scale, the gradients in memory are left as they are.
//   6. ops.update          gpt2_update_range (Part 2, "optimizer"): AdamW with beta1 0.9, beta2 0.95,
//                          eps 1e-8 (set in main() below, run.adamw) and weight decay
//                          -c on the tensors param_tensor_decays (common/params.h) marks: wte, wpe
//                          and the four matrices of each layer, not the biases or LayerNorms.
//   A step whose loss or norm is not finite skips 6 and is reported (several in a row stop the run).
// With several processes (mpirun -np N, common/dist.h) each runs grad_accum / N micro-batches of
// its own slice of the batch in 2, the gradients are summed over the processes before 3, and with
// ZeRO-1 each process runs 6 on its shard of the parameters, whose AdamW moments alone it holds,
// then the processes exchange their updated shards (doc/distributed.md).
#include "common/train_loop.h"

static const float* cpu_logits_row(GPT2* m, size_t row) { return m->acts.logits + row * m->config.padded_vocab_size; }
static const float* cpu_weights(GPT2* m) { return m->params_memory; }
static void cpu_moments(GPT2* m, const float** mm, const float** vv) {
    *mm = m->m_memory;
    *vv = m->v_memory;
}
static void cpu_load_moments(GPT2* m, const float* mm, const float* vv) {
    memcpy(m->m_memory, mm, (m->opt_hi - m->opt_lo) * sizeof(float));
    memcpy(m->v_memory, vv, (m->opt_hi - m->opt_lo) * sizeof(float));
}

int main(int argc, char** argv) {
    TrainRun run;
    train_run_setup(&run, argc, argv);

    GPT2 model;
    if (run.fresh) {
        gpt2_build_fresh(&model, &run.fresh_config, run.args.seed);
    } else {
        gpt2_build_from_checkpoint(&model, run.model_path);
    }
#ifdef _OPENMP
    int threads = omp_get_max_threads();
    // libgomp cannot start tens of thousands of threads (at 100000 it crashed in the first parallel
    // region): an absurd OMP_NUM_THREADS ends here, before the output folder is touched
    if (threads > 4096) {
        fatal("OMP_NUM_THREADS asks for %d threads; at most 4096 (this machine has %d cores)", threads, omp_get_num_procs());
    }
#else
    int threads = 1;
#endif
    char batch_note[64];
    snprintf(batch_note, sizeof(batch_note), " | %d threads (wait: %s)", threads, openmp_wait_policy_name());
    train_run_attach_model(&run, &model.config, model.num_parameters, batch_note);
    model.opt_lo = run.opt_lo;  // AdamW's moments: all parameters, or this rank's shard (ZeRO-1)
    model.opt_hi = run.opt_hi;
    model.recompute = run.args.recompute;  // -r: which activations the backward rebuilds
    gpt2_allocate(&model, run.args.B, run.args.T);
    size_t held = model.opt_hi - model.opt_lo;
    printf("memory: %.1f MiB parameters+grads+AdamW%s, %.1f MiB activations (recompute -r %d)\n",
           (2.0 * model.num_parameters + 2.0 * held) * sizeof(float) / 1048576.0,
           held < model.num_parameters ? " (AdamW: this rank's shard)" : "",
           model.num_activations * sizeof(float) / 1048576.0, model.recompute);

    run.adamw.beta1 = 0.9f;  // AdamW as GPT-2 and GPT-3 were trained (the weight decay is -c)
    run.adamw.beta2 = 0.95f;
    run.adamw.eps = 1e-8f;
    TrainerOps ops = {
        .forward = gpt2_forward,
        .backward = gpt2_backward,
        .zero_grad = gpt2_zero_grad,
        .grad_sumsq = gpt2_grad_sumsq,           // clipping: the squares of the gradients, of a shard
        .update = gpt2_update_range,             // AdamW, of a shard (all parameters on one process)
        .logits_row = cpu_logits_row,            // sampling and the arithmetic accuracy read the logits
        .losses = model.acts.losses,             // the multiple-choice eval reads the loss of each position
        .weights = cpu_weights,                  // checkpoints: the weights and the AdamW moments
        .moments = cpu_moments,
        .load_moments = cpu_load_moments,        // resuming: the moments back into the optimizer
        .grads = model.grads_memory,             // several ranks: the gradients they sum
        .working_weights = model.params_memory,  // and the weights they gather after a sharded update
        .working_bytes = sizeof(float),
        .sync = NULL,                            // nothing is queued on the CPU
        .peak_flops = 0.0,                       // no MFU column
    };
    train_run_loop(&run, &ops, &model);

    train_run_free(&run);
    gpt2_free(&model);
    return 0;
}
#endif // TESTING
