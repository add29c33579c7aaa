/*
tests/cudacpu/test_schedule.cu: what the CPU execution layer's thread schedules (CUDACPU_SCHEDULE,
tests/cudacpu/README.md "Schedules") do, for tests/cudacpu/test_schedule.sh. Plain CUDA: it builds
with nvcc as well. Usage: test_schedule CASE, CASE one of

  order         prints the order in which the threads of two blocks of 80 (warps of 32, 32 and 16)
                passed the points of a kernel with two block barriers and warp operations between
                them, as lines the script compares: per stretch between barriers, whether each
                warp ran alone (and the warps' order), whether the lanes of each warp met at each
                warp operation, and the order of the blocks
  war, war_barrier
                each warp sums a shared tile of 64 values that the 64 threads reload in the next
                iteration; `war` leaves out the barrier between the last read of a tile and the
                writes of the next one (a write-after-read race between warps, with warp shuffles
                after the reads, as in a flash-attention key loop); prints the sums and whether
                they are right (exit 0 when right, 1 when wrong)
  raw, raw_barrier
                warp 0 reduces its values with shuffles and lane 0 stores the sum in shared
                memory; warp 1, after a shuffle of its own, reads it; `raw` leaves out the barrier
                between the store and the read (a read-after-write race between warps)
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

#define ORDER_THREADS 80  // warps of 32, 32 and 16 lanes
#define ORDER_BLOCKS 2
#define ORDER_POINTS 6     // the points where a thread takes a stamp, in program order
#define ORDER_STRETCHES 3  // points 0-1, 2-3, 4-5: separated by the two block barriers

__device__ inline float warp_total(float v) {
    for (int o = 16; o > 0; o >>= 1) { v += __shfl_xor_sync(0xffffffffu, v, o); }
    return v;
}

// stamp[(block * ORDER_POINTS + point) * ORDER_THREADS + thread]: the value of a block-wide clock
// when the thread passed the point (the clock counts every stamp of the launch)
__global__ void order_kernel(int* stamp, int* clock) {
    int t = threadIdx.x, lane = t % 32;
    int* mine = stamp + blockIdx.x * ORDER_POINTS * ORDER_THREADS + t;
    unsigned full = t < 64 ? 0xffffffffu : 0x0000ffffu;  // the third warp has 16 lanes
    mine[0 * ORDER_THREADS] = atomicAdd(clock, 1);
    float v = __shfl_xor_sync(full, (float)t, 1);
    mine[1 * ORDER_THREADS] = atomicAdd(clock, 1) + (v < 0.0f);  // (v is never negative)
    __syncthreads();
    mine[2 * ORDER_THREADS] = atomicAdd(clock, 1);
    __syncwarp(full);
    mine[3 * ORDER_THREADS] = atomicAdd(clock, 1);
    __syncthreads();
    if (lane >= 8 && t >= 64) {  // lanes 8-15 of the third warp exit: the others still run alone
        mine[4 * ORDER_THREADS] = mine[5 * ORDER_THREADS] = -1;
        return;
    }
    mine[4 * ORDER_THREADS] = atomicAdd(clock, 1);
    __syncwarp(t < 64 ? 0xffffffffu : 0x000000ffu);
    mine[5 * ORDER_THREADS] = atomicAdd(clock, 1);
}

// out[t] = the sum over both iterations of the tile sums: in[0..63] then in[64..127]
__global__ void war_kernel(float* out, const float* in, int with_barrier) {
    __shared__ float tile[64];
    int t = threadIdx.x, lane = t % 32;
    float acc = 0.0f;
    for (int it = 0; it < 2; it++) {
        if (with_barrier) { __syncthreads(); }  // every warp is done reading the previous tile
        tile[t] = in[it * 64 + t];
        __syncthreads();
        acc += warp_total(tile[lane] + tile[lane + 32]);
    }
    out[t] = acc;
}

// out[t] (warp 1) = the sum of in[0..31] that warp 0 stored
__global__ void raw_kernel(float* out, const float* in, int with_barrier) {
    __shared__ float total;
    int t = threadIdx.x, warp = t / 32;
    float v = warp_total(in[t]);  // both warps: warp 0's sum is its store, warp 1's is discarded
    if (warp == 0 && t == 0) { total = v; }
    if (with_barrier) { __syncthreads(); }
    if (warp == 1) { out[t - 32] = total; }
}

static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        printf("%s: %s\n", what, cudaGetErrorString(e));
        exit(2);
    }
}

// the `order` case: prints the lines test_schedule.sh compares
static int order_case(void) {
    const int n = ORDER_BLOCKS * ORDER_POINTS * ORDER_THREADS;
    int *d_stamp = NULL, *d_clock = NULL;
    check(cudaMalloc(&d_stamp, n * sizeof(int)), "cudaMalloc");
    check(cudaMalloc(&d_clock, sizeof(int)), "cudaMalloc");
    check(cudaMemset(d_clock, 0, sizeof(int)), "cudaMemset");
    order_kernel<<<ORDER_BLOCKS, ORDER_THREADS>>>(d_stamp, d_clock);
    check(cudaGetLastError(), "launch");
    static int stamp[ORDER_BLOCKS][ORDER_POINTS][ORDER_THREADS];
    check(cudaMemcpy(stamp, d_stamp, sizeof(stamp), cudaMemcpyDeviceToHost), "cudaMemcpy");
    check(cudaFree(d_stamp), "cudaFree");
    check(cudaFree(d_clock), "cudaFree");
    const int nwarps = (ORDER_THREADS + 31) / 32;
    int block_first[ORDER_BLOCKS];
    bool lanes_meet = true;
    for (int b = 0; b < ORDER_BLOCKS; b++) {
        block_first[b] = stamp[b][0][0];
        for (int s = 0; s < ORDER_STRETCHES; s++) {
            // the first and last stamp of each warp in this stretch
            int lo[nwarps], hi[nwarps];
            for (int w = 0; w < nwarps; w++) {
                lo[w] = 1 << 30;
                hi[w] = -1;
                for (int t = 32 * w; t < 32 * w + 32 && t < ORDER_THREADS; t++) {
                    for (int p = 2 * s; p < 2 * s + 2; p++) {
                        int v = stamp[b][p][t];
                        if (v < 0) { continue; }  // exited
                        if (v < lo[w]) { lo[w] = v; }
                        if (v > hi[w]) { hi[w] = v; }
                    }
                }
            }
            bool alone = true;
            for (int w = 0; w < nwarps; w++) {
                for (int x = 0; x < nwarps; x++) {
                    if (w != x && lo[w] < hi[x] && lo[x] < hi[w]) { alone = false; }
                }
            }
            printf("block %d, stretch %d: each warp alone: %s", b, s + 1, alone ? "yes" : "no");
            if (alone) {
                printf(", warps in order");
                for (int k = 0; k < nwarps; k++) {  // the warp whose first stamp is the k-th
                    for (int w = 0; w < nwarps; w++) {
                        int rank = 0;
                        for (int x = 0; x < nwarps; x++) { rank += lo[x] < lo[w]; }
                        if (rank == k) { printf(" %d", w); }
                    }
                }
            }
            printf("\n");
            // the lanes of a warp meet at its warp operation (between the two points of the
            // stretch): every lane's first stamp comes before every lane's second
            for (int w = 0; w < nwarps; w++) {
                int last_before = -1, first_after = 1 << 30;
                for (int t = 32 * w; t < 32 * w + 32 && t < ORDER_THREADS; t++) {
                    if (stamp[b][2 * s][t] < 0) { continue; }
                    if (stamp[b][2 * s][t] > last_before) { last_before = stamp[b][2 * s][t]; }
                    if (stamp[b][2 * s + 1][t] < first_after) { first_after = stamp[b][2 * s + 1][t]; }
                }
                if (last_before > first_after) { lanes_meet = false; }
            }
        }
    }
    printf("the lanes of each warp meet at each warp operation: %s\n", lanes_meet ? "yes" : "no");
    printf("blocks in order: %s\n", block_first[0] < block_first[1] ? "0 1" : "1 0");
    return 0;
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s order|war|war_barrier|raw|raw_barrier\n", argv[0]);
        return 2;
    }
    const char* c = argv[1];
    if (strcmp(c, "order") == 0) { return order_case(); }
    bool war = strncmp(c, "war", 3) == 0, raw = strncmp(c, "raw", 3) == 0;
    bool with_barrier = strstr(c, "_barrier") != NULL;
    if ((!war && !raw) || (strlen(c) != 3 && !with_barrier) || (with_barrier && strlen(c) != 11)) {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    // in[i] = i + 1: the tile sums are 2080 and 6176 (war), warp 0's sum 528 (raw)
    float in[128], out[64];
    for (int i = 0; i < 128; i++) { in[i] = (float)(i + 1); }
    float *d_in = NULL, *d_out = NULL;
    check(cudaMalloc(&d_in, sizeof(in)), "cudaMalloc");
    check(cudaMalloc(&d_out, sizeof(out)), "cudaMalloc");
    check(cudaMemcpy(d_in, in, sizeof(in), cudaMemcpyHostToDevice), "cudaMemcpy");
    int nout = war ? 64 : 32;
    float want = war ? 2080.0f + 6176.0f : 528.0f;
    if (war) {
        war_kernel<<<1, 64>>>(d_out, d_in, with_barrier);
    } else {
        raw_kernel<<<1, 64>>>(d_out, d_in, with_barrier);
    }
    check(cudaGetLastError(), "launch");
    check(cudaMemcpy(out, d_out, nout * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
    check(cudaFree(d_in), "cudaFree");
    check(cudaFree(d_out), "cudaFree");
    int wrong = 0;
    for (int i = 0; i < nout; i++) { wrong += out[i] != want; }
    printf("%s: thread 0 %g, thread %d %g (right: %g): %s\n", c, out[0], nout - 1, out[nout - 1], want,
           wrong ? "WRONG" : "right");
    return wrong ? 1 : 0;
}
