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

template <typename T, int W>
struct HeldRow {
    static constexpr int K = 1;
    Pack<T, W> v[K];
    const T* row;
};
template <int W, typename F>
__device__ __forceinline__ void for_lane_vectors(int, int, F f) { f(0, 0); }
template <typename T, int W>
__device__ __forceinline__ Pack<T, W> held(const HeldRow<T, W>& h, int, int) { return h.v[0]; }
template <typename T, int W>
__device__ __forceinline__ void hold(HeldRow<T, W>& h, int, const Pack<T, W>& v) { h.v[0] = v; }
template <typename T, int W>
__device__ __forceinline__ HeldRow<T, W> held_load(const T* row, int, int) {
    HeldRow<T, W> h = {};
    h.row = row;
    return h;
}
template <int W>
__device__ __forceinline__ float2 held_row_stats(const HeldRow<floatX, W>&, int, int) { return make_float2(0.0f, 1.0f); }

template <int W>
__device__ __forceinline__ float2 ln_backward_means(const HeldRow<float, W>&, const HeldRow<floatX, W>&, const floatX*,
                                                    float, float, int, int) {
    return make_float2(0.0f, 0.0f);
}
__device__ __forceinline__ float ln_backward_value(float dout, float, float, float, float, float2) { return dout; }
template <typename RowFn, typename ColumnFn>
__device__ __forceinline__ void ln_backward_rounds(int, int, RowFn per_row, ColumnFn per_column) {
    per_row(0, 0);
    per_column(0, 1);
}
template <int W, typename F>
__device__ __forceinline__ void for_owned_vectors(int, F f) { f(0); }
template <int W>
__device__ __forceinline__ void ln_sums_zero(float*, int, int) {}
template <int W, int n>
__device__ __forceinline__ void ln_sums_add(float*, const float (&)[n][W], int, int) {}
template <int W>
__device__ __forceinline__ void ln_sums_store(float*, const float*, int, int) {}
typedef struct {
    int blocks, block_rows;
    size_t smem;
} LnBackwardLaunch;
static LnBackwardLaunch ln_backward_launch(const void*, int, int, int, const char*) { return LnBackwardLaunch{1, 1, 0}; }
static void ln_grads_finish(float* const*, int, int, int) {}
static float* ln_partials = NULL;

#include "siamese.cuh"

// use every entry point, so that each template and kernel is instantiated and compiled
int main() {
    SiameseNorms p = {};
    SiameseNormGrads g = {};
    SiameseStats st = {};
    siamese_input_forward(NULL, NULL, NULL, st, NULL, NULL, p, 0, 0);
    siamese_input_recompute(NULL, NULL, st, NULL, NULL, p, 0, 0);
    siamese_update_input_forward(NULL, NULL, NULL, NULL, NULL, 1.0f, NULL, NULL, NULL, st, p, 0, 0);
    siamese_input_backward(NULL, NULL, NULL, 1.0f, 1, NULL, g, p, st, NULL, NULL, NULL, 0, 0);
    return 0;
}
