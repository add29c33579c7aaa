/*
matmul_lt.cuh: the one call behind every matmul of train_gpt2.cu, matmul_lt, with its cache
of cuBLASLt plans. train_gpt2.cu (Part 1, "matmul through cuBLASLt") derives the operands of each
linear layer and fills a MatmulSpec; this file turns a MatmulSpec into a cuBLASLt call. It needs
the trainer's floatX and CUDA_R_X, so train_gpt2.cu includes it after defining them.

A shape's first call builds its descriptors and
asks the heuristic for up to LT_MAX_ALGOS algorithms, fastest first, and keeps both in a plan
(LtPlan): a step makes each shape's call dozens of times, and building descriptors and asking
the heuristic costs more than a small matmul. It runs the first algorithm that does not fail at
run time and remembers it, so later calls run that one at once: the same arithmetic at every
step. Where none runs, matmul_lt returns 0 with allow_missing (a fused GELU epilogue: the caller
runs the GELU kernels) and stops the trainer otherwise. lt_setup makes the handle and the workspace once per process; lt_teardown releases them with the
plans.
*/
#ifndef MATMUL_LT_CUH
#define MATMUL_LT_CUH

#include <cublasLt.h>
#include "cuda_common.cuh"

static cublasLtHandle_t lt_handle;
static void* lt_workspace = NULL;
static const size_t LT_WORKSPACE_BYTES = 32u << 20;
#define LT_MAX_ALGOS 8
#define LT_MAX_PLANS 64

typedef struct {
    int m, n, k;
    int transa, transb;
    const floatX* A;
    int lda;
    const floatX* B;
    int ldb;
    void* D;                // also C (beta accumulates into D)
    cudaDataType_t d_type;  // CUDA_R_X or CUDA_R_32F (fp32 gradients)
    int ldd;
    float alpha, beta;
    cublasLtEpilogue_t epilogue;
    const void* bias;  // EPILOGUE_BIAS
    void* aux;         // DGELU (read): the GELU pre-activation
    int ld_aux;
} MatmulSpec;

// D (m x n) = op(A) (m x k) . op(B) (k x n), plain floatX output; callers set the rest
static MatmulSpec matmul_spec(int m, int n, int k, const floatX* A, int transa, int lda, const floatX* B, int transb,
                              int ldb, void* D, int ldd) {
    // fields in declaration order: alpha 1, beta 0, no epilogue
    MatmulSpec spec = {m, n, k, transa, transb, A, lda, B, ldb, D, CUDA_R_X, ldd, 1.0f, 0.0f, CUBLASLT_EPILOGUE_DEFAULT,
                       NULL, NULL, 0};
    return spec;
}

// A plan's key is everything its descriptors and the heuristic depend on but the pointers, of
// which it holds the alignments (the heuristic assumes 256 bytes otherwise). The bias and aux
// pointers are set on the descriptor at each call.
typedef struct {
    int m, n, k, transa, transb, lda, ldb, ldd, ld_aux;
    cudaDataType_t d_type;
    cublasLtEpilogue_t epilogue;
    uint32_t align_a, align_b, align_d;
} LtKey;

typedef struct {
    LtKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulHeuristicResult_t algos[LT_MAX_ALGOS];
    int found;              // algorithms the heuristic offered
    cublasStatus_t status;  // the heuristic query's
    int next;               // the first to try: the one that ran last time (found: none runs)
} LtPlan;

static LtPlan lt_plans[LT_MAX_PLANS];
static int lt_num_plans = 0;

// the largest power of two (at most 256) that divides the address
static uint32_t lt_alignment(const void* p) {
    uint64_t v = (uint64_t)(uintptr_t)p | 256u;
    return (uint32_t)(v & (~v + 1));
}

static void lt_set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* value, size_t size) {
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, attr, value, size));
}

// the per-call pointers of the epilogue
static void lt_set_pointers(cublasLtMatmulDesc_t desc, const MatmulSpec* spec) {
    if (spec->bias) { lt_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &spec->bias, sizeof(spec->bias)); }
    if (spec->aux) { lt_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &spec->aux, sizeof(spec->aux)); }
}

static void lt_plan_build(LtPlan* p, const LtKey* key, const MatmulSpec* spec) {
    p->key = *key;
    // fp32 accumulation in both builds; with fp32 data this is true fp32 (never TF32)
    cublasCheck(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = key->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    lt_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    lt_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    lt_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &key->epilogue, sizeof(key->epilogue));
    if (key->ld_aux) {
        int64_t ld_aux = key->ld_aux;
        lt_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof(ld_aux));
    }
    lt_set_pointers(p->desc, spec);
    // op(A) is m x k, so A is stored k x m when transposed; op(B) is k x n
    cublasCheck(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_X, key->transa ? key->k : key->m,
                                           key->transa ? key->m : key->k, key->lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_X, key->transb ? key->n : key->k,
                                           key->transb ? key->k : key->n, key->ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->ld, key->d_type, key->m, key->n, key->ldd));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = LT_WORKSPACE_BYTES;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t aligns[4] = {key->align_a, key->align_b, key->align_d, key->align_d};
    for (int i = 0; i < 4; i++) {
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &aligns[i], sizeof(aligns[i])));
    }
    p->found = 0;
    p->status = cublasLtMatmulAlgoGetHeuristic(lt_handle, p->desc, p->la, p->lb, p->ld, p->ld, pref, LT_MAX_ALGOS,
                                               p->algos, &p->found);
    if (p->status != CUBLAS_STATUS_SUCCESS) { p->found = 0; }
    p->next = 0;
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
}

static void lt_plan_destroy(LtPlan* p) {
    cublasCheck(cublasLtMatrixLayoutDestroy(p->la));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->ld));
    cublasCheck(cublasLtMatmulDescDestroy(p->desc));
}

static int matmul_lt(const MatmulSpec* spec, int allow_missing) {
    LtKey key;
    memset(&key, 0, sizeof(key));  // the padding too: keys are compared with memcmp
    key.m = spec->m, key.n = spec->n, key.k = spec->k, key.transa = spec->transa, key.transb = spec->transb;
    key.lda = spec->lda, key.ldb = spec->ldb, key.ldd = spec->ldd, key.ld_aux = spec->aux ? spec->ld_aux : 0;
    key.d_type = spec->d_type, key.epilogue = spec->epilogue;
    key.align_a = lt_alignment(spec->A), key.align_b = lt_alignment(spec->B), key.align_d = lt_alignment(spec->D);
    LtPlan* p = NULL;
    for (int i = 0; i < lt_num_plans && p == NULL; i++) {
        if (memcmp(&lt_plans[i].key, &key, sizeof(key)) == 0) { p = &lt_plans[i]; }
    }
    LtPlan transient;  // with the table full, a plan for this call only
    if (p == NULL) {
        p = lt_num_plans < LT_MAX_PLANS ? &lt_plans[lt_num_plans++] : &transient;
        lt_plan_build(p, &key, spec);
    } else {
        lt_set_pointers(p->desc, spec);
    }
    // from the algorithm that ran last time; one that fails at run time (cuBLASLt returns an error
    // and computes nothing) gives way to the next, and is not tried again
    int failed = 0;
    cublasStatus_t failure = p->status;  // the heuristic query's, then the last failed algorithm's
    for (; p->next < p->found; p->next++) {
        const cublasLtMatmulHeuristicResult_t* r = &p->algos[p->next];
        if (r->state != CUBLAS_STATUS_SUCCESS || r->workspaceSize > LT_WORKSPACE_BYTES) { continue; }
        cublasStatus_t st = cublasLtMatmul(lt_handle, p->desc, &spec->alpha, spec->A, p->la, spec->B, p->lb, &spec->beta,
                                           spec->D, p->ld, spec->D, p->ld, &r->algo, lt_workspace, LT_WORKSPACE_BYTES, 0);
        if (st == CUBLAS_STATUS_SUCCESS) { break; }
        failure = st;
        failed++;
        (void)cudaGetLastError();  // a refused launch must not be reported at the next kernel's
    }
    int ran = p->next < p->found;
    if (p == &transient) { lt_plan_destroy(p); }
    if (!ran && !allow_missing) {
        fatal("cuBLASLt cannot run a %dx%dx%d matmul (epilogue %d): %s", spec->m, spec->n, spec->k,
              (int)spec->epilogue, failure != CUBLAS_STATUS_SUCCESS ? cublasGetStatusString(failure) : "no algorithm offered");
    }
    static int noted = 0;  // said once per process: it repeats at every step
    if (failed > 0 && !noted) {
        noted = 1;
        printf("note: %d cuBLASLt algorithm(s) for a %dx%dx%d matmul (epilogue %d) failed at run time (%s); %s\n", failed,
               spec->m, spec->n, spec->k, (int)spec->epilogue, cublasGetStatusString(failure),
               ran ? "another algorithm ran instead" : "the GELU kernels run instead");
    }
    if (ran) { cuda_check_launch("cuBLASLt matmul", __FILE__, __LINE__); }
    return ran;
}

static void lt_setup(void) {
    cublasCheck(cublasLtCreate(&lt_handle));
    lt_workspace = cuda_malloc_check(LT_WORKSPACE_BYTES, "cuBLASLt workspace");
}

static void lt_teardown(void) {
    for (int i = 0; i < lt_num_plans; i++) { lt_plan_destroy(&lt_plans[i]); }
    lt_num_plans = 0;
    cudaCheck(cudaFree(lt_workspace));
    lt_workspace = NULL;
    cublasCheck(cublasLtDestroy(lt_handle));
}

#endif // MATMUL_LT_CUH
