/*
tests/fake_nccl/nccl.h: a stand-in for NCCL's header, so that common/dist.h's NCCL path (USE_NCCL)
runs in the CUDA trainer built through the CPU execution layer (tests/cudacpu), with no GPU and no
NCCL. It declares the calls common/dist.h makes, with NCCL's signatures, and carries each one out
with MPI on the layer's device memory (host memory), after checking it as a GPU would need it:

  ncclGetUniqueId, ncclCommInitRank   the id every rank passes is the one rank 0 made (MPI carried
                                      it); rank and size are MPI's
  ncclReduceScatter                   float, sum, in place (recvbuff == sendbuff + rank * recvcount),
                                      size * recvcount floats from sendbuff inside one device
                                      allocation (else the layer stops the program, as a GPU
                                      would with an illegal address), the same recvcount on every
                                      rank, on stream 0, the trainer's
  ncclAllGather                       uint8 (common/dist.h gathers bytes), in place (sendbuff ==
                                      recvbuff + rank * sendcount), size * sendcount bytes at
                                      recvbuff inside one allocation, the same sendcount on every
                                      rank, on stream 0
  with FAKE_NCCL_PARAMETERS=n         the counts are those of n parameters in equal shards
                                      (ceil(n / size) elements per rank), and every element past
                                      the n-th is zero on every rank, before and after each call

A reduce-scatter adds the ranks' pieces in rank order, as common/dist.h's host path does: a run
through this file gives the host path's bits, which the test compares (tests/test_dist.sh). A real
NCCL adds in its own order (common/dist.h). A call that breaks a rule returns ncclInvalidUsage;
ncclGetErrorString then says which rule. ncclCommDestroy prints one line per rank to stderr:
"fake NCCL: rank R of N: K ncclReduceScatter of C floats, M ncclAllGather of B bytes".
*/
#ifndef FAKE_NCCL_H
#define FAKE_NCCL_H

#ifndef CUDACPU
#error "tests/fake_nccl/nccl.h stands in for NCCL only in the CPU execution layer (tests/cudacpu)"
#endif
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cuda_runtime.h>

typedef enum { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInvalidUsage = 5 } ncclResult_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef enum { ncclUint8 = 1, ncclFloat32 = 7, ncclFloat = 7 } ncclDataType_t;
typedef struct { char internal[128]; } ncclUniqueId;

typedef struct {
    int rank, size;
    long reduce_scatters, all_gathers;
    size_t reduce_scatter_count, all_gather_count;  // the counts of the last call of each
} FakeNcclComm;
typedef FakeNcclComm* ncclComm_t;

static char fake_nccl_why[512];  // the rule the last failed call broke

static inline ncclResult_t fake_nccl_refuse(const ncclComm_t comm, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline ncclResult_t fake_nccl_refuse(const ncclComm_t comm, const char* fmt, ...) {
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(fake_nccl_why, sizeof(fake_nccl_why), "fake NCCL: rank %d: %s", comm->rank, what);
    return ncclInvalidUsage;
}

static inline const char* ncclGetErrorString(ncclResult_t r) {
    return r == ncclSuccess ? "no error" : fake_nccl_why;
}

static inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    memset(id, 0, sizeof(*id));
    snprintf(id->internal, sizeof(id->internal), "fake NCCL id of pid %ld", (long)getpid());
    return ncclSuccess;
}

static inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    int mpi_rank = -1, mpi_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
    FakeNcclComm* c = (FakeNcclComm*)calloc(1, sizeof(FakeNcclComm));
    c->rank = rank;
    c->size = nranks;
    ncclUniqueId root = id;
    MPI_Bcast(&root, (int)sizeof(root), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rank != mpi_rank || nranks != mpi_size) {
        return fake_nccl_refuse(c, "ncclCommInitRank: rank %d of %d is not MPI's", rank, nranks);
    }
    if (memcmp(&root, &id, sizeof(id)) != 0 || strncmp(id.internal, "fake NCCL id", 12) != 0) {
        return fake_nccl_refuse(c, "ncclCommInitRank: the id is not the one rank 0 made");
    }
    *comm = c;
    return ncclSuccess;
}

static inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    fprintf(stderr, "fake NCCL: rank %d of %d: %ld ncclReduceScatter of %zu floats, %ld ncclAllGather of %zu bytes\n",
            comm->rank, comm->size, comm->reduce_scatters, comm->reduce_scatter_count, comm->all_gathers,
            comm->all_gather_count);
    free(comm);
    return ncclSuccess;
}

// the same count on every rank (NCCL needs it; a rank with another count would hang or corrupt)
static inline int fake_nccl_same_count(size_t count) {
    unsigned long long mine = count, low = 0, high = 0;
    MPI_Allreduce(&mine, &low, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &high, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    return low == high;
}

// FAKE_NCCL_PARAMETERS: the parameters n, else 0 (no check of the counts and the padding)
static inline size_t fake_nccl_parameters(void) {
    const char* s = getenv("FAKE_NCCL_PARAMETERS");
    return s ? (size_t)strtoull(s, NULL, 10) : 0;
}

// with n parameters in shards of `count` elements of `elem` bytes: count is ceil(n / size) and the
// bytes of the elements past the n-th, up to size * count, are zero
static inline ncclResult_t fake_nccl_check_padding(const ncclComm_t comm, const char* what, const void* buf,
                                                   size_t count, size_t elem) {
    size_t n = fake_nccl_parameters();
    if (n == 0) { return ncclSuccess; }
    size_t shard = (n + comm->size - 1) / comm->size;
    if (count != shard) {
        return fake_nccl_refuse(comm, "%zu elements per rank, but n parameters in equal shards need %zu", count, shard);
    }
    const unsigned char* b = (const unsigned char*)buf;
    for (size_t i = n * elem; i < comm->size * count * elem; i++) {
        if (b[i] != 0) {
            return fake_nccl_refuse(comm, "%s: byte %zu of the padding (bytes %zu to %zu) is not zero", what, i, n * elem,
                                    comm->size * count * elem);
        }
    }
    return ncclSuccess;
}

static inline ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                             ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                             cudaStream_t stream) {
    const float* send = (const float*)sendbuff;
    float* recv = (float*)recvbuff;
    int size = comm->size;
    if (datatype != ncclFloat || op != ncclSum) {
        return fake_nccl_refuse(comm, "ncclReduceScatter: datatype %d, op %d (float sums only)", (int)datatype, (int)op);
    }
    if (stream != (cudaStream_t)0) {
        return fake_nccl_refuse(comm, "ncclReduceScatter: not on stream 0, where the trainer's kernels run");
    }
    if (recv != send + (size_t)comm->rank * recvcount) {
        return fake_nccl_refuse(comm, "ncclReduceScatter: recvbuff is not sendbuff + rank * recvcount (%zu floats): %td",
                                recvcount, recv - send);
    }
    cudacpu::check_device_range(send, size * recvcount * sizeof(float), "fake ncclReduceScatter: sendbuff");
    if (!fake_nccl_same_count(recvcount)) {
        return fake_nccl_refuse(comm, "ncclReduceScatter: recvcount %zu differs between ranks", recvcount);
    }
    if (recvcount > (size_t)INT32_MAX) { return fake_nccl_refuse(comm, "ncclReduceScatter: %zu floats", recvcount); }
    ncclResult_t r = fake_nccl_check_padding(comm, "ncclReduceScatter, before", send, recvcount, sizeof(float));
    if (r != ncclSuccess) { return r; }
    // every rank's piece of this rank's shard, then their sum in rank order
    float* pieces = (float*)malloc((size_t)size * recvcount * sizeof(float));
    MPI_Alltoall(send, (int)recvcount, MPI_FLOAT, pieces, (int)recvcount, MPI_FLOAT, MPI_COMM_WORLD);
    for (size_t i = 0; i < recvcount; i++) {
        float sum = pieces[i];
        for (int p = 1; p < size; p++) { sum += pieces[(size_t)p * recvcount + i]; }
        recv[i] = sum;
    }
    free(pieces);
    comm->reduce_scatters++;
    comm->reduce_scatter_count = recvcount;
    return fake_nccl_check_padding(comm, "ncclReduceScatter, after", send, recvcount, sizeof(float));
}

static inline ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    const unsigned char* send = (const unsigned char*)sendbuff;
    unsigned char* recv = (unsigned char*)recvbuff;
    int size = comm->size;
    if (datatype != ncclUint8) {
        return fake_nccl_refuse(comm, "ncclAllGather: datatype %d (common/dist.h gathers bytes)", (int)datatype);
    }
    if (stream != (cudaStream_t)0) {
        return fake_nccl_refuse(comm, "ncclAllGather: not on stream 0, where the trainer's kernels run");
    }
    if (send != recv + (size_t)comm->rank * sendcount) {
        return fake_nccl_refuse(comm, "ncclAllGather: sendbuff is not recvbuff + rank * sendcount (%zu bytes): %td",
                                sendcount, send - recv);
    }
    cudacpu::check_device_range(recv, size * sendcount, "fake ncclAllGather: recvbuff");
    if (!fake_nccl_same_count(sendcount)) {
        return fake_nccl_refuse(comm, "ncclAllGather: sendcount %zu differs between ranks", sendcount);
    }
    if (sendcount > (size_t)INT32_MAX) { return fake_nccl_refuse(comm, "ncclAllGather: %zu bytes", sendcount); }
    // the element size: the bytes per rank over the elements per rank (when n is known)
    size_t n = fake_nccl_parameters(), elem = 1, count = sendcount;
    if (n > 0) {
        size_t shard = (n + size - 1) / size;
        if (sendcount % shard != 0) {
            return fake_nccl_refuse(comm, "ncclAllGather: %zu bytes per rank is no whole number of shards of %zu",
                                    sendcount, shard);
        }
        elem = sendcount / shard;
        count = shard;
    }
    ncclResult_t r = fake_nccl_check_padding(comm, "ncclAllGather, before", recv, count, elem);
    if (r != ncclSuccess) { return r; }
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, (int)sendcount, MPI_BYTE, MPI_COMM_WORLD);
    comm->all_gathers++;
    comm->all_gather_count = sendcount;
    return fake_nccl_check_padding(comm, "ncclAllGather, after", recv, count, elem);
}

#endif // FAKE_NCCL_H
