/*
tests/cudacpu/cudacpu.h: the device side of the CPU execution layer (see README.md in this folder).

The build force-includes this header (g++ -include) in front of our CUDA sources after
tests/cudacpu/rewrite.sh has turned each `kernel<<<grid, block, smem>>>(args)` into
`cudacpu::Launch("kernel", __FILE__, __LINE__, grid, block, smem).run(kernel, args)` and each
`extern __shared__ T name[]` into a pointer to the block's dynamic shared memory. The real CUDA
headers supply the types (dim3, float2, __nv_bfloat16, the cuBLASLt enums); runtime.cpp defines
the runtime and cuBLASLt functions the sources call.

Execution model: a launch runs its blocks one after another on the calling OS thread. Every CUDA
thread of a block is a fiber with its own stack; a fiber runs until it reaches a barrier
(__syncthreads, __syncwarp, a warp shuffle or vote) or returns, then the next fiber runs.
threadIdx, blockIdx, blockDim and gridDim read the running fiber's state. __shared__ variables
are static thread_local: one copy per OS thread, so one per block, filled with 0xff bytes at the
start of each block (rewrite.sh hands each one to static_smem below). The order in which fibers
(and blocks) run is the schedule: CUDACPU_SCHEDULE=forward (default), reverse, or shuffle:SEED,
all the warps of a block together; or warp, warp-reverse, warp-shuffle:SEED, each warp of a block
alone from one block barrier to the next (README.md, "Schedules").
*/
#ifndef CUDACPU_H
#define CUDACPU_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <tuple>
#include <type_traits>
#include <utility>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

// g++ sees the CUDA headers' host view, where __shared__ means nothing: make it one copy per block
#undef __shared__
#define __shared__ static thread_local
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#define CUDACPU 1

namespace cudacpu {

// ---------------------------------------------------------------------------------------------
// per-fiber and per-block state (defined in runtime.cpp)

struct Fiber;
struct BlockState {
    uint3 block_idx;
    dim3 block_dim, grid_dim;
    unsigned char* dynamic_smem;
};
struct ThreadState {
    uint3 thread_idx;
    int linear;  // threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)
};
extern thread_local ThreadState* current_thread;
extern thread_local BlockState* current_block;

[[noreturn]] void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void outside_kernel(const char* what);
// one line of the launch log (CUDACPU_LAUNCH_LOG, runtime.cpp)
void launch_log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

inline const ThreadState& thread_state(const char* what) {
    if (!current_thread) { outside_kernel(what); }
    return *current_thread;
}
inline const BlockState& block_state(const char* what) {
    if (!current_block) { outside_kernel(what); }
    return *current_block;
}

// barriers: the calling fiber waits until the others named arrive (runtime.cpp)
void sync_block(const char* file, int line);
// a warp-level exchange: every lane in `mask` posts `value` (8 bytes), the call returns what the
// op selects (SHFL_*: a lane's value; VOTE: the ballot of the posted predicates; SYNC: nothing)
enum WarpOp { WARP_SYNC, SHFL_IDX, SHFL_XOR, SHFL_UP, SHFL_DOWN, VOTE_BALLOT, WARP_COLLECTIVE, WARP_GATHER };
uint64_t warp_exchange(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line);
// the collective operations of WMMA: all 32 lanes of the warp must call the same one (`what`);
// warp_gather also returns the 32 values the lanes posted (valid until the caller's next warp operation)
void warp_collective(const char* what, const char* file, int line);
const uint64_t* warp_gather(uint64_t value, const char* what, const char* file, int line);

template <typename T>
inline T shuffle(WarpOp op, unsigned mask, T v, int arg, int width, const char* file, int line) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp shuffle of a value wider than 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof(T));
    bits = warp_exchange(op, mask, bits, arg, width, file, line);
    T out;
    memcpy(&out, &bits, sizeof(T));
    return out;
}

// ---------------------------------------------------------------------------------------------
// launches

struct LaunchConfig {
    const char* name;
    const char* file;
    int line;
    dim3 grid, block;
    size_t smem;
};
// runs body(ctx) once per CUDA thread of the grid; func identifies the kernel (cudaFuncSetAttribute)
void run_grid(const LaunchConfig& cfg, void (*body)(void*), void* ctx, const void* func);

struct Launch {
    LaunchConfig cfg;
    Launch(const char* name, const char* file, int line, dim3 grid, dim3 block, size_t smem = 0,
           cudaStream_t stream = 0) {
        (void)stream;  // launches are synchronous: every stream is the default stream
        cfg.name = name;
        cfg.file = file;
        cfg.line = line;
        cfg.grid = grid;
        cfg.block = block;
        cfg.smem = smem;
    }
    template <typename... P, typename... A>
    void run(void (*kernel)(P...), A&&... args) {
        static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
        // the arguments are copied once, as the launch does; each thread gets its own copy of them
        std::tuple<typename std::decay<P>::type...> params(std::forward<A>(args)...);
        auto body = [&]() { std::apply(kernel, params); };
        run_grid(cfg, [](void* c) { (*static_cast<decltype(body)*>(c))(); }, &body, (const void*)kernel);
    }
};

// fails (like an illegal address on a GPU) unless [p, p + bytes) lies inside one device allocation
void check_device_range(const void* p, size_t bytes, const char* what);

inline int lane_id() { return thread_state("a lane id").linear % 32; }

inline void* dynamic_smem() { return block_state("extern __shared__").dynamic_smem; }

// a static __shared__ variable, the first time this OS thread declares it (rewrite.sh adds the
// call): filled with 0xff bytes now and at the start of every later block, as dynamic shared
// memory is; returns true
bool static_smem(void* p, size_t bytes);

}  // namespace cudacpu

// ---------------------------------------------------------------------------------------------
// the built-in variables

#define threadIdx (cudacpu::thread_state("threadIdx").thread_idx)
#define blockIdx (cudacpu::block_state("blockIdx").block_idx)
#define blockDim (cudacpu::block_state("blockDim").block_dim)
#define gridDim (cudacpu::block_state("gridDim").grid_dim)
static constexpr int warpSize = 32;

// ---------------------------------------------------------------------------------------------
// barriers, shuffles, votes

#define __syncthreads() cudacpu::sync_block(__FILE__, __LINE__)
#define __syncwarp(...) cudacpu_syncwarp(__FILE__, __LINE__, ##__VA_ARGS__)
inline void cudacpu_syncwarp(const char* file, int line, unsigned mask = 0xffffffffu) {
    cudacpu::warp_exchange(cudacpu::WARP_SYNC, mask, 0, 0, 32, file, line);
}
#define __shfl_sync(mask, v, lane, ...) cudacpu::shuffle(cudacpu::SHFL_IDX, mask, v, lane, cudacpu_width(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_xor_sync(mask, v, m, ...) cudacpu::shuffle(cudacpu::SHFL_XOR, mask, v, m, cudacpu_width(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_up_sync(mask, v, d, ...) cudacpu::shuffle(cudacpu::SHFL_UP, mask, v, d, cudacpu_width(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_down_sync(mask, v, d, ...) cudacpu::shuffle(cudacpu::SHFL_DOWN, mask, v, d, cudacpu_width(__VA_ARGS__), __FILE__, __LINE__)
inline int cudacpu_width(int w = 32) { return w; }
#define __ballot_sync(mask, pred) ((unsigned)cudacpu::warp_exchange(cudacpu::VOTE_BALLOT, mask, (pred) != 0, 0, 32, __FILE__, __LINE__))
#define __any_sync(mask, pred) (__ballot_sync(mask, pred) != 0u)
#define __all_sync(mask, pred) (__ballot_sync(mask, pred) == (unsigned)(mask))

// blocks run one at a time and fibers switch only at barriers: these are plain reads and writes
template <typename T>
inline T __ldg(const T* p) { return *p; }
inline void __threadfence() {}
inline void __threadfence_block() {}
template <typename T>
inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <typename T>
inline T atomicMax(T* p, T v) { T old = *p; *p = old > v ? old : v; return old; }
template <typename T>
inline T atomicMin(T* p, T v) { T old = *p; *p = old < v ? old : v; return old; }
template <typename T>
inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <typename T>
inline T atomicCAS(T* p, T cmp, T v) { T old = *p; if (old == cmp) { *p = v; } return old; }

// ---------------------------------------------------------------------------------------------
// device math the host library lacks (full-precision versions of the fast intrinsics)

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }

#include "wmma.h"

// ---------------------------------------------------------------------------------------------
// the call site of every runtime call that can make the host wait for the GPU, for the layer's
// count of them (runtime.cpp, CUDACPU_BLOCKING_LOG). runtime.cpp and cublaslt.cpp define these
// functions and define CUDACPU_RUNTIME first.

namespace cudacpu {
void call_site(const char* file, int line, const char* func);
}
#ifndef CUDACPU_RUNTIME
#define CUDACPU_AT(call) (cudacpu::call_site(__FILE__, __LINE__, __func__), call)
#define cudaMemcpy(...) CUDACPU_AT(cudaMemcpy(__VA_ARGS__))
#define cudaMemcpyAsync(...) CUDACPU_AT(cudaMemcpyAsync(__VA_ARGS__))
#define cudaDeviceSynchronize(...) CUDACPU_AT(cudaDeviceSynchronize(__VA_ARGS__))
#define cudaStreamSynchronize(...) CUDACPU_AT(cudaStreamSynchronize(__VA_ARGS__))
#define cudaEventSynchronize(...) CUDACPU_AT(cudaEventSynchronize(__VA_ARGS__))
#define cudaFree(...) CUDACPU_AT(cudaFree(__VA_ARGS__))
#define cudaFreeHost(...) CUDACPU_AT(cudaFreeHost(__VA_ARGS__))
#endif

#endif  // CUDACPU_H
