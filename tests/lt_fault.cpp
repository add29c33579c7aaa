/*
tests/lt_fault.cpp: cuBLASLt algorithms that fail at run time, for a test_gpt2cu build through the
CPU execution layer (tests/cudacpu). That build renames three calls of the CUDA sources
(-DcublasLtMatmul=lt_fault_matmul and likewise for the heuristic and the descriptor attributes);
the functions below stand in front of the layer's own:

    LT_FAULT=gelu    cublasLtMatmul refuses every fused GELU epilogue (GELU_AUX_BIAS, DGELU) that
                     the heuristic offered: the trainer must run the GELU kernels instead;
    LT_FAULT=first   the heuristic offers each algorithm twice, and the first of the two fails:
                     every matmul must run the second.

Either way test_gpt2cu must pass every check, and train_gpt2.cu says once what happened
(tests/test_lt_fault.sh checks both). At exit it prints how many heuristic queries and matmul
calls the run made: with matmul_lt.cuh's plan per shape, a shape's query is made once, however
often the shape runs.
*/
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>

static std::map<const void*, cublasLtEpilogue_t> epilogues;  // per descriptor, as it was set
static long heuristic_queries = 0, matmul_calls = 0;

static void print_counts(void) {
    printf("lt_fault: %ld heuristic queries for %ld matmul calls\n", heuristic_queries, matmul_calls);
}
static const int counts_printed_at_exit = atexit(print_counts);

static int fault_is(const char* mode) {
    const char* v = getenv("LT_FAULT");
    return v != NULL && strcmp(v, mode) == 0;
}

extern "C" cublasStatus_t lt_fault_set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                                 const void* buf, size_t size) {
    if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE && size == sizeof(cublasLtEpilogue_t)) {
        cublasLtEpilogue_t e;
        memcpy(&e, buf, sizeof(e));
        epilogues[desc] = e;
    }
    return cublasLtMatmulDescSetAttribute(desc, attr, buf, size);
}

extern "C" cublasStatus_t lt_fault_heuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                             cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                             cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld,
                                             cublasLtMatmulPreference_t pref, int requested,
                                             cublasLtMatmulHeuristicResult_t results[], int* found) {
    heuristic_queries++;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, ld, pref, requested, results, found);
    if (st == CUBLAS_STATUS_SUCCESS && fault_is("first") && *found == 1 && requested >= 2) {
        results[1] = results[0];
        results[0].reserved[0] = 1;  // marks the copy that fails
        *found = 2;
    }
    return st;
}

extern "C" cublasStatus_t lt_fault_matmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                          const void* A, cublasLtMatrixLayout_t la, const void* B,
                                          cublasLtMatrixLayout_t lb, const void* beta, const void* C,
                                          cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t ld,
                                          const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                          cudaStream_t stream) {
    matmul_calls++;
    cublasLtEpilogue_t e = epilogues.count(desc) ? epilogues[desc] : CUBLASLT_EPILOGUE_DEFAULT;
    if (fault_is("gelu") && (e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU)) {
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (fault_is("first")) {
        // the marked result: the heuristic result's algo is its first member, reserved[] follows it
        const cublasLtMatmulHeuristicResult_t* r = (const cublasLtMatmulHeuristicResult_t*)algo;
        if (r->reserved[0] == 1) { return CUBLAS_STATUS_EXECUTION_FAILED; }
    }
    return cublasLtMatmul(handle, desc, alpha, A, la, B, lb, beta, C, lc, D, ld, algo, workspace, workspace_bytes,
                          stream);
}
