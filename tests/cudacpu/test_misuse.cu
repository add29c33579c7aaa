/*
tests/cudacpu/test_misuse.cu: kernels and calls that are wrong on purpose, one per case, for the
CPU execution layer to catch (tests/cudacpu/test_misuse.sh runs each case and checks the layer's
message). Usage: test_misuse CASE. Most cases must end with "cudacpu: error: ..." (exit 70); the
last ones check what a misuse returns, or what an asynchronous copy does. On a GPU several of
these would hang or read garbage: this program is for the layer only.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <mma.h>

using namespace nvcuda;

// half the block returns before a barrier the other half waits at
__global__ void exit_before_barrier(float* out) {
    if (threadIdx.x >= 16) { return; }
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

// two halves of the block wait at two different barriers
__global__ void divergent_barriers(float* out) {
    if (threadIdx.x < 16) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1.0f;
}

// a full-mask shuffle after lane 5 has exited
__global__ void shuffle_exited_lane(float* out) {
    if (threadIdx.x == 5) { return; }
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
}

// lanes 0-15 shuffle among themselves but read lane 20
__global__ void shuffle_outside_mask(float* out) {
    if (threadIdx.x < 16) { out[threadIdx.x] = __shfl_sync(0x0000ffffu, (float)threadIdx.x, 20); }
}

// half the warp reaches a WMMA load
__global__ void wmma_half_warp(const __nv_bfloat16* a) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> f;
    if (threadIdx.x < 16) { wmma::load_matrix_sync(f, a, 16); }
}

// a WMMA load from a pointer that is not 32-byte aligned
__global__ void wmma_misaligned(const __nv_bfloat16* a) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> f;
    wmma::load_matrix_sync(f, a + 1, 16);
}

// thread 32 (lane 0 of the second warp) waits at a full-mask shuffle while its warp's other lanes
// and the first warp wait at a barrier
__global__ void shuffle_while_barrier(float* out) {
    if (threadIdx.x == 32) { out[0] = __shfl_sync(0xffffffffu, 1.0f, 0); }
    __syncthreads();
}

// a block of 48 threads: the second warp has 16 lanes, the full mask names 16 more
__global__ void mask_beyond_partial_warp(float* out) {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
}

// out[block] = a static shared slot before the block writes it; then the block writes it
__global__ void read_static_shared(float* out) {
    __shared__ float slot[1];
    out[blockIdx.x] = slot[0];
    slot[0] = 1.0f;
}

// 1 KiB of static shared memory beside the dynamic shared memory of the launch
__global__ void static_beside_dynamic(float* out) {
    __shared__ float table[256];
    extern __shared__ float dynamic[];
    table[threadIdx.x] = dynamic[threadIdx.x] = 1.0f;
    out[threadIdx.x] = table[threadIdx.x] + dynamic[threadIdx.x];
}

__global__ void copy_kernel(float* out, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { out[i] = in[i]; }
}

static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        printf("%s: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CASE\n", argv[0]);
        return 2;
    }
    const char* c = argv[1];
    float* d = NULL;
    check(cudaMalloc(&d, 1024 * sizeof(float)), "cudaMalloc");
    if (strcmp(c, "exit_before_barrier") == 0) {
        exit_before_barrier<<<1, 32>>>(d);
    } else if (strcmp(c, "divergent_barriers") == 0) {
        divergent_barriers<<<1, 32>>>(d);
    } else if (strcmp(c, "shuffle_exited_lane") == 0) {
        shuffle_exited_lane<<<1, 32>>>(d);
    } else if (strcmp(c, "shuffle_outside_mask") == 0) {
        shuffle_outside_mask<<<1, 32>>>(d);
    } else if (strcmp(c, "wmma_half_warp") == 0) {
        wmma_half_warp<<<1, 32>>>((const __nv_bfloat16*)d);
    } else if (strcmp(c, "wmma_misaligned") == 0) {
        wmma_misaligned<<<1, 32>>>((const __nv_bfloat16*)d);
    } else if (strcmp(c, "shuffle_while_barrier") == 0) {
        shuffle_while_barrier<<<1, 64>>>(d);
    } else if (strcmp(c, "mask_beyond_partial_warp") == 0) {
        mask_beyond_partial_warp<<<1, 48>>>(d);
    } else if (strcmp(c, "threadidx_on_host") == 0) {
        printf("%u\n", threadIdx.x);
    } else if (strcmp(c, "copy_past_allocation") == 0) {
        float host[1025];
        check(cudaMemcpy(host, d, sizeof(host), cudaMemcpyDeviceToHost), "cudaMemcpy");
    } else if (strcmp(c, "matmul_past_allocation") == 0) {
        // a 32 x 32 fp32 matmul whose A has leading dimension 64: its last column lies past the allocation
        cublasLtHandle_t h;
        cublasLtCreate(&h);
        cublasLtMatmulDesc_t desc;
        cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatrixLayout_t la, lb;
        cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 32, 32, 64);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 32, 32, 32);
        float one = 1.0f, zero = 0.0f;
        cublasLtMatmul(h, desc, &one, d, la, d, lb, &zero, d, lb, d, lb, NULL, NULL, 0, 0);
    } else if (strcmp(c, "pinned_written_early") == 0) {
        // the host rewrites the source of an asynchronous copy before it waits for the copy
        float* h = NULL;
        check(cudaMallocHost((void**)&h, 256 * sizeof(float)), "cudaMallocHost");
        for (int i = 0; i < 256; i++) { h[i] = (float)i; }
        check(cudaMemcpyAsync(d, h, 256 * sizeof(float), cudaMemcpyHostToDevice, 0), "cudaMemcpyAsync");
        h[7] = -1.0f;
        cudaStreamSynchronize(0);
    } else if (strcmp(c, "uninitialised_is_nan") == 0) {
        // never written device memory reads as NaN (returns 0 when it does)
        float* e = NULL;
        check(cudaMalloc(&e, 256 * sizeof(float)), "cudaMalloc");
        copy_kernel<<<1, 256>>>(d, e, 256);
        float host[256];
        check(cudaMemcpy(host, d, sizeof(host), cudaMemcpyDeviceToHost), "cudaMemcpy");
        for (int i = 0; i < 256; i++) {
            if (!isnan(host[i])) {
                printf("element %d of a never written allocation reads %g, not NaN\n", i, host[i]);
                return 1;
            }
        }
        printf("never written device memory reads as NaN\n");
        return 0;
    } else if (strcmp(c, "static_shared_is_nan") == 0) {
        // a static __shared__ slot reads as NaN in every block until the block writes it, not as
        // what the block before wrote (returns 0 when it does)
        read_static_shared<<<3, 1>>>(d);
        float host[3];
        check(cudaMemcpy(host, d, sizeof(host), cudaMemcpyDeviceToHost), "cudaMemcpy");
        printf("static shared memory before the block writes it: %g %g %g\n", host[0], host[1], host[2]);
        return isnan(host[0]) && isnan(host[1]) && isnan(host[2]) ? 0 : 1;
    } else if (strcmp(c, "download_lands_at_wait") == 0) {
        // an asynchronous copy to pinned memory lands when the host waits, not before (returns 0 when so)
        float* h = NULL;
        check(cudaMallocHost((void**)&h, 256 * sizeof(float)), "cudaMallocHost");
        for (int i = 0; i < 256; i++) { h[i] = (float)i; }
        check(cudaMemcpy(d, h, 256 * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
        memset(h, 0, 256 * sizeof(float));
        check(cudaMemcpyAsync(h, d, 256 * sizeof(float), cudaMemcpyDeviceToHost, 0), "cudaMemcpyAsync");
        float before = h[7];
        check(cudaStreamSynchronize(0), "cudaStreamSynchronize");
        printf("pinned destination before the wait %g, after %g\n", before, h[7]);
        return before == 0.0f && h[7] == 7.0f ? 0 : 1;
    } else if (strcmp(c, "static_beside_dynamic") == 0) {
        // 48 KiB of dynamic shared memory fit the default limit alone, not beside 1 KiB of static
        static_beside_dynamic<<<1, 256, 48 * 1024>>>(d);
    } else if (strcmp(c, "too_many_threads") == 0) {
        // a launch over the limits is an error the next cudaGetLastError returns (returns 0 when it does)
        copy_kernel<<<1, 2048>>>(d, d, 0);
        cudaError_t e = cudaGetLastError();
        printf("a block of 2048 threads: %s\n", cudaGetErrorString(e));
        return e == cudaErrorInvalidConfiguration ? 0 : 1;
    } else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    cudaDeviceSynchronize();
    printf("case %s: no error reported\n", c);
    return 1;
}
