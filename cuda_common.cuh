/*
cuda_common.cuh: the CUDA trainer's host plumbing (train_gpt2.cu, test_gpt2.cu): the checks around every CUDA and
cuBLASLt call, allocation, the choice of GPU. Every failure ends the program with one line (fatal, common/utils.h).
*/
#ifndef CUDA_COMMON_CUH
#define CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cublasLt.h>
#include "common/utils.h"

#ifndef GPU_ARCH_BUILT
#define GPU_ARCH_BUILT 0  // the architecture the Makefile compiled for (GPU_ARCH), to say so on an older GPU
#endif

static inline void cuda_check(cudaError_t err, const char* call, const char* file, int line) {
    if (err != cudaSuccess) { fatal("CUDA: %s (%s at %s:%d)", cudaGetErrorString(err), call, file, line); }
}
#define cudaCheck(call) cuda_check((call), #call, __FILE__, __LINE__)

// Kernels run asynchronously: a fault surfaces at the next call that waits for the GPU, often far from the kernel.
// TRAIN_GPT2CU_SYNC_CHECK=1 (not "" or "0") waits after every kernel and cuBLASLt launch to name the one at fault.
static inline void cuda_check_launch(const char* what, const char* file, int line) {
    static int sync_check = -1;  // -1: not read yet
    if (sync_check < 0) {
        const char* v = getenv("TRAIN_GPT2CU_SYNC_CHECK");
        sync_check = v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
        if (sync_check) { printf("note: TRAIN_GPT2CU_SYNC_CHECK: waiting for the GPU after every launch (slow)\n"); }
    }
    cuda_check(cudaGetLastError(), what, file, line);                      // a bad launch configuration
    if (sync_check) { cuda_check(cudaDeviceSynchronize(), what, file, line); }  // a fault while it ran
}
#define cudaCheckLaunch() cuda_check_launch("kernel launch", __FILE__, __LINE__)  // after every kernel launch

static inline void cublas_check(cublasStatus_t st, const char* call, const char* file, int line) {
    if (st != CUBLAS_STATUS_SUCCESS) { fatal("cuBLASLt: %s (%s at %s:%d)", cublasGetStatusString(st), call, file, line); }
}
#define cublasCheck(call) cublas_check((call), #call, __FILE__, __LINE__)

// device memory, or pinned host memory, which the GPU reads directly: a cudaMemcpyAsync from it returns at once
static void* cuda_alloc_check(size_t bytes, int pinned, const char* what) {
    void* p = NULL;
    cudaError_t err = pinned ? cudaMallocHost(&p, bytes > 0 ? bytes : 1) : cudaMalloc(&p, bytes > 0 ? bytes : 1);
    if (err != cudaSuccess) {
        fatal("out of %s memory allocating %.1f MiB for %s", pinned ? "pinned host" : "GPU", bytes / 1048576.0, what);
    }
    return p;
}
static void* cuda_malloc_check(size_t bytes, const char* what) { return cuda_alloc_check(bytes, 0, what); }
static void* pinned_malloc_check(size_t bytes, const char* what) { return cuda_alloc_check(bytes, 1, what); }

// Is there a GPU this build can run on? The number of GPUs, GPU 0 described in `msg`; or 0, the reason in `msg`.
static int cuda_device_usable(char* msg, size_t cap) {
    int n = 0;
    cudaDeviceProp prop;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaSuccess && n == 0) { err = cudaErrorNoDevice; }
    if (err == cudaSuccess) { err = cudaGetDeviceProperties(&prop, 0); }
    int cc = err == cudaSuccess ? prop.major * 10 + prop.minor : 0;
    if (err != cudaSuccess) {
        snprintf(msg, cap, "no CUDA device (%s)", cudaGetErrorString(err));
#ifndef ENABLE_FP32
    } else if (cc < 80) {
        snprintf(msg, cap, "GPU %s has compute capability %d.%d; bf16 needs 8.0 or newer (build with PRECISION=FP32)",
                 prop.name, prop.major, prop.minor);
#endif
    } else if (GPU_ARCH_BUILT > 0 && cc < GPU_ARCH_BUILT) {
        snprintf(msg, cap, "GPU %s has compute capability %d.%d but this binary was built for sm_%d "
                 "(rebuild with make GPU_ARCH=%d)", prop.name, prop.major, prop.minor, GPU_ARCH_BUILT, cc);
    } else {
        snprintf(msg, cap, "%s (compute capability %d.%d, %.1f GiB)", prop.name, prop.major, prop.minor,
                 prop.totalGlobalMem / 1073741824.0);
        return n;
    }
    return 0;
}

// *buf: a host copy of `bytes` of device memory at src (allocated by the first call; later calls copy as many)
static void* download_into(void** buf, const void* src, size_t bytes) {
    if (*buf == NULL) { *buf = malloc_check(bytes, "host copy of device memory"); }
    cudaCheck(cudaMemcpy(*buf, src, bytes, cudaMemcpyDeviceToHost));
    return *buf;
}

// the GPU of rank `local_rank` here (common/dist.h), described in `device`; ranks share one only without NCCL
static void cuda_select_device(int local_rank, char* device, size_t cap) {
    int gpus = cuda_device_usable(device, cap);
    if (gpus == 0) { fatal("%s", device); }
#ifdef USE_NCCL
    if (local_rank >= gpus) { fatal("%d ranks on this machine need a GPU each; it has %d", local_rank + 1, gpus); }
#endif
    cudaCheck(cudaSetDevice(local_rank % gpus));
}

#endif // CUDA_COMMON_CUH
