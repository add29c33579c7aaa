// dev/cuda/initcheck_probe.cu: does compute-sanitizer's initcheck see cuBLASLt's writes?
// A matmul D = A B through cuBLASLt (bf16, or fp32 with the argument fp32) into a fresh cudaMalloc buffer, A and B set by cudaMemset,
// then a kernel reads every element of D. A clean program: `compute-sanitizer --tool initcheck`
// reporting reads of D as uninitialized means the tool did not track the library's stores (on
// Hopper its kernels may store through the tensor memory accelerator), not that D was unwritten;
// the host check below shows that D holds the product.
//   nvcc -O2 -arch=sm_90 dev/cuda/initcheck_probe.cu -o /tmp/initcheck_probe -lcublasLt
//   compute-sanitizer --tool initcheck /tmp/initcheck_probe [fp32]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>

#define CHECK(x) do { if ((x) != 0) { printf("error %d at line %d\n", (int)(x), __LINE__); exit(1); } } while (0)

template <typename T>
__global__ void sum_kernel(const T* d, int n, float* out) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { s += (float)d[i]; }
    atomicAdd(out, s);  // an order-free sum is fine here: only that it reads d matters
}

int main(int argc, char** argv) {
    const int M = 192, N = 64, K = 64;  // the shapes of the tiny run's qkv matmul: (3C) x (B T) x C
    const bool fp32 = argc > 1 && argv[1][0] == 'f';
    const size_t es = fp32 ? 4 : 2;
    const cudaDataType_t type = fp32 ? CUDA_R_32F : CUDA_R_16BF;
    void *a, *b, *d;
    float* sum;
    CHECK(cudaMalloc(&a, M * K * es));
    CHECK(cudaMalloc(&b, K * N * es));
    CHECK(cudaMalloc(&d, M * N * es));
    CHECK(cudaMalloc(&sum, 4));
    CHECK(cudaMemset(a, 0x3f, M * K * es));  // bf16 0x3f3f = 0.746, fp32 0x3f3f3f3f = 0.747
    CHECK(cudaMemset(b, 0x3f, K * N * es));
    CHECK(cudaMemset(sum, 0, 4));
    cublasLtHandle_t lt;
    CHECK(cublasLtCreate(&lt));
    cublasLtMatmulDesc_t op;
    CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtMatrixLayout_t la, lb, ld;
    CHECK(cublasLtMatrixLayoutCreate(&la, type, M, K, M));
    CHECK(cublasLtMatrixLayoutCreate(&lb, type, K, N, K));
    CHECK(cublasLtMatrixLayoutCreate(&ld, type, M, N, M));
    size_t ws_bytes = 32 << 20;
    void* ws;
    CHECK(cudaMalloc(&ws, ws_bytes));
    cublasLtMatmulPreference_t pref;
    CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &h, &found));
    if (found < 1) { printf("no algorithm\n"); return 1; }
    float one = 1.0f, zero = 0.0f;
    CHECK(cublasLtMatmul(lt, op, &one, a, la, b, lb, &zero, d, ld, d, ld, &h.algo, ws, ws_bytes, 0));
    if (fp32) { sum_kernel<<<1, 256>>>((const float*)d, M * N, sum); }
    else { sum_kernel<<<1, 256>>>((const __nv_bfloat16*)d, M * N, sum); }
    CHECK(cudaGetLastError());
    float s = 0.0f;
    CHECK(cudaMemcpy(&s, sum, 4, cudaMemcpyDeviceToHost));
    const float v = fp32 ? 0.74705880f : 0.74609375f;
    float expect = v * v * K * M * N;  // every entry K a b (bf16 rounding aside)
    printf("initcheck_probe (%s): sum of D %.6g, expected about %.6g: %s\n", fp32 ? "fp32" : "bf16", s, expect,
           s > 0.99f * expect && s < 1.01f * expect ? "D holds the product" : "WRONG");
    return 0;
}
