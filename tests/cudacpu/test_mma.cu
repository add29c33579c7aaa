/*
tests/cudacpu/test_mma.cu: checks attention.cuh's warp-level tile products, fa_ldmatrix_x4 and fa_mma_16816, against
the register layouts the PTX ISA documents for ldmatrix (m8n8, x4, .b16) and mma.m16n8k16 (.row.col, bf16 in, fp32
accumulation). The expected position of every register element is an explicit formula here, written from the PTX ISA
apart from attention.cuh's code. One warp, random 16 x 16 matrices (multiples of 1/8 in [-2, 2]: exact in bf16, and
their products and sums exact in fp32, so every value must match exactly):
- ldmatrix: register i of lane l holds (row l / 4, columns 2 (l % 4) + k) of the 8 x 8 matrix whose rows lanes
  8i..8i+7 point at, or with .trans (rows 2 (l % 4) + k, column l / 4); here each lane points at a row of a 16 x 16
  tile as the forward does (matrix i at rows 8 (i % 2), columns 8 (i / 2)), both plain and transposed;
- mma: A, B and C built in registers from their documented layouts (g = l / 4, j = l % 4: A register i at (g + 8 (i % 2),
  2j + k + 8 (i / 2)), B register i at (2j + k + 8i, g), C element e at (g + 8 (e / 2), 2j + e % 2)), D = A B + C read
  back by the C layout and compared with a double-precision product.
The BF16 build through the layer checks the shuffle emulation; built with nvcc for sm_80 or later and run on a GPU,
the same program checks the test itself against the ldmatrix and mma instructions. The FP32 build (ENABLE_FP32)
checks the emulation with float operands.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#ifdef ENABLE_FP32
typedef float floatX;
#else
typedef __nv_bfloat16 floatX;
#endif
#include "cuda_common.cuh"  // cudaCheck, cudaCheckLaunch
static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }
#include "attention.cuh"

#define LD 24  // shared-memory leading dimension (16 + 8, as the forward pads)

// out: plain[32][4][2], trans[32][4][2] (the ldmatrix registers of each lane), d[32][4] (D's registers)
__global__ void mma_probe(float* plain, float* trans, float* d, const float* M, const float* A, const float* B,
                          const float* C) {
    __shared__ float4 tile16[16 * LD * sizeof(floatX) / 16];  // ldmatrix rows: 16-byte aligned
    floatX* tile = (floatX*)tile16;
    const int l = threadIdx.x, g = l / 4, j = l % 4;
    for (int e = l; e < 256; e += 32) { tile[e / 16 * LD + e % 16] = (floatX)M[e]; }
    __syncwarp(0xffffffffu);
    const floatX* row = tile + (l % 8 + 8 * (l / 8 % 2)) * LD + 8 * (l / 16);
    FaPair r[4], t[4];
    fa_ldmatrix_x4<false>(r, row);
    fa_ldmatrix_x4<true>(t, row);
    for (int i = 0; i < 4; i++) {
        for (int k = 0; k < 2; k++) {
            plain[(l * 4 + i) * 2 + k] = (float)r[i].x[k];
            trans[(l * 4 + i) * 2 + k] = (float)t[i].x[k];
        }
    }
    FaPair a[4], b[2];
    float acc[4];
    for (int i = 0; i < 4; i++) {
        for (int k = 0; k < 2; k++) { a[i].x[k] = (floatX)A[(g + 8 * (i % 2)) * 16 + 2 * j + k + 8 * (i / 2)]; }
    }
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < 2; k++) { b[i].x[k] = (floatX)B[(2 * j + k + 8 * i) * 8 + g]; }
    }
    for (int e = 0; e < 4; e++) { acc[e] = C[(g + 8 * (e / 2)) * 8 + 2 * j + e % 2]; }
    fa_mma_16816(acc, a, b);
    for (int e = 0; e < 4; e++) { d[l * 4 + e] = acc[e]; }
}

static float draw(unsigned* s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((int)(*s >> 24) % 33 - 16) / 8.0f;  // -2 .. 2 in steps of 1/8
}

int main(void) {
    float M[256], A[256], B[128], C[128];
    unsigned seed = 7;
    for (float& v : M) { v = draw(&seed); }
    for (float& v : A) { v = draw(&seed); }
    for (float& v : B) { v = draw(&seed); }
    for (float& v : C) { v = draw(&seed); }
    float *dM, *dA, *dB, *dC, *dout;
    cudaCheck(cudaMalloc(&dM, sizeof M));
    cudaCheck(cudaMalloc(&dA, sizeof A));
    cudaCheck(cudaMalloc(&dB, sizeof B));
    cudaCheck(cudaMalloc(&dC, sizeof C));
    cudaCheck(cudaMalloc(&dout, 640 * sizeof(float)));
    cudaCheck(cudaMemcpy(dM, M, sizeof M, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dC, C, sizeof C, cudaMemcpyHostToDevice));
    mma_probe<<<1, 32>>>(dout, dout + 256, dout + 512, dM, dA, dB, dC);
    cudaCheckLaunch();
    float out[640];
    cudaCheck(cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost));
    int bad[3] = {0, 0, 0};
    for (int l = 0; l < 32; l++) {
        for (int i = 0; i < 4; i++) {
            for (int k = 0; k < 2; k++) {
                // matrix i: tile rows 8 (i % 2).., columns 8 (i / 2)..; within it (l / 4, 2 (l % 4) + k), or transposed
                int r0 = 8 * (i % 2), c0 = 8 * (i / 2), mr = l / 4, mc = 2 * (l % 4) + k;
                float want_plain = M[(r0 + mr) * 16 + c0 + mc], want_trans = M[(r0 + mc) * 16 + c0 + mr];
                float got_plain = out[(l * 4 + i) * 2 + k], got_trans = out[256 + (l * 4 + i) * 2 + k];
                if (got_plain != want_plain && bad[0]++ < 3) {
                    printf("  ldmatrix: lane %d register %d element %d: %g, want %g\n", l, i, k, got_plain, want_plain);
                }
                if (got_trans != want_trans && bad[1]++ < 3) {
                    printf("  ldmatrix.trans: lane %d register %d element %d: %g, want %g\n", l, i, k, got_trans, want_trans);
                }
            }
        }
        for (int e = 0; e < 4; e++) {
            int r = l / 4 + 8 * (e / 2), c = 2 * (l % 4) + e % 2;
            double want = C[r * 8 + c];
            for (int k = 0; k < 16; k++) { want += (double)A[r * 16 + k] * B[k * 8 + c]; }
            if (out[512 + l * 4 + e] != (float)want && bad[2]++ < 3) {
                printf("  mma: lane %d element %d (D %d, %d): %g, want %g\n", l, e, r, c, out[512 + l * 4 + e], want);
            }
        }
    }
    printf("ldmatrix x4: %s; ldmatrix x4 .trans: %s; mma m16n8k16: %s\n", bad[0] ? "FAIL" : "ok", bad[1] ? "FAIL" : "ok",
           bad[2] ? "FAIL" : "ok");
    cudaCheck(cudaFree(dM));
    cudaCheck(cudaFree(dA));
    cudaCheck(cudaFree(dB));
    cudaCheck(cudaFree(dC));
    cudaCheck(cudaFree(dout));
    return bad[0] || bad[1] || bad[2] ? 1 : 0;
}
