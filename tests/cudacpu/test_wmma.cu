/*
tests/cudacpu/test_wmma.cu: checks the layer's software WMMA (tests/cudacpu/wmma.h) on a tiled
matmul D = A . B + C, one warp per output tile, against a double-precision loop on the host: for
each fragment shape (m16n16k16, m32n8k16, m8n32k16), each input type (__half, __nv_bfloat16),
row- and column-major A and B, and the accumulator loaded and stored in both layouts. The inputs
are exactly representable in both types and their products in float, so the only error is the
float accumulation (tolerance 1e-6 relative to the largest |D|). Plain CUDA: it also builds with
nvcc and runs on a GPU, which checks the test itself against real tensor cores.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <type_traits>

using namespace nvcuda;

#define CHECK(call)                                                                               \
    do {                                                                                          \
        cudaError_t err_ = (call);                                                                \
        if (err_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

// D (Mt x Nt) = A (Mt x Kt) . B (Kt x Nt) + C; A, B in the given layouts; C, D float in acc_layout.
// Block (32, warps): warp w of block b computes output tile b * warps + w. Every tile pointer must be
// 32-byte aligned (a B tile 8 columns wide is therefore column-major here).
template <typename T, int M, int N, int K, typename LA, typename LB>
__global__ void wmma_matmul(float* D, const T* A, const T* B, const float* C, int Mt, int Nt, int Kt, int acc_col_major) {
    int tile = blockIdx.x * blockDim.y + threadIdx.y;
    int tiles_n = Nt / N;
    if (tile >= (Mt / M) * tiles_n) { return; }
    int tm = tile / tiles_n, tn = tile % tiles_n;
    bool a_col = std::is_same<LA, wmma::col_major>::value, b_col = std::is_same<LB, wmma::col_major>::value;
    wmma::layout_t acc_layout = acc_col_major ? wmma::mem_col_major : wmma::mem_row_major;
    wmma::fragment<wmma::matrix_a, M, N, K, T, LA> a;
    wmma::fragment<wmma::matrix_b, M, N, K, T, LB> b;
    wmma::fragment<wmma::accumulator, M, N, K, float> acc;
    // C's tile, where D's tile goes
    size_t c_off = acc_col_major ? (size_t)tn * N * Mt + tm * M : (size_t)tm * M * Nt + tn * N;
    unsigned ldc = acc_col_major ? Mt : Nt;
    wmma::load_matrix_sync(acc, C + c_off, ldc, acc_layout);
    for (int k = 0; k < Kt; k += K) {
        // element (r, c) of A at r * Kt + c (row-major) or r + c * Mt (col-major); B likewise
        const T* pa = a_col ? A + (size_t)k * Mt + tm * M : A + (size_t)tm * M * Kt + k;
        const T* pb = b_col ? B + (size_t)tn * N * Kt + k : B + (size_t)k * Nt + tn * N;
        wmma::load_matrix_sync(a, pa, a_col ? Mt : Kt);
        wmma::load_matrix_sync(b, pb, b_col ? Kt : Nt);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(D + c_off, acc, ldc, acc_layout);
}

static float value(int i, int j, int salt) { return (float)(((i * 7 + j * 13 + salt * 5) % 17) - 8) / 8.0f; }

template <typename T>
static T to_t(float v);
template <>
__half to_t<__half>(float v) { return __float2half(v); }
template <>
__nv_bfloat16 to_t<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// one case: returns the number of failures (0 or 1)
template <typename T, int M, int N, int K, typename LA, typename LB>
static int run_case(const char* name, int acc_col_major) {
    const int Mt = 2 * M * 2, Nt = 3 * N, Kt = 4 * K;
    bool a_col = std::is_same<LA, wmma::col_major>::value, b_col = std::is_same<LB, wmma::col_major>::value;
    size_t na = (size_t)Mt * Kt, nb = (size_t)Kt * Nt, nc = (size_t)Mt * Nt;
    T* ha = (T*)malloc(na * sizeof(T));
    T* hb = (T*)malloc(nb * sizeof(T));
    float* hc = (float*)malloc(nc * sizeof(float));
    float* hd = (float*)malloc(nc * sizeof(float));
    for (int r = 0; r < Mt; r++) {
        for (int c = 0; c < Kt; c++) { ha[a_col ? r + (size_t)c * Mt : (size_t)r * Kt + c] = to_t<T>(value(r, c, 1)); }
    }
    for (int r = 0; r < Kt; r++) {
        for (int c = 0; c < Nt; c++) { hb[b_col ? r + (size_t)c * Kt : (size_t)r * Nt + c] = to_t<T>(value(r, c, 2)); }
    }
    for (int r = 0; r < Mt; r++) {
        for (int c = 0; c < Nt; c++) { hc[acc_col_major ? r + (size_t)c * Mt : (size_t)r * Nt + c] = value(r, c, 3); }
    }
    T *da, *db;
    float *dc, *dd;
    CHECK(cudaMalloc(&da, na * sizeof(T)));
    CHECK(cudaMalloc(&db, nb * sizeof(T)));
    CHECK(cudaMalloc(&dc, nc * sizeof(float)));
    CHECK(cudaMalloc(&dd, nc * sizeof(float)));
    CHECK(cudaMemcpy(da, ha, na * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, hb, nb * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dc, hc, nc * sizeof(float), cudaMemcpyHostToDevice));
    int tiles = (Mt / M) * (Nt / N), warps = 4;
    wmma_matmul<T, M, N, K, LA, LB><<<(tiles + warps - 1) / warps, dim3(32, warps)>>>(dd, da, db, dc, Mt, Nt, Kt, acc_col_major);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hd, dd, nc * sizeof(float), cudaMemcpyDeviceToHost));
    double worst = 0.0, largest = 0.0;
    for (int r = 0; r < Mt; r++) {
        for (int c = 0; c < Nt; c++) {
            double ref = value(r, c, 3);
            for (int k = 0; k < Kt; k++) { ref += (double)value(r, k, 1) * value(k, c, 2); }
            double got = hd[acc_col_major ? r + (size_t)c * Mt : (size_t)r * Nt + c];
            worst = fmax(worst, fabs(got - ref));
            largest = fmax(largest, fabs(ref));
        }
    }
    double rel = worst / largest;
    int ok = rel <= 1e-6;
    printf("  %-40s acc %s  max error %.2e  %s\n", name, acc_col_major ? "col" : "row", rel, ok ? "ok" : "FAIL");
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    CHECK(cudaFree(dd));
    free(ha);
    free(hb);
    free(hc);
    free(hd);
    return !ok;
}

int main(void) {
    int fails = 0;
    typedef wmma::row_major R;
    typedef wmma::col_major Cm;
    for (int acc = 0; acc < 2; acc++) {
        fails += run_case<__nv_bfloat16, 16, 16, 16, R, R>("bf16 m16n16k16 A row B row", acc);
        fails += run_case<__nv_bfloat16, 16, 16, 16, Cm, R>("bf16 m16n16k16 A col B row", acc);
        fails += run_case<__nv_bfloat16, 16, 16, 16, R, Cm>("bf16 m16n16k16 A row B col", acc);
        fails += run_case<__nv_bfloat16, 16, 16, 16, Cm, Cm>("bf16 m16n16k16 A col B col", acc);
        fails += run_case<__half, 16, 16, 16, R, Cm>("half m16n16k16 A row B col", acc);
        fails += run_case<__half, 32, 8, 16, Cm, Cm>("half m32n8k16 A col B col", acc);
        fails += run_case<__nv_bfloat16, 8, 32, 16, R, Cm>("bf16 m8n32k16 A row B col", acc);
    }
    printf(fails == 0 ? "wmma: all cases passed\n" : "wmma: %d cases FAILED\n", fails);
    return fails == 0 ? 0 : 1;
}
