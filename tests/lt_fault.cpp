/*
tests/lt_fault.cpp: cuBLASLt refusing every fused GELU epilogue, for a test_gpt2cu build through the
CPU execution layer (tests/cudacpu). That build renames three calls of the CUDA sources
(-DcublasLtMatmul=lt_fault_matmul and likewise for the heuristic and the descriptor attributes);
the functions below stand in front of the layer's own. With LT_FAULT=gelu, cublasLtMatmul returns
CUBLAS_STATUS_NOT_SUPPORTED for every GELU_AUX_BIAS or DGELU epilogue the heuristic offered: the
trainer must run the GELU kernel instead, and test_gpt2cu must pass every check. At exit it prints
how many heuristic queries, matmul calls and refusals the run made: with matmul_lt.cuh's plan per
shape, a shape's query is made once, however often the shape runs (tests/test_lt_fault.sh).
*/
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>

static std::map<const void*, cublasLtEpilogue_t> epilogues;  // per descriptor, as it was set
static long heuristic_queries = 0, matmul_calls = 0, refused = 0;

static void print_counts(void) {
    printf("lt_fault: %ld heuristic queries for %ld matmul calls, %ld refused\n", heuristic_queries, matmul_calls,
           refused);
}
static const int counts_printed_at_exit = atexit(print_counts);

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
    return cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, ld, pref, requested, results, found);
}

extern "C" cublasStatus_t lt_fault_matmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                          const void* A, cublasLtMatrixLayout_t la, const void* B,
                                          cublasLtMatrixLayout_t lb, const void* beta, const void* C,
                                          cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t ld,
                                          const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                          cudaStream_t stream) {
    matmul_calls++;
    const char* fault = getenv("LT_FAULT");
    cublasLtEpilogue_t e = epilogues.count(desc) ? epilogues[desc] : CUBLASLT_EPILOGUE_DEFAULT;
    if (fault && strcmp(fault, "gelu") == 0 && (e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU)) {
        refused++;
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return cublasLtMatmul(handle, desc, alpha, A, la, B, lb, beta, C, lc, D, ld, algo, workspace, workspace_bytes,
                          stream);
}
