/*
common/dist.h: data-parallel training over several processes (ranks), for both trainers.

    mpirun -np 2 ./train_gpt2 ...            two CPU processes on this machine
    mpirun -np 8 -H a:4,b:4 ./train_gpt2cu   eight GPUs on two machines, one GPU per rank

MPI starts the processes and carries the CPU trainer's messages; on GPUs NCCL carries them (MPI
only hands out NCCL's id). Without mpirun, or in a build without MPI, there is one rank and every
function here does nothing, so a single process runs exactly the code it always ran.

One optimizer step on N ranks (common/train_loop.h drives it):

    1. every rank runs grad_accum / N micro-batches of its own slice of the batch
       (common/dataloader.h: of every N windows of B*T tokens of the data, rank r reads the r-th)
    2. reduce-scatter: the parameters are cut into N contiguous shards (below); rank r receives
       shard r of the sum of every rank's gradients. Who adds in which order depends on the
       transport (below): on the host path in rank order, with NCCL in the order of its algorithm
    3. the gradient norm: every rank sums the squares of its shard (in double), the N partial sums
       are added in rank order, so every rank clips with the same norm
    4. ZeRO-1 (-z 1, the default): rank r runs AdamW on shard r only and holds AdamW's m and v for
       that shard only (1/N of the optimizer memory; on the GPU the fp32 master weights too), then
       an all-gather hands every rank the updated weights of every shard.
       -z 0: the summed gradient shards are all-gathered instead and every rank updates all of
       the weights with full-size m and v (a plain all-reduce). Both give the same bits.

Shards. n parameters over N ranks: every shard has S = ceil(n / N) places, rank r owns the
parameters [r*S, min((r+1)*S, n)), so the last rank's shard holds N*S - n (< N) parameters fewer
than the others. NCCL's ncclReduceScatter and ncclAllGather move the same count, S, for every rank,
so the device buffers they work on (the CUDA trainer's fp32 gradients and floatX working weights)
have N*S elements, the last N*S - n of them zero: no rank reads or writes past an allocation, and
the padding stays zero (sums of zeros). MPI's v-collectives take one count per rank, so the host
path moves only the n parameters and the C trainer's buffers have n elements. The layout is the
same on every transport: which rank owns which parameter (AdamW's moments, the GPU's fp32 master
weights) does not depend on NCCL. A model with so few parameters that a rank would own none
(n <= (N-1)*S) is refused.

Checkpoints hold the whole state: the shards of the weights and moments are gathered on rank 0,
which writes the files as a single process does (common/state.h), n parameters, no padding. So a
run resumes with any N. Rank 0 alone prints, logs, samples and writes; the other ranks' standard
output goes nowhere (their errors still reach stderr). A rank that dies or stops with an error ends
the job: mpirun kills the others when one exits with a non-zero status or a signal, and MPI errors
are fatal.

Transports, and the order in which each adds the gradients (doc/distributed.md says more):
  - host memory, MPI (the C trainer; the CUDA trainer without NCCL, whose device buffers are copied
    to host memory and back, as on the CPU execution layer of tests/cudacpu): MPI_Alltoallv hands
    rank r every rank's piece of shard r, and rank r adds them itself IN RANK ORDER 0, 1, ..., N-1,
    whatever order they arrived in. The sum depends only on N and the pieces added, not on timing
    or topology: for a fixed N the same pieces give the same bits, run after run, on any machine
    (not the bits of 1 process, which adds its micro-batches in another order). MPI_Allgatherv and
    MPI_Gatherv move the shards.
  - NCCL (the CUDA trainer built with USE_NCCL): one ncclReduceScatter and one ncclAllGather of
    S elements per rank, in place, queued on the stream the trainer's kernels run on. NCCL adds in
    an order fixed by the algorithm it picks for the reduce-scatter (ring, PAT, NVLS, CollNet; by
    message size, N and topology) and by the rings it builds over the GPUs of this topology (a
    ring adds shard r's pieces rank after rank around the ring, rank r's last): not rank order, so
    not the bits of the host path nor of 1 process. It is expected to repeat run to run on the
    same machines, rank-to-GPU placement, N, NCCL version and settings (NCCL_ALGO, NCCL_PROTO
    fixed); NVLS, which adds inside the NVLink switch, has been reported not to repeat.
*/
#ifndef COMMON_DIST_H
#define COMMON_DIST_H

#include <limits.h>
#include <signal.h>
#include "utils.h"
#ifdef USE_MPI
#include <mpi.h>
#endif
#ifdef USE_NCCL
#include <nccl.h>
#endif

typedef struct {
    int rank, size;       // this process and how many there are (0 and 1 without mpirun)
    int local_rank;       // among the ranks on this machine: the GPU this rank uses
    size_t n;             // the model's parameters, which the collectives sum and gather
    size_t shard;         // S = ceil(n / size): the places of every shard (the last holds fewer parameters)
    size_t padded;        // size * S: the length of the device buffers NCCL works on (n and zeros)
    size_t lo, hi;        // this rank's shard [lo, hi) of the parameters: [rank * S, min(lo + S, n))
    int* counts;          // (size) every rank's shard length, for MPI's v-collectives
    int* displs;          // (size) and its start
    float* gather;        // (size * largest shard) reduce-scatter receive buffer, host
    void* stage;          // host copy of a device buffer (when there is no NCCL)
    size_t stage_bytes;
#ifdef USE_NCCL
    ncclComm_t nccl;      // made on first use, once the trainer has chosen its GPU
    int have_nccl;
    cudaStream_t stream;  // the stream the trainer's kernels run on, where the collectives queue
                          // (0, the legacy default stream, unless the trainer sets another)
#endif
} Dist;

// the size of the job mpirun (Open MPI) or MPICH's launcher started this process in; 0 when the
// process was started on its own
static inline int dist_launched_size(void) {
    const char* names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (int i = 0; i < 2; i++) {
        const char* s = getenv(names[i]);
        if (s != NULL && atoi(s) > 0) { return atoi(s); }
    }
    return 0;
}

// the shard [lo, hi) of `n` parameters that rank r of `size` owns: places [r*S, (r+1)*S) with
// S = ceil(n / size), less those past n (the padding, on the last rank)
static inline void dist_shard(size_t n, int r, int size, size_t* lo, size_t* hi) {
    size_t S = (n + size - 1) / size;
    *lo = S * r < n ? S * r : n;
    *hi = *lo + S < n ? *lo + S : n;
}

// When a rank dies, mpirun ends the others with SIGTERM (then SIGKILL). Rank 0 says so in one line
// (mpirun's own report, without -q, names the rank that died); the others end silently, as does a
// rank already reporting an error of its own.
static inline void dist_on_sigterm(int sig) {
    (void)sig;
    if (fatal_rank == 0 && !fatal_started) {
        const char msg[] = "error: rank 0: the job was ended by mpirun: another rank died or stopped with an error, "
                           "or the job was interrupted\n";
        if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0) { /* nothing left to do */ }
    }
    _exit(1);
}

// Joins the job when mpirun started this process (MPI_Init), else stays one rank. Ranks other
// than 0 send their standard output to /dev/null. Call it before anything is printed.
static inline void dist_init(Dist* d) {
    memset(d, 0, sizeof(*d));
    d->size = 1;
    int launched = dist_launched_size();
#ifdef USE_MPI
    if (launched > 0) {
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (!initialized) { MPI_Init(NULL, NULL); }
        MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &d->size);
        MPI_Comm local;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local);
        MPI_Comm_rank(local, &d->local_rank);
        MPI_Comm_free(&local);
    }
#else
    if (launched > 1) {
        fatal("started as one of %d processes (mpirun), but this build has no MPI: install Open MPI "
              "(openmpi-bin, libopenmpi-dev), then make clean and rebuild", launched);
    }
#endif
    if (d->rank > 0 && freopen("/dev/null", "w", stdout) == NULL) { fatal("rank %d: cannot silence stdout", d->rank); }
    fatal_rank = d->size > 1 ? d->rank : -1;  // errors name the rank
    if (d->size > 1) { signal(SIGTERM, dist_on_sigterm); }
}

// sets up the shards of `n` parameters and the buffers the collectives need
static inline void dist_attach(Dist* d, size_t n) {
    d->n = n;
    d->shard = (n + d->size - 1) / d->size;
    d->padded = d->shard * d->size;
    dist_shard(n, d->rank, d->size, &d->lo, &d->hi);
    if (d->size == 1) { return; }
    if (n <= d->shard * (d->size - 1)) {
        fatal("%zu parameters over %d ranks: shards of %zu leave ranks without parameters; use fewer ranks",
              n, d->size, d->shard);
    }
    if (d->shard > (size_t)INT_MAX / 4) { fatal("%zu parameters over %d ranks: shards too large for MPI", n, d->size); }
    d->counts = (int*)malloc_check(d->size * sizeof(int), "shard sizes");
    d->displs = (int*)malloc_check(d->size * sizeof(int), "shard starts");
    for (int r = 0; r < d->size; r++) {
        size_t lo, hi;
        dist_shard(n, r, d->size, &lo, &hi);
        d->counts[r] = (int)(hi - lo);
        d->displs[r] = (int)lo;
    }
    d->gather = (float*)malloc_check((size_t)d->size * (d->hi - d->lo) * sizeof(float), "reduce-scatter buffer");
}

// ----------------------------------------------------------------------------
// the collectives on host memory (MPI). With one rank they return at once.

#ifdef USE_MPI
// MPI's counts are ints: a datatype of `bytes` bytes keeps them small
static inline MPI_Datatype dist_elem_type(size_t bytes) {
    MPI_Datatype t;
    MPI_Type_contiguous((int)bytes, MPI_BYTE, &t);
    MPI_Type_commit(&t);
    return t;
}
#endif

// buf (n floats) on every rank -> buf[lo, hi) on rank r holds the sum over ranks of that shard,
// added in rank order (deterministic for a given N); the rest of buf is left as it was
static inline void dist_reduce_scatter_host(Dist* d, float* buf) {
    if (d->size == 1) { return; }
#ifdef USE_MPI
    size_t len = d->hi - d->lo;
    int* recv_counts = (int*)malloc_check(d->size * sizeof(int), "counts");
    int* recv_displs = (int*)malloc_check(d->size * sizeof(int), "starts");
    for (int r = 0; r < d->size; r++) { recv_counts[r] = (int)len; recv_displs[r] = (int)(r * len); }
    MPI_Alltoallv(buf, d->counts, d->displs, MPI_FLOAT, d->gather, recv_counts, recv_displs, MPI_FLOAT, MPI_COMM_WORLD);
    free(recv_counts);
    free(recv_displs);
    float* out = buf + d->lo;
    for (size_t i = 0; i < len; i++) {
        float sum = d->gather[i];
        for (int r = 1; r < d->size; r++) { sum += d->gather[r * len + i]; }
        out[i] = sum;
    }
#else
    (void)buf;
#endif
}

// every rank's shard [lo, hi) of buf (elements of `bytes` bytes) to every rank
static inline void dist_all_gather_host(Dist* d, void* buf, size_t bytes) {
    if (d->size == 1) { return; }
#ifdef USE_MPI
    MPI_Datatype t = dist_elem_type(bytes);
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, d->counts, d->displs, t, MPI_COMM_WORLD);
    MPI_Type_free(&t);
#else
    (void)buf;
    (void)bytes;
#endif
}

// every rank's `shard` (its [lo, hi) of n floats) into full (n floats) on rank 0
static inline void dist_gather_to_root(Dist* d, const float* shard, float* full) {
    if (d->size == 1) {
        if (full != shard) { memcpy(full, shard, d->n * sizeof(float)); }
        return;
    }
#ifdef USE_MPI
    MPI_Gatherv(shard, (int)(d->hi - d->lo), MPI_FLOAT, full, d->counts, d->displs, MPI_FLOAT, 0, MPI_COMM_WORLD);
#endif
}

// the sum over ranks of x, added in rank order, on every rank
static inline double dist_sum(Dist* d, double x) {
    if (d->size == 1) { return x; }
    double total = 0.0;
#ifdef USE_MPI
    double* all = (double*)malloc_check(d->size * sizeof(double), "partial sums");
    MPI_Allgather(&x, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    for (int r = 0; r < d->size; r++) { total += all[r]; }
    free(all);
#endif
    return total;
}

// values[i] (n doubles) that exactly one rank computed (the others hold 0) to every rank; the
// sums are exact (x + 0 = x), so no order matters
static inline void dist_share(Dist* d, double* values, int n) {
    if (d->size == 1) { return; }
#ifdef USE_MPI
    MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
#else
    (void)values;
    (void)n;
#endif
}

// rank 0's *value to every rank
static inline void dist_broadcast_int(Dist* d, int* value) {
    if (d->size == 1) { return; }
#ifdef USE_MPI
    MPI_Bcast(value, 1, MPI_INT, 0, MPI_COMM_WORLD);
#else
    (void)value;
#endif
}

static inline void dist_barrier(Dist* d) {
    if (d->size == 1) { return; }
#ifdef USE_MPI
    MPI_Barrier(MPI_COMM_WORLD);
#endif
}

// ----------------------------------------------------------------------------
// the CUDA trainer's buffers, in GPU memory: NCCL where the build has it (USE_NCCL), else copied to
// host memory and sent with MPI (a GPU build without NCCL, and the CPU execution layer of
// tests/cudacpu, where make test runs this path). The C trainer's buffers go to MPI as they are.

#if defined(__CUDACC__) || defined(CUDACPU)
static inline void dist_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    cudaError_t err = cudaMemcpy(dst, src, bytes, kind);
    if (err != cudaSuccess) { fatal("copy for the ranks' exchange failed: %s", cudaGetErrorString(err)); }
}

static inline void* dist_stage(Dist* d, size_t bytes) {
    if (d->stage_bytes < bytes) {
        free(d->stage);
        d->stage = malloc_check(bytes, "host copy for MPI");
        d->stage_bytes = bytes;
    }
    return d->stage;
}

#ifdef USE_NCCL
static inline void nccl_check(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) { fatal("NCCL %s: %s", what, ncclGetErrorString(r)); }
}

static inline void dist_nccl_ready(Dist* d) {
    if (d->have_nccl) { return; }
    ncclUniqueId id;
    if (d->rank == 0) { nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId"); }
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);  // MPI hands NCCL's id to every rank
    nccl_check(ncclCommInitRank(&d->nccl, d->size, id, d->rank), "ncclCommInitRank");
    d->have_nccl = 1;
}
#endif

// dist_reduce_scatter_host on a device buffer. NCCL: buf holds d->padded floats (the last
// padded - n of them zero); one ncclReduceScatter of S floats per rank, in place: rank r's sum
// lands at buf + r*S, where its own piece of shard r was. NCCL picks the order of the additions.
static inline void dist_reduce_scatter_device(Dist* d, float* buf) {
    if (d->size == 1) { return; }
#ifdef USE_NCCL
    dist_nccl_ready(d);
    nccl_check(ncclReduceScatter(buf, buf + d->rank * d->shard, d->shard, ncclFloat, ncclSum, d->nccl, d->stream),
               "ncclReduceScatter");
#else
    float* host = (float*)dist_stage(d, d->n * sizeof(float));
    dist_copy(host, buf, d->n * sizeof(float), cudaMemcpyDeviceToHost);
    dist_reduce_scatter_host(d, host);
    dist_copy(buf + d->lo, host + d->lo, (d->hi - d->lo) * sizeof(float), cudaMemcpyHostToDevice);
#endif
}

// dist_all_gather_host on a device buffer. NCCL: buf holds d->padded elements of `bytes` bytes;
// one ncclAllGather of S elements per rank (as S * bytes bytes: gathering only copies), in place:
// rank r's shard at buf + r*S goes to every rank
static inline void dist_all_gather_device(Dist* d, void* buf, size_t bytes) {
    if (d->size == 1) { return; }
    char* b = (char*)buf;
#ifdef USE_NCCL
    dist_nccl_ready(d);
    size_t shard_bytes = d->shard * bytes;
    nccl_check(ncclAllGather(b + d->rank * shard_bytes, b, shard_bytes, ncclUint8, d->nccl, d->stream), "ncclAllGather");
#else
    char* host = (char*)dist_stage(d, d->n * bytes);
    dist_copy(host + d->lo * bytes, b + d->lo * bytes, (d->hi - d->lo) * bytes, cudaMemcpyDeviceToHost);
    dist_all_gather_host(d, host, bytes);
    dist_copy(b, host, d->n * bytes, cudaMemcpyHostToDevice);
#endif
}
#endif

// the gradients and working weights of the trainer that includes this: device buffers in the CUDA
// trainer, host buffers in the C trainer
static inline void dist_reduce_scatter(Dist* d, float* buf) {
#if defined(__CUDACC__) || defined(CUDACPU)
    dist_reduce_scatter_device(d, buf);
#else
    dist_reduce_scatter_host(d, buf);
#endif
}

static inline void dist_all_gather(Dist* d, void* buf, size_t bytes) {
#if defined(__CUDACC__) || defined(CUDACPU)
    dist_all_gather_device(d, buf, bytes);
#else
    dist_all_gather_host(d, buf, bytes);
#endif
}

static inline void dist_free(Dist* d) {
    free(d->counts);
    free(d->displs);
    free(d->gather);
    free(d->stage);
#ifdef USE_NCCL
    if (d->have_nccl) { ncclCommDestroy(d->nccl); }
#endif
#ifdef USE_MPI
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) { MPI_Finalize(); }
#endif
    memset(d, 0, sizeof(*d));
}

#endif // COMMON_DIST_H
