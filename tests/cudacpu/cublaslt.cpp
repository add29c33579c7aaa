/*
tests/cudacpu/cublaslt.cpp: the cuBLASLt (and cuBLAS) subset of the CPU execution layer.

One plain GEMM stands behind every call: D = alpha op(A) op(B) + beta C, column-major like all of
BLAS, each element a dot product accumulated in double in a fixed order (so results are
deterministic and at least as accurate as any GPU algorithm), then the epilogue in float and one
rounding to the output type. Modelled: fp32 and bf16 operands, fp32 or bf16 output, CUBLAS_COMPUTE_32F
with fp32 scaling, transposes, batched and strided-batched layouts, the epilogues DEFAULT, BIAS,
GELU_AUX_BIAS and DGELU (tanh GELU), the heuristic and preference calls. Not modelled (the
program stops naming it): other types, compute types, epilogues and attributes. cuBLASLt's real
algorithms, their rounding (tensor cores, split-k) and their speed are not modelled either.

The heuristic refuses (CUBLAS_STATUS_NOT_SUPPORTED, no algorithm) a GELU epilogue whose auxiliary
leading dimension is not a multiple of 8, the alignment cuBLASLt documents for it.
*/
#define CUDACPU_RUNTIME 1  // the runtime functions themselves: no call-site macros
#include "cudacpu.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

namespace cudacpu {

static const uint32_t DESC_MAGIC = 0x4c54444du, LAYOUT_MAGIC = 0x4c544c59u, PREF_MAGIC = 0x4c545046u;

struct LtDesc {
    uint32_t magic;
    cublasOperation_t transa, transb;
    cublasLtEpilogue_t epilogue;
    const void* bias;
    void* aux;
    int64_t aux_ld;
};

struct LtLayout {
    uint32_t magic;
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
};

struct LtPref {
    uint32_t magic;
};

static LtDesc* desc_of(cublasLtMatmulDesc_t d) {
    LtDesc* p = (LtDesc*)d;
    if (!p || p->magic != DESC_MAGIC) { fail("cuBLASLt: not a matmul descriptor (or already destroyed)"); }
    return p;
}
static LtLayout* layout_of(cublasLtMatrixLayout_t l) {
    LtLayout* p = (LtLayout*)l;
    if (!p || p->magic != LAYOUT_MAGIC) { fail("cuBLASLt: not a matrix layout (or already destroyed)"); }
    return p;
}

static size_t type_size(cudaDataType_t t, const char* what) {
    switch (t) {
        case CUDA_R_32F: return 4;
        case CUDA_R_16BF: return 2;
        default: fail("%s: data type %d not modelled (fp32 and bf16 are)", what, (int)t);
    }
}

static inline double load(const void* base, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_32F) { return ((const float*)base)[i]; }
    return (double)__bfloat162float(((const __nv_bfloat16*)base)[i]);
}

static inline void store(void* base, cudaDataType_t t, size_t i, float v) {
    if (t == CUDA_R_32F) {
        ((float*)base)[i] = v;
    } else {
        ((__nv_bfloat16*)base)[i] = __float2bfloat16(v);
    }
}

static const float GELU_SCALE = 0.7978845608028654f;  // sqrt(2 / pi)
static float gelu(float x) { return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x))); }
static float gelu_grad(float x) {
    float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    float dth = (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * dth;
}

// the bytes a (rows x cols, ld, batch, stride) operand touches, from its start
static size_t extent_bytes(uint64_t rows, uint64_t cols, int64_t ld, int32_t batch, int64_t stride, size_t es) {
    if (rows == 0 || cols == 0) { return 0; }
    size_t last = (size_t)((cols - 1) * (uint64_t)ld + rows - 1) + (size_t)(batch - 1) * (size_t)stride;
    return (last + 1) * es;
}

struct Gemm {
    const char* who;
    bool ta, tb;
    int64_t m, n, k;
    const void* A;
    cudaDataType_t at;
    int64_t lda, sa;
    const void* B;
    cudaDataType_t bt;
    int64_t ldb, sb;
    const void* C;
    cudaDataType_t ct;
    int64_t ldc, sc;
    void* D;
    cudaDataType_t dt;
    int64_t ldd, sd;
    int batch;
    float alpha, beta;
    cublasLtEpilogue_t epilogue;
    const void* bias;
    void* aux;
    int64_t aux_ld;
};

// checks the operands lie in device memory, then D = epilogue(alpha op(A) op(B) + beta C)
static void gemm(const Gemm& g) {
    if (g.m <= 0 || g.n <= 0 || g.batch <= 0) { return; }
    size_t as = type_size(g.at, g.who), bs = type_size(g.bt, g.who), cs = type_size(g.ct, g.who),
           ds = type_size(g.dt, g.who);
    char what[160];
    snprintf(what, sizeof(what), "%s operand A (%s)", g.who, g.ta ? "transposed" : "not transposed");
    if (g.k > 0) {
        check_device_range(g.A, extent_bytes(g.ta ? g.k : g.m, g.ta ? g.m : g.k, g.lda, g.batch, g.sa, as), what);
        snprintf(what, sizeof(what), "%s operand B (%s)", g.who, g.tb ? "transposed" : "not transposed");
        check_device_range(g.B, extent_bytes(g.tb ? g.n : g.k, g.tb ? g.k : g.n, g.ldb, g.batch, g.sb, bs), what);
    }
    snprintf(what, sizeof(what), "%s output D", g.who);
    check_device_range(g.D, extent_bytes(g.m, g.n, g.ldd, g.batch, g.sd, ds), what);
    if (g.beta != 0.0f) {
        snprintf(what, sizeof(what), "%s input C", g.who);
        check_device_range(g.C, extent_bytes(g.m, g.n, g.ldc, g.batch, g.sc, cs), what);
    }
    bool gelu_aux = g.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || g.epilogue == CUBLASLT_EPILOGUE_DGELU;
    if (gelu_aux) {
        if (g.batch != 1) { fail("%s: a GELU epilogue on a batched matmul is not modelled", g.who); }
        snprintf(what, sizeof(what), "%s GELU auxiliary buffer", g.who);
        check_device_range(g.aux, extent_bytes(g.m, g.n, g.aux_ld, 1, 0, ds), what);
    }
    bool with_bias = g.epilogue == CUBLASLT_EPILOGUE_BIAS || g.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    if (with_bias) {
        snprintf(what, sizeof(what), "%s bias", g.who);
        check_device_range(g.bias, (size_t)g.m * ds, what);
    }
    // op(A) as m rows of k and op(B) as n columns of k, contiguous in k
    std::vector<double> a((size_t)g.m * g.k), b((size_t)g.n * g.k);
    for (int batch = 0; batch < g.batch; batch++) {
        const char* A = (const char*)g.A + (size_t)batch * g.sa * as;
        const char* B = (const char*)g.B + (size_t)batch * g.sb * bs;
        const char* C = (const char*)g.C + (size_t)batch * g.sc * cs;
        char* D = (char*)g.D + (size_t)batch * g.sd * ds;
        for (int64_t i = 0; i < g.m; i++) {
            for (int64_t p = 0; p < g.k; p++) {
                a[i * g.k + p] = load(A, g.at, g.ta ? (size_t)(p + i * g.lda) : (size_t)(i + p * g.lda));
            }
        }
        for (int64_t j = 0; j < g.n; j++) {
            for (int64_t p = 0; p < g.k; p++) {
                b[j * g.k + p] = load(B, g.bt, g.tb ? (size_t)(j + p * g.ldb) : (size_t)(p + j * g.ldb));
            }
        }
        for (int64_t j = 0; j < g.n; j++) {
            const double* bj = &b[j * g.k];
            for (int64_t i = 0; i < g.m; i++) {
                const double* ai = &a[i * g.k];
                double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;  // four partial sums, added in a fixed order
                int64_t p = 0;
                for (; p + 4 <= g.k; p += 4) {
                    s0 += ai[p] * bj[p];
                    s1 += ai[p + 1] * bj[p + 1];
                    s2 += ai[p + 2] * bj[p + 2];
                    s3 += ai[p + 3] * bj[p + 3];
                }
                for (; p < g.k; p++) { s0 += ai[p] * bj[p]; }
                double acc = (s0 + s1) + (s2 + s3);
                float v = (float)(g.alpha * acc);
                if (g.beta != 0.0f) { v += g.beta * (float)load(C, g.ct, (size_t)(i + j * g.ldc)); }
                if (with_bias) { v += (float)load(g.bias, g.dt, (size_t)i); }
                size_t di = (size_t)(i + j * g.ldd);
                if (g.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
                    store(g.aux, g.dt, (size_t)(i + j * g.aux_ld), v);
                    v = gelu(v);
                } else if (g.epilogue == CUBLASLT_EPILOGUE_DGELU) {
                    v *= gelu_grad((float)load(g.aux, g.dt, (size_t)(i + j * g.aux_ld)));
                }
                store(D, g.dt, di, v);
            }
        }
    }
}

template <typename T>
static T attribute_value(const void* buf, size_t size, const char* what) {
    if (size != sizeof(T)) { fail("%s: attribute value of %zu bytes, expected %zu", what, size, sizeof(T)); }
    T v;
    memcpy(&v, buf, sizeof(T));
    return v;
}

}  // namespace cudacpu

using namespace cudacpu;

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    static int token;
    *handle = (cublasLtHandle_t)&token;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    (void)handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
    if (compute != CUBLAS_COMPUTE_32F) { fail("cublasLtMatmulDescCreate: compute type %d not modelled (CUBLAS_COMPUTE_32F is)", (int)compute); }
    if (scale != CUDA_R_32F) { fail("cublasLtMatmulDescCreate: scale type %d not modelled (CUDA_R_32F is)", (int)scale); }
    LtDesc* d = new LtDesc{DESC_MAGIC, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0};
    *desc = (cublasLtMatmulDesc_t)d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    LtDesc* d = desc_of(desc);
    d->magic = 0;
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
    LtDesc* d = desc_of(desc);
    const char* who = "cublasLtMatmulDescSetAttribute";
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_TRANSA: d->transa = attribute_value<cublasOperation_t>(buf, size, who); break;
        case CUBLASLT_MATMUL_DESC_TRANSB: d->transb = attribute_value<cublasOperation_t>(buf, size, who); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE: {
            cublasLtEpilogue_t e = attribute_value<cublasLtEpilogue_t>(buf, size, who);
            if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && e != CUBLASLT_EPILOGUE_GELU_AUX_BIAS &&
                e != CUBLASLT_EPILOGUE_DGELU) {
                fail("%s: epilogue %d not modelled (DEFAULT, BIAS, GELU_AUX_BIAS and DGELU are)", who, (int)e);
            }
            d->epilogue = e;
            break;
        }
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: d->bias = attribute_value<const void*>(buf, size, who); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: d->aux = attribute_value<void*>(buf, size, who); break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: d->aux_ld = attribute_value<int64_t>(buf, size, who); break;
        default: fail("%s: attribute %d not modelled", who, (int)attr);
    }
    if ((d->transa != CUBLAS_OP_N && d->transa != CUBLAS_OP_T) || (d->transb != CUBLAS_OP_N && d->transb != CUBLAS_OP_T)) {
        fail("%s: only CUBLAS_OP_N and CUBLAS_OP_T are modelled", who);
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    type_size(type, "cublasLtMatrixLayoutCreate");
    LtLayout* l = new LtLayout{LAYOUT_MAGIC, type, rows, cols, ld, 1, 0};
    *layout = (cublasLtMatrixLayout_t)l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    LtLayout* l = layout_of(layout);
    l->magic = 0;
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
    LtLayout* l = layout_of(layout);
    const char* who = "cublasLtMatrixLayoutSetAttribute";
    switch (attr) {
        case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: l->batch = attribute_value<int32_t>(buf, size, who); break;
        case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: l->stride = attribute_value<int64_t>(buf, size, who); break;
        default: fail("%s: attribute %d not modelled", who, (int)attr);
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    *pref = (cublasLtMatmulPreference_t) new LtPref{PREF_MAGIC};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    LtPref* p = (LtPref*)pref;
    if (!p || p->magic != PREF_MAGIC) { fail("cublasLtMatmulPreferenceDestroy: not a preference"); }
    p->magic = 0;
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
    LtPref* p = (LtPref*)pref;
    if (!p || p->magic != PREF_MAGIC) { fail("cublasLtMatmulPreferenceSetAttribute: not a preference"); }
    const char* who = "cublasLtMatmulPreferenceSetAttribute";
    switch (attr) {
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: attribute_value<uint64_t>(buf, size, who); break;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: attribute_value<uint32_t>(buf, size, who); break;
        default: fail("%s: attribute %d not modelled", who, (int)attr);
    }
    return CUBLAS_STATUS_SUCCESS;
}

// the shapes of A, B, C and D must agree with the operation: returns why not, or NULL
static const char* lt_shape_problem(const LtDesc* d, const LtLayout* a, const LtLayout* b, const LtLayout* c,
                                    const LtLayout* dl) {
    uint64_t m = dl->rows, n = dl->cols;
    uint64_t am = d->transa == CUBLAS_OP_T ? a->cols : a->rows, ak = d->transa == CUBLAS_OP_T ? a->rows : a->cols;
    uint64_t bk = d->transb == CUBLAS_OP_T ? b->cols : b->rows, bn = d->transb == CUBLAS_OP_T ? b->rows : b->cols;
    if (am != m || bn != n || ak != bk) { return "op(A), op(B) and D do not have matching shapes"; }
    if (c->rows != m || c->cols != n) { return "C and D differ in shape"; }
    if (a->ld < (int64_t)a->rows || b->ld < (int64_t)b->rows || c->ld < (int64_t)c->rows || dl->ld < (int64_t)dl->rows) {
        return "a leading dimension is smaller than the rows of its matrix";
    }
    if (a->batch != dl->batch || b->batch != dl->batch || c->batch != dl->batch) { return "the batch counts differ"; }
    if (c->type != dl->type) { return "C and D differ in type"; }
    if (a->type != b->type) { return "A and B differ in type"; }
    if (d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        if (!d->bias) { return "a bias epilogue without a bias pointer"; }
    }
    if (d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d->epilogue == CUBLASLT_EPILOGUE_DGELU) {
        if (!d->aux) { return "a GELU epilogue without an auxiliary pointer"; }
        if (d->aux_ld < (int64_t)m) { return "the GELU auxiliary leading dimension is smaller than the rows of D"; }
    }
    return NULL;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                                              cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, cublasLtMatrixLayout_t ld,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* found) {
    (void)handle;
    (void)pref;
    const LtDesc* d = desc_of(desc);
    const char* problem = lt_shape_problem(d, layout_of(la), layout_of(lb), layout_of(lc), layout_of(ld));
    *found = 0;
    if (problem) {
        fprintf(stderr, "cudacpu: cublasLtMatmulAlgoGetHeuristic: %s\n", problem);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (requested < 1) { return CUBLAS_STATUS_INVALID_VALUE; }
    if ((d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d->epilogue == CUBLASLT_EPILOGUE_DGELU) && d->aux_ld % 8 != 0) {
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    memset(&results[0], 0, sizeof(results[0]));
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t la, const void* B, cublasLtMatrixLayout_t lb, const void* beta,
                              const void* C, cublasLtMatrixLayout_t lc, void* D, cublasLtMatrixLayout_t ld,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
    (void)handle;
    (void)algo;
    (void)workspace;
    (void)workspace_bytes;
    (void)stream;
    const LtDesc* d = desc_of(desc);
    const LtLayout *a = layout_of(la), *b = layout_of(lb), *c = layout_of(lc), *dl = layout_of(ld);
    const char* problem = lt_shape_problem(d, a, b, c, dl);
    if (problem) {
        fprintf(stderr, "cudacpu: cublasLtMatmul: %s\n", problem);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    Gemm g;
    g.who = "cublasLtMatmul";
    g.ta = d->transa == CUBLAS_OP_T;
    g.tb = d->transb == CUBLAS_OP_T;
    g.m = (int64_t)dl->rows;
    g.n = (int64_t)dl->cols;
    g.k = (int64_t)(g.ta ? a->rows : a->cols);
    g.A = A; g.at = a->type; g.lda = a->ld; g.sa = a->stride;
    g.B = B; g.bt = b->type; g.ldb = b->ld; g.sb = b->stride;
    g.C = C; g.ct = c->type; g.ldc = c->ld; g.sc = c->stride;
    g.D = D; g.dt = dl->type; g.ldd = dl->ld; g.sd = dl->stride;
    g.batch = dl->batch;
    g.alpha = *(const float*)alpha;
    g.beta = *(const float*)beta;
    g.epilogue = d->epilogue;
    g.bias = d->bias;
    g.aux = d->aux;
    g.aux_ld = d->aux_ld;
    cudacpu::launch_log("matmul %lld %lld %lld", (long long)g.m, (long long)g.n, (long long)g.k);
    gemm(g);
    return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusString(cublasStatus_t status) { return cublasGetStatusString(status); }

// every status of cublas_api.h, in its order
const char* cublasGetStatusString(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
        case CUBLAS_STATUS_ALLOC_FAILED: return "a resource allocation failed";
        case CUBLAS_STATUS_INVALID_VALUE: return "an unsupported value or parameter was passed to the function";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "the device lacks a feature the function needs";
        case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory failed";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
        case CUBLAS_STATUS_LICENSE_ERROR: return "the functionality requested needs a license";
    }
    return "unknown cuBLAS status";
}

// cuBLAS: the one call dev/cuda uses, on the same GEMM
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
    static int token;
    *handle = (cublasHandle_t)&token;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    (void)handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                          int n, int k, const void* alpha, const void* A, cudaDataType Atype, int lda,
                                          long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
    (void)handle;
    (void)algo;
    if (computeType != CUBLAS_COMPUTE_32F) { fail("cublasGemmStridedBatchedEx: compute type %d not modelled", (int)computeType); }
    if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) || (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T)) {
        fail("cublasGemmStridedBatchedEx: only CUBLAS_OP_N and CUBLAS_OP_T are modelled");
    }
    if (lda < (transa == CUBLAS_OP_T ? k : m) || ldb < (transb == CUBLAS_OP_T ? n : k) || ldc < m) {
        fprintf(stderr, "cudacpu: cublasGemmStridedBatchedEx: a leading dimension is too small\n");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    Gemm g;
    g.who = "cublasGemmStridedBatchedEx";
    g.ta = transa == CUBLAS_OP_T;
    g.tb = transb == CUBLAS_OP_T;
    g.m = m; g.n = n; g.k = k;
    g.A = A; g.at = Atype; g.lda = lda; g.sa = strideA;
    g.B = B; g.bt = Btype; g.ldb = ldb; g.sb = strideB;
    g.C = C; g.ct = Ctype; g.ldc = ldc; g.sc = strideC;
    g.D = C; g.dt = Ctype; g.ldd = ldc; g.sd = strideC;
    g.batch = batchCount;
    g.alpha = *(const float*)alpha;
    g.beta = *(const float*)beta;
    g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    g.bias = NULL;
    g.aux = NULL;
    g.aux_ld = 0;
    gemm(g);
    return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
