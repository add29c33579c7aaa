/*
common/matmul_tiled.h: the CPU trainer's fast matmul, C[M][N] += A[M][K] . B[K][N], register-tiled
and cache-blocked in plain C with vector extensions and OpenMP. train_gpt2.c includes it; its
matmul section shows the same products as plain loops and says which call computes which.

What it is. All three products of a linear layer are this one operation, with A and B read
through strides (so transposes cost nothing):
    forward   out   += inp . weight^T      A = inp,    B = weight^T
    backward  dinp  += dout . weight       A = dout,   B = weight
              dW    += dout^T . inp        A = dout^T, B = inp
It is computed in register tiles of MM_MR rows x MM_NV vectors of C (a `vecf` is VW floats: one
AVX-512 register where the CPU has it, GCC/Clang vector extensions otherwise split it). Per k, a
tile broadcasts MM_MR numbers of A and loads MM_NV vectors of B for MM_MR * MM_NV fused
multiply-adds into accumulators that never leave the registers.

Around the tiles, the GotoBLAS blocking: a thread task owns a block of C (up to 258 x 384) and
walks k in blocks of MM_KC. Per k block it copies its MM_KC x 258 block of A into a contiguous,
k-major buffer (in L2: every column panel of the block uses it), then per panel of MM_NR columns
the MM_KC x MM_NR panel of B (in L1: every row tile uses it). The copies are also where the
strides are paid, once, instead of inside the tiles.

Order of summation. Threads split C, never k, and every element of C starts from its value on
entry and adds its K products one at a time in increasing k (the k blocks in order, a tile's
accumulators loaded from C and stored back), so the results do not depend on the number of
threads. These are the sums of the plain loops of train_gpt2.c in their order; the tiles fuse each
multiply-add into one rounding (a vector FMA where the CPU has it), where scalar code such as the
plain loops and the last N % VW columns here may round twice, so the two agree to rounding, not to
the bit.

How it is checked. test_gpt2 (`make test`) runs it, and the plain loops, on shapes that reach
every edge of the tiling (rows and columns that are not multiples of a tile, k not a multiple of
the vector width, several k blocks) against a sum in double (error at most 1e-5 of the largest
value); then the parity checks against PyTorch run every matmul of the model through it.
dev/cpu/bench_matmul.c times it on the shapes of a d12 step.
*/
#ifndef COMMON_MATMUL_TILED_H
#define COMMON_MATMUL_TILED_H

#include <stddef.h>
#include <string.h>

#if defined(__AVX512F__)
#define VW 16
#elif defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif
typedef float vecf __attribute__((vector_size(VW * sizeof(float))));

static inline vecf vec_load(const float* p) { vecf v; memcpy(&v, p, sizeof(v)); return v; }
static inline void vec_store(float* p, vecf v) { memcpy(p, &v, sizeof(v)); }

#define MM_MR 6                  // rows of C per tile
#define MM_NV (VW == 16 ? 4 : 2) // vectors of C per tile row: 24 or 12 accumulators (32 or 16 registers)
#define MM_NR (MM_NV * VW)       // columns of C per tile, and per panel of B
#define MM_KC 128                // k block
#define MM_MB (43 * MM_MR)       // rows of C per thread task (258 >= B*T = 256 of the benchmark)
#define MM_NB (6 * MM_NR)        // columns of C per thread task

// C[m][n] += sum_{k < K} a[m + k * lda] b[k * ldb + n] for m < RM, n < NV * VW (constants once inlined)
static inline __attribute__((always_inline)) void mm_tile(float* c, size_t ldc, const float* a, size_t lda,
                                                          const float* b, size_t ldb, int K, const int RM,
                                                          const int NV) {
    vecf acc[MM_MR][MM_NV];
    for (int r = 0; r < RM; r++) { for (int v = 0; v < NV; v++) { acc[r][v] = vec_load(c + r * ldc + v * VW); } }
    for (int k = 0; k < K; k++) {
        vecf bv[MM_NV];
        for (int v = 0; v < NV; v++) { bv[v] = vec_load(b + (size_t)k * ldb + v * VW); }
        for (int r = 0; r < RM; r++) {
            float s = a[r + (size_t)k * lda];
            for (int v = 0; v < NV; v++) { acc[r][v] += s * bv[v]; }
        }
    }
    for (int r = 0; r < RM; r++) { for (int v = 0; v < NV; v++) { vec_store(c + r * ldc + v * VW, acc[r][v]); } }
}

// a tile of any size up to MM_MR x MM_NV: the switch gives each shape its own unrolled copy
static void mm_tile_any(float* c, size_t ldc, const float* a, size_t lda, const float* b, size_t ldb, int K, int rm,
                        int nv) {
#define MM_CASE_V(RM_)                                                               \
    switch (nv) {                                                                    \
        case 1: mm_tile(c, ldc, a, lda, b, ldb, K, RM_, 1); break;                   \
        case 2: mm_tile(c, ldc, a, lda, b, ldb, K, RM_, 2); break;                   \
        case 3: mm_tile(c, ldc, a, lda, b, ldb, K, RM_, MM_NV < 3 ? MM_NV : 3); break; \
        default: mm_tile(c, ldc, a, lda, b, ldb, K, RM_, MM_NV); break;              \
    }
    switch (rm) {
        case 1: MM_CASE_V(1); break;
        case 2: MM_CASE_V(2); break;
        case 3: MM_CASE_V(3); break;
        case 4: MM_CASE_V(4); break;
        case 5: MM_CASE_V(5); break;
        default: MM_CASE_V(6); break;
    }
#undef MM_CASE_V
}

// C[M][N] += A[M][K] . B[K][N] with A[m][k] = a[m * a_m + k * a_k], B[k][n] = b[k * b_k + n * b_n],
// C row-major
static void matmul_accumulate(float* c, const float* a, size_t a_m, size_t a_k, const float* b, size_t b_k,
                              size_t b_n, int M, int N, int K) {
    int m_blocks = (M + MM_MB - 1) / MM_MB, n_blocks = (N + MM_NB - 1) / MM_NB;
    int MB = (M + m_blocks - 1) / m_blocks;  // even blocks, each a multiple of the tile height
    MB = (MB + MM_MR - 1) / MM_MR * MM_MR;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int mb = 0; mb < m_blocks; mb++) {
        for (int nb = 0; nb < n_blocks; nb++) {
            int m0 = mb * MB, m_end = m0 + MB < M ? m0 + MB : M;
            int nb0 = nb * MM_NB, nb_end = nb0 + MM_NB < N ? nb0 + MM_NB : N;
            float panel_a[MM_KC * MM_MB];  // A[m0 : m_end][k0 : k0+kc], k-major: A[m0+i][k0+k] = panel_a[k * MB + i]
            float panel_b[MM_KC * MM_NR];  // B[k0 : k0+kc][n0 : n0+nw], row-major with row length nw
            for (int k0 = 0; k0 < K; k0 += MM_KC) {
                int kc = K - k0 < MM_KC ? K - k0 : MM_KC;
                const float* a0 = a + (size_t)m0 * a_m + (size_t)k0 * a_k;
                for (int k = 0; k < kc; k++) {
                    for (int i = 0; i < m_end - m0; i++) { panel_a[k * MB + i] = a0[i * a_m + (size_t)k * a_k]; }
                }
                for (int n0 = nb0; n0 < nb_end; n0 += MM_NR) {
                    int n_end = n0 + MM_NR < nb_end ? n0 + MM_NR : nb_end;
                    int nv = (n_end - n0) / VW, nw = nv * VW;  // whole vectors; the last N % VW columns by hand
                    const float* b0 = b + (size_t)k0 * b_k + (size_t)n0 * b_n;
                    if (b_n == 1) {
                        for (int k = 0; k < kc; k++) { memcpy(panel_b + k * nw, b0 + (size_t)k * b_k, nw * sizeof(float)); }
                    } else {
                        for (int j = 0; j < nw; j++) {
                            for (int k = 0; k < kc; k++) { panel_b[k * nw + j] = b0[(size_t)k * b_k + j * b_n]; }
                        }
                    }
                    for (int m = m0; m < m_end; m += MM_MR) {
                        int rm = m_end - m < MM_MR ? m_end - m : MM_MR;
                        const float* am = panel_a + (m - m0);
                        float* cm = c + (size_t)m * N;
                        if (nv > 0) { mm_tile_any(cm + n0, N, am, MB, panel_b, nw, kc, rm, nv); }
                        for (int r = 0; r < rm; r++) {
                            for (int n = n0 + nw; n < n_end; n++) {
                                float sum = cm[(size_t)r * N + n];
                                for (int k = 0; k < kc; k++) { sum += am[r + k * MB] * b[(size_t)(k0 + k) * b_k + n * b_n]; }
                                cm[(size_t)r * N + n] = sum;
                            }
                        }
                    }
                }
            }
        }
    }
}

#endif // COMMON_MATMUL_TILED_H
