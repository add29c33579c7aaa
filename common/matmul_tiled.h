/*
common/matmul_tiled.h: the CPU trainer's fast matmul, C[M][N] (+)= A[M][K] . B[K][N], register-tiled
and cache-blocked in plain C with vector extensions and OpenMP. train_gpt2.c includes it; its
matmul section shows the same products as plain loops and says which call computes which.

What it is. All three products of a linear layer are this one operation, with A and B read
through strides (so transposes cost nothing):
    forward   out    = bias + inp . weight^T   A = inp,    B = weight^T
    backward  dinp  += dout . weight           A = dout,   B = weight
              dW    += dout^T . inp            A = dout^T, B = inp
It is computed in register tiles of MM_MR rows x MM_NV vectors of C (a `vecf` is VW floats: one
AVX-512 register where the CPU has it, GCC/Clang vector extensions otherwise split it). Per k, a
tile broadcasts MM_MR numbers of A and loads MM_NV vectors of B for MM_MR * MM_NV fused
multiply-adds into accumulators that never leave the registers: 24 of the 32 AVX-512 registers
(8 x 3), or 12 of the 16 AVX2 ones (6 x 2).

Around the tiles, the GotoBLAS blocking. A thread task owns a block of C (up to MM_MC x MM_NC) and
walks k in blocks of MM_KC. Per k block it copies ("packs") its block of A and its block of B into
buffers of its own, in the order the tiles read them: A as one strip per MM_MR rows (MM_KC x MM_MR
numbers, k-major), B as one panel per MM_NR columns (MM_KC x MM_NR, k-major). A tile then reads
both front to back, one cache line after the next, whatever the strides of A and B were: the
strides are paid once, in the copies. The tile's strip of A (8 KiB) stays in the first-level
cache while the tile walks the task's panels of B, which stream from the second level (the task's
block of B, 384 KiB, stays there). The copies that transpose (A with rows contiguous in k, B with
columns contiguous in k) go through VW x VW blocks transposed in registers (mm_transpose): a
scalar transpose, one number at a time, cost as much as a fifth of the multiply-adds.

Work is split into at least as many tasks as there are threads, evenly in units of whole tiles
and panels; for the shapes of a GPT-2 step at B*T = 256 that is one block of rows (all 256) and
the columns split into blocks of up to 384, or, for dW (M = the layer's outputs), blocks of 256
rows and all 768 columns.

Order of summation. Threads split C, never k, and every element of C starts from its value on
entry (or from the bias, or 0) and adds its K products one at a time in increasing k (the k
blocks in order, a tile's accumulators loaded from C and stored back), so neither the number of
threads nor the split into tasks changes a bit of the result. These are the sums of the plain
loops of train_gpt2.c in their order; the tiles fuse each multiply-add into one rounding (a vector
FMA where the CPU has it), where scalar code such as the plain loops and the last N % VW columns
here may round twice, so the two agree to rounding, not to the bit.

How it is checked. test_gpt2 (`make test`) runs it, and the plain loops, on shapes that reach
every edge of the tiling (rows and columns that are not multiples of a tile, k not a multiple of
the vector width, several k blocks, several blocks of rows and of columns) against a sum in
double (error at most 1e-5 of the largest value); then the parity checks against PyTorch run every
matmul of the model through it. dev/cpu/bench_matmul.c times it on the shapes of a d12 step, as a
fraction of the machine's FMA peak.
*/
#ifndef COMMON_MATMUL_TILED_H
#define COMMON_MATMUL_TILED_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__AVX512F__)
#define VW 16
#elif defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif
typedef float vecf __attribute__((vector_size(VW * sizeof(float))));
typedef int veci __attribute__((vector_size(VW * sizeof(int))));

static inline vecf vec_load(const float* p) { vecf v; memcpy(&v, p, sizeof(v)); return v; }
static inline void vec_store(float* p, vecf v) { memcpy(p, &v, sizeof(v)); }

#define MM_MR (VW == 16 ? 8 : 6)  // rows of C per tile
#define MM_NV (VW == 16 ? 3 : 2)  // vectors of C per tile row
#define MM_NR (MM_NV * VW)        // columns of C per tile, and per panel of B
#define MM_KC 256                 // k block
#define MM_MC ((256 + MM_MR - 1) / MM_MR * MM_MR)  // at most this many rows of C per thread task: 256, or 258
#define MM_NC (8 * MM_NR)         // at most this many columns of C per thread task (384 with AVX-512)
#define MM_DIRECT_A 64            // A is read in place, not packed, for blocks of C at most this wide

// ----------------------------------------------------------------------------
// the register tile

// C[r][v] (+)= sum_{k < K} A[r][k] b[k * ldb + v * VW] for r < RM, v < NV (constants once inlined):
// `b` is a panel of packed B (or B read in place), A a strip of packed A, A[r][k] = a[k * MM_MR + r]
// (PACKED), or A read in place, A[r][k] = a[r * ars + k * aks]. The accumulators start from C, or,
// with `init` given, from init[v * VW ...] in every row (the bias, or zeros).
static inline __attribute__((always_inline)) void mm_tile(float* c, size_t ldc, const float* init, const float* a,
                                                          size_t ars, size_t aks, const float* b, int ldb, int K,
                                                          const int PACKED, const int RM, const int NV) {
    vecf acc[MM_MR][MM_NV];
    for (int r = 0; r < RM; r++) {
        for (int v = 0; v < NV; v++) { acc[r][v] = vec_load(init ? init + v * VW : c + r * ldc + v * VW); }
    }
    for (int k = 0; k < K; k++) {
        vecf bv[MM_NV];
        for (int v = 0; v < NV; v++) { bv[v] = vec_load(b + (size_t)k * ldb + v * VW); }
        for (int r = 0; r < RM; r++) {
            float s = PACKED ? a[k * MM_MR + r] : a[r * ars + k * aks];
            for (int v = 0; v < NV; v++) { acc[r][v] += s * bv[v]; }
        }
    }
    for (int r = 0; r < RM; r++) { for (int v = 0; v < NV; v++) { vec_store(c + r * ldc + v * VW, acc[r][v]); } }
}

// a tile of any size up to MM_MR x MM_NV: the switches give each shape its own unrolled copy, for A
// packed (ars 1, aks MM_MR) and in place
static void mm_tile_any(float* c, size_t ldc, const float* init, const float* a, size_t ars, size_t aks, const float* b,
                        int ldb, int K, int rm, int nv) {
    int packed = ars == 1 && aks == MM_MR;
#define MM_MIN(x, y) ((x) < (y) ? (x) : (y))
#define MM_CASE_P(RM_, NV_)                                                                      \
    if (packed) { mm_tile(c, ldc, init, a, ars, aks, b, ldb, K, 1, RM_, NV_); }                   \
    else { mm_tile(c, ldc, init, a, ars, aks, b, ldb, K, 0, RM_, NV_); }
#define MM_CASE_V(RM_)                                                                           \
    switch (nv) {                                                                                \
        case 1: MM_CASE_P(RM_, 1); break;                                                        \
        case 2: MM_CASE_P(RM_, MM_MIN(MM_NV, 2)); break;                                         \
        default: MM_CASE_P(RM_, MM_NV); break;                                                   \
    }
    switch (rm) {
        case 1: MM_CASE_V(1); break;
        case 2: MM_CASE_V(2); break;
        case 3: MM_CASE_V(3); break;
        case 4: MM_CASE_V(4); break;
        case 5: MM_CASE_V(5); break;
        case 6: MM_CASE_V(MM_MIN(MM_MR, 6)); break;
        case 7: MM_CASE_V(MM_MIN(MM_MR, 7)); break;
        default: MM_CASE_V(MM_MR); break;
    }
#undef MM_CASE_V
#undef MM_CASE_P
#undef MM_MIN
}
_Static_assert(MM_MR <= 8 && MM_NV <= 3, "mm_tile_any has cases for up to 8 rows and 3 vectors");

// ----------------------------------------------------------------------------
// packing

// In-register transpose of a VW x VW block: r[i][p] becomes r[p][i]. Level d swaps the
// off-diagonal d x d sub-blocks of every 2d x 2d block, that is, exchanges bit d of the row and of
// the column index; the levels VW/2, ..., 2, 1 together exchange all the bits. A level is VW
// two-input shuffles with constant lane patterns: lane p of the new row i takes, if (p & d) == 0,
// lane p of the old row i, else lane p - d of the old row i + d; the new row i + d mirrors that.
#define MM_LANE_LO(p, d) (((p) & (d)) ? VW + (p) - (d) : (p))
#define MM_LANE_HI(p, d) (((p) & (d)) ? VW + (p) : (p) + (d))
#if VW == 16
#define MM_LANES(F, d) {F(0, d), F(1, d), F(2, d), F(3, d), F(4, d), F(5, d), F(6, d), F(7, d), \
                        F(8, d), F(9, d), F(10, d), F(11, d), F(12, d), F(13, d), F(14, d), F(15, d)}
#elif VW == 8
#define MM_LANES(F, d) {F(0, d), F(1, d), F(2, d), F(3, d), F(4, d), F(5, d), F(6, d), F(7, d)}
#else
#define MM_LANES(F, d) {F(0, d), F(1, d), F(2, d), F(3, d)}
#endif
#define MM_SWAP_LEVEL(r, d)                                                     \
    do {                                                                        \
        const veci lo = MM_LANES(MM_LANE_LO, d), hi = MM_LANES(MM_LANE_HI, d);  \
        for (int i = 0; i < VW; i++) {                                          \
            if (i & (d)) { continue; }                                          \
            vecf x = r[i], y = r[i + (d)];                                      \
            r[i] = __builtin_shuffle(x, y, lo);                                 \
            r[i + (d)] = __builtin_shuffle(x, y, hi);                           \
        }                                                                       \
    } while (0)

static inline __attribute__((always_inline)) void mm_transpose(vecf r[VW]) {
#if VW >= 16
    MM_SWAP_LEVEL(r, 8);
#endif
#if VW >= 8
    MM_SWAP_LEVEL(r, 4);
#endif
    MM_SWAP_LEVEL(r, 2);
    MM_SWAP_LEVEL(r, 1);
}

// r[i] = x[i * ld + 0 .. VW) for i < n, zeros for n <= i < VW; then transposed: r[k] = x[0 .. VW)[k]
static inline __attribute__((always_inline)) void mm_load_transposed(vecf r[VW], const float* x, size_t ld, int n) {
    for (int i = 0; i < VW; i++) { r[i] = i < n ? vec_load(x + i * ld) : (vecf){0}; }
    mm_transpose(r);
}

// packs rows [0, rows) x k [0, kc) of A (A[m][k] = a[m * a_m + k * a_k]) into strips of MM_MR rows:
// strip s holds A[s * MM_MR + r][k] at dst[s * MM_MR * kc + k * MM_MR + r] (rows past `rows` are 0)
static void mm_pack_a(float* dst, const float* a, size_t a_m, size_t a_k, int rows, int kc) {
    int m0 = 0;
    if (a_k == 1 && VW % MM_MR == 0) {  // rows of A contiguous in k (forward: inp; dinp: dout): transposed
        for (; m0 < rows; m0 += VW) {   // in VW x VW blocks, each VW / MM_MR strips
            int n = rows - m0 < VW ? rows - m0 : VW;
            float* d = dst + (size_t)m0 * kc;
            int k = 0;
            for (; k + VW <= kc; k += VW) {
                vecf r[VW];
                mm_load_transposed(r, a + m0 * a_m + k, a_m, n);  // r[i] = A[m0 ... + VW][k + i]
                for (int s = 0; s < VW / MM_MR; s++) {
                    float* strip = d + (size_t)s * MM_MR * kc;
                    for (int i = 0; i < VW; i++) {
                        memcpy(strip + (k + i) * MM_MR, (float*)&r[i] + s * MM_MR, MM_MR * sizeof(float));
                    }
                }
            }
            for (int i = 0; i < VW; i++) {  // the last kc % VW columns
                float* di = d + (size_t)(i / MM_MR) * MM_MR * kc + i % MM_MR;
                const float* ai = a + (m0 + i) * a_m;
                for (int kk = k; kk < kc; kk++) { di[(size_t)kk * MM_MR] = i < n ? ai[kk] : 0.0f; }
            }
        }
        return;
    }
    for (; m0 < rows; m0 += MM_MR) {
        int rm = rows - m0 < MM_MR ? rows - m0 : MM_MR;
        float* d = dst + (size_t)m0 * kc;
        const float* s = a + m0 * a_m;
        if (a_m == 1 && rm == MM_MR) {  // columns of A contiguous in m (dW: dout^T): MM_MR numbers per k
            for (int k = 0; k < kc; k++) { memcpy(d + k * MM_MR, s + k * a_k, MM_MR * sizeof(float)); }
            continue;
        }
        // k outer: the strip is written front to back, and the lines of A read stay in the cache
        for (int k = 0; k < kc; k++) {
            for (int r = 0; r < MM_MR; r++) { d[k * MM_MR + r] = r < rm ? s[k * a_k + r * a_m] : 0.0f; }
        }
    }
}

// packs k [0, kc) x columns [0, nw) of B (B[k][n] = b[k * b_k + n * b_n], nw a multiple of VW) into
// panels of MM_NR columns: panel p holds B[k][p * MM_NR + j] at dst[p * MM_NR * kc + k * w + j], w the
// panel's width (MM_NR, or less for the last one)
static void mm_pack_b(float* dst, const float* b, size_t b_k, size_t b_n, int kc, int nw) {
    for (int n0 = 0; n0 < nw; n0 += MM_NR) {
        int w = nw - n0 < MM_NR ? nw - n0 : MM_NR;
        float* d = dst + (size_t)n0 * kc;
        const float* s = b + n0 * b_n;
        if (b_n == 1) {         // rows of B contiguous in n (dinp: weight; dW: inp)
            for (int k = 0; k < kc; k++) {
                for (int j = 0; j < w; j += VW) { vec_store(d + k * w + j, vec_load(s + k * b_k + j)); }
            }
        } else if (b_k == 1) {  // columns of B contiguous in k (forward: weight^T): VW x VW blocks
            int k = 0;
            for (; k + VW <= kc; k += VW) {
                for (int j = 0; j < w; j += VW) {
                    vecf r[VW];
                    mm_load_transposed(r, s + j * b_n + k, b_n, VW);  // r[i] = B[k + i][n0 + j ... + VW]
                    for (int i = 0; i < VW; i++) { vec_store(d + (k + i) * w + j, r[i]); }
                }
            }
            for (; k < kc; k++) {
                for (int j = 0; j < w; j++) { d[k * w + j] = s[j * b_n + k]; }
            }
        } else {
            for (int k = 0; k < kc; k++) {
                for (int j = 0; j < w; j++) { d[k * w + j] = s[j * b_n + k * b_k]; }
            }
        }
    }
}

// mm_pack_a writes whole groups of this many rows (VW x VW blocks when it transposes)
#define MM_ROW_GROUP (VW % MM_MR == 0 ? VW : MM_MR)
_Static_assert(MM_MC % MM_ROW_GROUP == 0, "a block of MM_MC rows holds whole row groups");

// Each thread's packing buffers, allocated on the first call on that thread and kept for the life
// of the process: one block of A (MM_MC x MM_KC) and one of B (MM_KC x MM_NC).
#define MM_PACK_FLOATS ((size_t)MM_KC * (MM_MC + MM_NC))
#define MM_MAX_THREADS 1024
static float* mm_pack_buffers[MM_MAX_THREADS];

static float* mm_thread_buffer(void) {
#ifdef _OPENMP
    int t = omp_get_thread_num();
#else
    int t = 0;
#endif
    if (t >= MM_MAX_THREADS) {
        fprintf(stderr, "error: matmul: more than %d threads\n", MM_MAX_THREADS);
        exit(1);
    }
    if (!mm_pack_buffers[t]) {
        mm_pack_buffers[t] = (float*)aligned_alloc(64, MM_PACK_FLOATS * sizeof(float));
        if (!mm_pack_buffers[t]) {
            fprintf(stderr, "error: matmul: out of memory for the packing buffers\n");
            exit(1);
        }
    }
    return mm_pack_buffers[t];
}

// A whole A packed once for all the threads' tasks (matmul_tiled), grown when a larger one is
// needed and kept; at most MM_SHARED_A floats (16 MiB).
#define MM_SHARED_A ((size_t)1 << 22)
static float* mm_shared_a;
static size_t mm_shared_a_size;

static float* mm_shared_buffer(size_t floats) {
    if (floats > mm_shared_a_size) {
        free(mm_shared_a);
        mm_shared_a = (float*)aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
        if (!mm_shared_a) {
            fprintf(stderr, "error: matmul: out of memory for the packing buffers\n");
            exit(1);
        }
        mm_shared_a_size = floats;
    }
    return mm_shared_a;
}

// ----------------------------------------------------------------------------
// prefetching. Within a training step the weights come from memory, not from a cache, once per
// matmul and pass (500 MB at d12): while the tiles of one k block multiply, the lines of the block
// of B the next packing or tile reads are requested, a share before each tile, and so are the
// lines of C the next tile loads. (In dev/cpu/bench_matmul.c, which repeats each product, the
// weights stay in the caches and this changes nothing; in whole steps, dev/cpu/bench_step.c, it
// gained about 1.5% in 7 of 8 paired runs.)

// the cache lines of a block of B, k [k0, k0 + kc) x columns [n0, n1), a few fetched before each tile
typedef struct {
    const char* base;
    size_t stride;    // bytes between rows (a row: the run along the stride of 1)
    int rows, lines;  // rows, and cache lines per row (rows 0: nothing to fetch)
    int row, line;    // the next line
} MMPrefetch;

static MMPrefetch mm_prefetch_block(const float* b, size_t b_k, size_t b_n, int k0, int kc, int n0, int n1) {
    MMPrefetch f = {NULL, 0, 0, 0, 0, 0};
    if (b_n == 1) {
        f.base = (const char*)(b + (size_t)k0 * b_k + n0);
        f.stride = b_k * sizeof(float);
        f.rows = kc;
        f.lines = (int)(((size_t)(n1 - n0) * sizeof(float) + 63) / 64);
    } else if (b_k == 1) {
        f.base = (const char*)(b + (size_t)n0 * b_n + k0);
        f.stride = b_n * sizeof(float);
        f.rows = n1 - n0;
        f.lines = (int)(((size_t)kc * sizeof(float) + 63) / 64);
    }
    return f;
}

static inline void mm_prefetch_lines(MMPrefetch* f, int n) {
    for (; n > 0 && f->row < f->rows; n--) {
        __builtin_prefetch(f->base + f->row * f->stride + (size_t)f->line * 64, 0, 2);
        if (++f->line == f->lines) { f->line = 0; f->row++; }
    }
}

// ----------------------------------------------------------------------------
// the product

// block i of n even blocks of `units` units of `size` (the last unit may be partial), clipped to `total`
static void mm_split(int i, int n, int units, int size, int total, int* lo, int* hi) {
    *lo = (int)((long)units * i / n) * size;
    *hi = (int)((long)units * (i + 1) / n) * size;
    if (*hi > total) { *hi = total; }
}

// Rows [m0, m1) x columns [n0, n1) of C, at most MM_MC x MM_NC, with the calling thread's buffers:
// C = init + A . B (accumulate 0: init[n] in every row, a bias, or NULL for 0) or C += A . B
// (accumulate 1: init must be NULL), A[m][k] = a[m * a_m + k * a_k], B[k][n] = b[k * b_k + n * b_n],
// C[m][n] = c[m * ldc + n]. With `packed` given, A is already packed: its k block from k0 at
// packed + k0 * rows, rows = m1 - m0 rounded up to whole MM_ROW_GROUPs (matmul_tiled). Columns
// [next_n0, next_n1) are those of the task the thread runs next (its B is prefetched).
static void mm_block(float* c, size_t ldc, const float* init, int accumulate, const float* a, size_t a_m, size_t a_k,
                     const float* b, size_t b_k, size_t b_n, int m0, int m1, int n0, int n1, int K,
                     const float* packed, int next_n0, int next_n1) {
    static const float zeros[MM_NR];
    float* pack_a = mm_thread_buffer();
    float* pack_b = pack_a + (size_t)MM_MC * MM_KC;
    size_t rows = (size_t)(m1 - m0 + MM_ROW_GROUP - 1) / MM_ROW_GROUP * MM_ROW_GROUP;
    int nw = (n1 - n0) / VW * VW;  // whole vectors; the last N % VW columns by hand
    // Rows of B contiguous in n (dinp: weight, dW: inp) are read in place unless they are a multiple
    // of 2 KiB apart, which would pile them into a few sets of the caches. A is read in place when
    // the block is at most MM_DIRECT_A columns wide (attention's products with the head size, the
    // narrow layers of small models): a packed copy is then read only once or twice, and making it
    // costs about as much as the multiply-adds it feeds.
    int direct = b_n == 1 && (b_k * sizeof(float)) % 2048 != 0;
    int direct_a = !packed && n1 - n0 <= MM_DIRECT_A &&
                   (a_m == 1 || (a_k == 1 && (a_m * sizeof(float)) % 2048 != 0));
    size_t ars = direct_a ? a_m : 1, aks = direct_a ? a_k : MM_MR;  // A[r][k] = strip[r * ars + k * aks]
    for (int k0 = 0; k0 < K || k0 == 0; k0 += MM_KC) {
        int kc = K - k0 < MM_KC ? K - k0 : MM_KC;
        // the first k block of an overwrite starts from init; every other from C
        const float* start = accumulate || k0 > 0 ? NULL : init ? init + n0 : zeros;
        const float* strips = packed ? packed + (size_t)k0 * rows : pack_a;
        if (!packed && !direct_a) { mm_pack_a(pack_a, a + (size_t)m0 * a_m + (size_t)k0 * a_k, a_m, a_k, m1 - m0, kc); }
        const float* bk = b + (size_t)k0 * b_k + (size_t)n0;  // B[k0][n0] when direct
        if (!direct) { mm_pack_b(pack_b, b + (size_t)k0 * b_k + (size_t)n0 * b_n, b_k, b_n, kc, nw); }
        // the block of B the next k block reads (or the first of the next task's), a share before each tile
        int next_k0 = k0 + MM_KC < K ? k0 + MM_KC : 0, next_kc = K - next_k0 < MM_KC ? K - next_k0 : MM_KC;
        MMPrefetch next = next_k0 ? mm_prefetch_block(b, b_k, b_n, next_k0, next_kc, n0, n1)
                                  : mm_prefetch_block(b, b_k, b_n, 0, next_kc, next_n0, next_n1);
        int calls = (m1 - m0 + MM_MR - 1) / MM_MR * ((nw + MM_NR - 1) / MM_NR);
        int quota = (next.rows * next.lines + calls - 1) / (calls > 0 ? calls : 1);
        for (int m = m0; m < m1; m += MM_MR) {
            int rm = m1 - m < MM_MR ? m1 - m : MM_MR;
            const float* strip = direct_a ? a + (size_t)m * a_m + (size_t)k0 * a_k : strips + (size_t)(m - m0) * kc;
            float* cm = c + (size_t)m * ldc;
            for (int p = 0; p < nw; p += MM_NR) {
                int w = nw - p < MM_NR ? nw - p : MM_NR;
                const float* from = start == zeros ? zeros : start ? start + p : NULL;
                mm_prefetch_lines(&next, quota);
                {   // the C tile of the next call: the next panel, or the first of the next rows
                    int np = p + MM_NR < nw ? p + MM_NR : 0, nm = np ? m : m + MM_MR;
                    if (nm < m1) {
                        const float* cn = c + (size_t)nm * ldc + n0 + np;
                        int nrm = m1 - nm < MM_MR ? m1 - nm : MM_MR;
                        for (int r = 0; r < nrm; r++) {
                            for (int l = 0; l < MM_NR; l += 16) { __builtin_prefetch(cn + r * ldc + l, 1, 3); }
                        }
                    }
                }
                if (direct) {
                    mm_tile_any(cm + n0 + p, ldc, from, strip, ars, aks, bk + p, (int)b_k, kc, rm, w / VW);
                } else {
                    mm_tile_any(cm + n0 + p, ldc, from, strip, ars, aks, pack_b + (size_t)p * kc, w, kc, rm, w / VW);
                }
            }
            for (int r = 0; r < rm; r++) {
                for (int n = n0 + nw; n < n1; n++) {
                    float sum = start ? (init ? init[n] : 0.0f) : cm[(size_t)r * ldc + n];
                    for (int k = 0; k < kc; k++) { sum += strip[r * ars + k * aks] * b[(size_t)(k0 + k) * b_k + n * b_n]; }
                    cm[(size_t)r * ldc + n] = sum;
                }
            }
        }
    }
}

// the whole M x N matrix C (ldc apart) on the calling thread, in blocks of MM_MC x MM_NC (the
// arguments as for mm_block): attention calls it for one (sequence, head) inside its own
// parallel loop
static void matmul_tiled_serial(float* c, size_t ldc, const float* init, int accumulate, const float* a, size_t a_m,
                                size_t a_k, const float* b, size_t b_k, size_t b_n, int M, int N, int K) {
    for (int m0 = 0; m0 < M; m0 += MM_MC) {
        for (int n0 = 0; n0 < N; n0 += MM_NC) {
            mm_block(c, ldc, init, accumulate, a, a_m, a_k, b, b_k, b_n, m0, m0 + MM_MC < M ? m0 + MM_MC : M, n0,
                     n0 + MM_NC < N ? n0 + MM_NC : N, K, NULL, 0, 0);
        }
    }
}

// the same, C row-major (ldc = N), split over the threads: at least one task per thread (when there
// are enough panels), and a multiple of the threads when that costs at most one more block of
// columns per block of rows. When all tasks share one block of rows (M <= MM_MC: the forward and
// dinp at B*T = 256), the threads first pack A together, once, instead of once per task.
static void matmul_tiled(float* c, const float* init, int accumulate, const float* a, size_t a_m, size_t a_k,
                         const float* b, size_t b_k, size_t b_n, int M, int N, int K) {
    int tiles = (M + MM_MR - 1) / MM_MR, panels = (N + MM_NR - 1) / MM_NR;
    int m_blocks = (tiles * MM_MR + MM_MC - 1) / MM_MC, n_blocks = (panels * MM_NR + MM_NC - 1) / MM_NC;
#ifdef _OPENMP
    int threads = omp_get_max_threads();
#else
    int threads = 1;
#endif
    while (m_blocks * n_blocks < threads && n_blocks < panels) { n_blocks++; }
    if ((m_blocks * n_blocks) % threads != 0 && n_blocks + 1 <= panels &&
        (m_blocks * (n_blocks + 1)) % threads == 0) {
        n_blocks++;
    }
    size_t rows = (size_t)(M + MM_ROW_GROUP - 1) / MM_ROW_GROUP * MM_ROW_GROUP;
    float* shared = m_blocks == 1 && n_blocks > 1 && rows * K <= MM_SHARED_A ? mm_shared_buffer(rows * K) : NULL;
    #pragma omp parallel
    {
        if (shared) {  // every k block of A: row groups [g0, g0 + MM_ROW_GROUP) at shared + k0 * rows + g0 * kc
            int groups = (int)(rows / MM_ROW_GROUP), k_blocks = (K + MM_KC - 1) / MM_KC;
            #pragma omp for collapse(2) schedule(static)
            for (int kb = 0; kb < k_blocks; kb++) {
                for (int g = 0; g < groups; g++) {
                    int k0 = kb * MM_KC, kc = K - k0 < MM_KC ? K - k0 : MM_KC, g0 = g * MM_ROW_GROUP;
                    int n = M - g0 < MM_ROW_GROUP ? M - g0 : MM_ROW_GROUP;
                    mm_pack_a(shared + (size_t)k0 * rows + (size_t)g0 * kc, a + (size_t)g0 * a_m + (size_t)k0 * a_k, a_m,
                              a_k, n, kc);
                }
            }
        }
        #pragma omp for collapse(2) schedule(static)
        for (int mb = 0; mb < m_blocks; mb++) {
            for (int nb = 0; nb < n_blocks; nb++) {
                int m0, m1, n0, n1, next_n0, next_n1;
                mm_split(mb, m_blocks, tiles, MM_MR, M, &m0, &m1);
                mm_split(nb, n_blocks, panels, MM_NR, N, &n0, &n1);
                mm_split((nb + 1) % n_blocks, n_blocks, panels, MM_NR, N, &next_n0, &next_n1);  // the next task's
                mm_block(c, N, init, accumulate, a, a_m, a_k, b, b_k, b_n, m0, m1, n0, n1, K, shared, next_n0, next_n1);
            }
        }
    }
}

#endif // COMMON_MATMUL_TILED_H
