/*
matmul_lt.cuh: matmul_lt, the one call behind every matmul of train_gpt2.cu ("the linear layers" derives their
operands), turns a MatmulSpec into a cuBLASLt call (with the trainer's floatX).

A shape's first call builds its descriptors and asks the heuristic for its fastest algorithm, kept in a plan (LtPlan):
that costs more than a small matmul, and a step runs each shape dozens of times; later calls run the same algorithm,
so the arithmetic is the same at every step. Where the heuristic offers none or cublasLtMatmul refuses it, matmul_lt
returns 0 with allow_missing (a fused GELU epilogue: the caller runs the GELU kernel) and stops the trainer otherwise.
*/
#ifndef MATMUL_LT_CUH
#define MATMUL_LT_CUH

#include <cublasLt.h>
#include "cuda_common.cuh"

static cublasLtHandle_t lt_handle;
static void* lt_workspace = NULL;
static const size_t LT_WORKSPACE_BYTES = 32u << 20;

// A matmul: D (m x n) = alpha op(A) (m x k) . op(B) (k x n) + beta D, each matrix dense (col-major, its leading
// dimension its row count), then the epilogue of the pointer given: BIAS, or DGELU (D *= GELU'(aux), aux like D).
typedef struct {
    int m, n, k;
    const floatX* A;
    int transa;
    const floatX* B;
    int transb;
    void* D;  // also C (beta accumulates into D)
    cudaDataType_t d_type;  // CUDA_R_X or CUDA_R_32F (fp32 gradients)
    float alpha, beta;
    const void *bias, *aux;  // the epilogue's: BIAS, or DGELU (aux: the GELU pre-activation)
} MatmulSpec;

// A plan's key: what the descriptors and the heuristic depend on but the pointers, and the pointers' alignments
typedef struct {
    int m, n, k, transa, transb;
    cudaDataType_t d_type;
    cublasLtEpilogue_t epilogue;
    uint32_t align_a, align_b, align_d;
} LtKey;
static_assert(sizeof(LtKey) == 10 * 4, "LtKey has no padding: keys are compared with memcmp");

typedef struct {
    LtKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulHeuristicResult_t algo;  // the heuristic's first
    cublasStatus_t status;                 // not SUCCESS: no algorithm offered, or cublasLtMatmul refused it
} LtPlan;

static LtPlan* lt_plans = NULL;  // grown as shapes come
static int lt_num_plans = 0, lt_max_plans = 0;

// the largest power of two (at most 256) that divides the address
static uint32_t lt_alignment(const void* p) {
    uint64_t v = (uint64_t)(uintptr_t)p | 256u;
    return (uint32_t)(v & (~v + 1));
}

// an attribute of a matmul descriptor or of a heuristic preference, set to `value` (of the type cuBLASLt documents)
template <typename T>
static void lt_set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, T value) {
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}
template <typename T>
static void lt_set(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, T value) {
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

// the per-call pointers of the epilogue (the heuristic reads them too)
static void lt_set_pointers(cublasLtMatmulDesc_t desc, const MatmulSpec* spec) {
    if (spec->bias) { lt_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, spec->bias); }
    if (spec->aux) { lt_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, spec->aux); }
}

static void lt_plan_build(LtPlan* p, const LtKey* key, const MatmulSpec* spec) {
    p->key = *key;
    // fp32 accumulation in both builds; with fp32 data this is true fp32 (never TF32)
    cublasCheck(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    lt_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, key->transa ? CUBLAS_OP_T : CUBLAS_OP_N);
    lt_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, key->transb ? CUBLAS_OP_T : CUBLAS_OP_N);
    lt_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, key->epilogue);
    if (spec->aux) { lt_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)key->m); }  // DGELU: aux like D
    lt_set_pointers(p->desc, spec);
    // op(A) is m x k, so A is stored k x m when transposed; op(B) is k x n
    int a_rows = key->transa ? key->k : key->m, b_rows = key->transb ? key->n : key->k;
    cublasCheck(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_X, a_rows, key->transa ? key->m : key->k, a_rows));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_X, b_rows, key->transb ? key->k : key->n, b_rows));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->ld, key->d_type, key->m, key->n, key->m));
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    lt_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, (uint64_t)LT_WORKSPACE_BYTES);
    lt_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key->align_a);
    lt_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key->align_b);
    lt_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key->align_d);
    lt_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key->align_d);
    int got = 0;  // algorithms returned
    p->status = cublasLtMatmulAlgoGetHeuristic(lt_handle, p->desc, p->la, p->lb, p->ld, p->ld, pref, 1, &p->algo, &got);
    if (p->status == CUBLAS_STATUS_SUCCESS && got == 0) { p->status = CUBLAS_STATUS_NOT_SUPPORTED; }
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
}

static int matmul_lt(const MatmulSpec* spec, int allow_missing) {
    LtKey key = {spec->m, spec->n, spec->k, spec->transa, spec->transb, spec->d_type,
                 spec->aux ? CUBLASLT_EPILOGUE_DGELU : spec->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT,
                 lt_alignment(spec->A), lt_alignment(spec->B), lt_alignment(spec->D)};
    LtPlan* p = lt_plans;
    while (p < lt_plans + lt_num_plans && memcmp(&p->key, &key, sizeof(key)) != 0) { p++; }
    if (p == lt_plans + lt_num_plans) {  // a new shape
        if (lt_num_plans == lt_max_plans) {
            lt_max_plans = lt_max_plans ? 2 * lt_max_plans : 32;
            lt_plans = (LtPlan*)realloc(lt_plans, lt_max_plans * sizeof(LtPlan));
            if (lt_plans == NULL) { fatal("out of memory for %d cuBLASLt plans", lt_max_plans); }
        }
        p = &lt_plans[lt_num_plans++];
        lt_plan_build(p, &key, spec);
    }
    lt_set_pointers(p->desc, spec);  // this call's epilogue pointers (a new plan has them already)
    if (p->status == CUBLAS_STATUS_SUCCESS) {
        p->status = cublasLtMatmul(lt_handle, p->desc, &spec->alpha, spec->A, p->la, spec->B, p->lb, &spec->beta,
                                   spec->D, p->ld, spec->D, p->ld, &p->algo.algo, lt_workspace, LT_WORKSPACE_BYTES, 0);
        if (p->status == CUBLAS_STATUS_SUCCESS) {
            cuda_check_launch("cuBLASLt matmul", __FILE__, __LINE__);
            return 1;
        }
    }
    if (!allow_missing) {
        fatal("cuBLASLt cannot run a %dx%dx%d matmul (epilogue %d): %s", key.m, key.n, key.k, (int)key.epilogue,
              cublasGetStatusString(p->status));
    }
    (void)cudaGetLastError();  // a refused launch must not be reported at the next kernel's check
    return 0;  // not tried again for this plan: every later call of the shape takes the same path
}

static void lt_setup(void) {
    cublasCheck(cublasLtCreate(&lt_handle));
    lt_workspace = cuda_malloc_check(LT_WORKSPACE_BYTES, "cuBLASLt workspace");
}

// at exit: the plans, the workspace and the handle released
static void lt_teardown(void) {
    for (int i = 0; i < lt_num_plans; i++) {
        cublasCheck(cublasLtMatrixLayoutDestroy(lt_plans[i].la));
        cublasCheck(cublasLtMatrixLayoutDestroy(lt_plans[i].lb));
        cublasCheck(cublasLtMatrixLayoutDestroy(lt_plans[i].ld));
        cublasCheck(cublasLtMatmulDescDestroy(lt_plans[i].desc));
    }
    free(lt_plans);
    cudaCheck(cudaFree(lt_workspace));
    cublasCheck(cublasLtDestroy(lt_handle));
}

#endif // MATMUL_LT_CUH
