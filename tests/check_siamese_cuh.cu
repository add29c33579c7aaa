/*
tests/check_siamese_cuh.cu: siamese.cuh compiles with exactly what its header says the includer
provides. Every name on that list is defined here, with a trivial body, and nothing else: if
siamese.cuh starts to use another name of train_gpt2.cu, this file stops compiling, and the list
in siamese.cuh's header (and this file) must grow with it. Compiled (never run) by `make
check-cuda`, in both precisions.
*/
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#ifdef ENABLE_FP32
typedef float floatX;
#else
typedef __nv_bfloat16 floatX;
#endif

#define ROW_WARPS 8
template <typename T, int W>
struct Pack {
    T v[W];
};
#define VEC_X ((int)(16 / sizeof(floatX)))
template <int W, typename T>
__device__ __forceinline__ Pack<T, W> load_pack(const T* p) { return *(const Pack<T, W>*)p; }
template <int W, typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, W>& v) { *(Pack<T, W>*)p = v; }
static int row_width(size_t, const void* const*, int) { return 1; }
#define cudaCheckLaunch() ((void)cudaGetLastError())

static inline int row_blocks(int N) { return (N + ROW_WARPS - 1) / ROW_WARPS; }
__device__ __forceinline__ int warp_row() { return 0; }
__device__ __forceinline__ float warp_sum(float v) { return v; }
template <int W = 1>
__device__ __forceinline__ float2 ln_row_stats(const floatX*, int, int) { return make_float2(0.0f, 1.0f); }
template <int W = 1>
__device__ __forceinline__ float2 ln_backward_means(const float*, const floatX*, const floatX*, float, float, int, int) {
    return make_float2(0.0f, 0.0f);
}
__device__ __forceinline__ float ln_backward_value(float dout, float, float, float, float, float2) { return dout; }

template <typename Td>
struct ColumnJob {
    float* dw;
    float* db;
    const Td* dout;
    const floatX* inp;
    const float* mean;
    const float* rstd;
};
template <typename Td>
struct ColumnJobs {
    ColumnJob<Td> job[3];
};
static ColumnJob<float> ln_job(float* dw, float* db, const float* dout, const floatX* inp, const float* mean,
                               const float* rstd) {
    ColumnJob<float> j = {dw, db, dout, inp, mean, rstd};
    return j;
}
template <typename Td>
static void column_grads(const ColumnJobs<Td>&, int, int, int) {}

#include "siamese.cuh"

// use every entry point, so that each template and kernel is instantiated and compiled
int main() {
    SiameseNorms p = {};
    SiameseNormGrads g = {};
    SiameseStats st = {};
    siamese_input_forward(NULL, NULL, NULL, st, NULL, NULL, p, 0, 0);
    siamese_update_input_forward(NULL, NULL, NULL, NULL, NULL, 1.0f, NULL, NULL, NULL, st, p, 0, 0);
    siamese_input_backward(NULL, NULL, NULL, NULL, NULL, 1.0f, NULL, g, p, st, NULL, NULL, NULL, 0, 0);
    return 0;
}
