/*
dev/cuda/attention_ref.h: the CPU fp32 reference of causal multi-head self-attention that
attention_forward.cu and attention_backward.cu check against, written from the formulas of
train_gpt2.c's attention forward and backward, and the check of the reference itself
(`./attention_forward ref`, `./attention_backward ref`; no GPU needed).

Layouts as in the trainer: qkv (B, T, 3C) with q, k, v of head h at channels h*HS, C + h*HS,
2C + h*HS; out and dout (B, T, C) with head h at channels h*HS. Per (b, head), with
P = causal softmax(q k^T / sqrt(HS)):

    out = P v;   dV = P^T dO,  dP = dO V^T,  dS = P (dP - rowsum(P dP)) / sqrt(HS),  dQ = dS K,  dK = dS^T Q
*/
#ifndef DEV_CUDA_ATTENTION_REF_H
#define DEV_CUDA_ATTENTION_REF_H

#include "common.h"

// out (B, T, C) from qkv, and lse (B, NH, T) = log sum_{t2 <= t} exp(q_t . k_t2 / sqrt(HS)) unless NULL;
// with dout given, also dqkv (B, T, 3C) = dL/dqkv for L = sum(out * dout)
static void attention_ref(float* out, float* lse, float* dqkv, const float* qkv, const float* dout, int B, int T, int NH,
                          int HS) {
    int C = NH * HS;
    float scale = 1.0f / sqrtf((float)HS);
    float* p = (float*)host_alloc(T * sizeof(float));
    float* dp = (float*)host_alloc(T * sizeof(float));
    if (dout) { memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof(float)); }
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const float* q = qkv + ((size_t)b * T + t) * 3 * C + h * HS;
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * HS;
                    float dot = 0.0f;
                    for (int i = 0; i < HS; i++) { dot += q[i] * k[i]; }
                    p[t2] = dot * scale;
                    maxv = fmaxf(maxv, p[t2]);
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) { p[t2] = expf(p[t2] - maxv); sum += p[t2]; }
                if (lse) { lse[((size_t)b * NH + h) * T + t] = maxv + logf(sum); }
                float* o = out + ((size_t)b * T + t) * C + h * HS;
                for (int i = 0; i < HS; i++) { o[i] = 0.0f; }
                for (int t2 = 0; t2 <= t; t2++) {
                    p[t2] /= sum;
                    const float* v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * HS;
                    for (int i = 0; i < HS; i++) { o[i] += p[t2] * v[i]; }
                }
                if (!dout) { continue; }
                const float* dO = dout + ((size_t)b * T + t) * C + h * HS;
                float* dq = dqkv + ((size_t)b * T + t) * 3 * C + h * HS;
                float pdp = 0.0f;  // sum_t2 p dp
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * HS;
                    float* dv = dqkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * HS;
                    dp[t2] = 0.0f;
                    for (int i = 0; i < HS; i++) {
                        dv[i] += p[t2] * dO[i];
                        dp[t2] += dO[i] * v[i];
                    }
                    pdp += p[t2] * dp[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    float ds = p[t2] * (dp[t2] - pdp) * scale;
                    const float* k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * HS;
                    float* dk = dqkv + ((size_t)b * T + t2) * 3 * C + C + h * HS;
                    for (int i = 0; i < HS; i++) {
                        dq[i] += ds * k[i];
                        dk[i] += ds * q[i];
                    }
                }
            }
        }
    }
    free(p);
    free(dp);
}

// The reference itself, on the CPU: the first position attends only to itself (out = v_0); where
// every value row is the same vector the output is that vector at every position, whatever the
// scores; where every key is the same, position t's lse is its one score plus log(t + 1); dqkv
// matches central finite differences of L = sum(out * dout).
static int check_attention_reference(void) {
    {
        const int B = 2, T = 7, NH = 3, HS = 8, C = NH * HS;
        size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
        uint64_t seed = 17;
        float* qkv = (float*)host_alloc(nqkv * sizeof(float));
        float* out = (float*)host_alloc(nout * sizeof(float));
        float* want = (float*)host_alloc(nout * sizeof(float));
        fill_uniform(qkv, nqkv, -1.5f, 1.5f, &seed);
        attention_ref(out, NULL, NULL, qkv, NULL, B, T, NH, HS);
        float got0[B * C], want0[B * C];
        for (int b = 0; b < B; b++) {
            for (int c = 0; c < C; c++) {
                got0[b * C + c] = out[(size_t)b * T * C + c];
                want0[b * C + c] = qkv[(size_t)b * T * 3 * C + 2 * C + c];
            }
        }
        printf("reference: position 0, constant values and keys (B = %d, T = %d, NH = %d, HS = %d)\n", B, T, NH, HS);
        check_close("out[t=0]", want0, got0, B * C, 1e-6f, 1e-6f);
        for (int b = 0; b < B; b++) {  // v of every position := v of position 0 in its batch row
            for (int t = 0; t < T; t++) {
                for (int c = 0; c < C; c++) {
                    float v0 = qkv[(size_t)b * T * 3 * C + 2 * C + c];
                    qkv[((size_t)b * T + t) * 3 * C + 2 * C + c] = v0;
                    want[((size_t)b * T + t) * C + c] = v0;
                }
            }
        }
        attention_ref(out, NULL, NULL, qkv, NULL, B, T, NH, HS);
        check_close("out", want, out, nout, 1e-5f, 1e-5f);
        // every key := key 0 of its batch row: position t sees t + 1 equal scores s_t, lse = s_t + log(t + 1)
        float* lse = (float*)host_alloc((size_t)B * NH * T * sizeof(float));
        float* lse_want = (float*)host_alloc((size_t)B * NH * T * sizeof(float));
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                for (int c = 0; c < C; c++) {
                    qkv[((size_t)b * T + t) * 3 * C + C + c] = qkv[(size_t)b * T * 3 * C + C + c];
                }
                for (int h = 0; h < NH; h++) {
                    float dot = 0.0f;
                    for (int i = 0; i < HS; i++) {
                        dot += qkv[((size_t)b * T + t) * 3 * C + h * HS + i] * qkv[(size_t)b * T * 3 * C + C + h * HS + i];
                    }
                    lse_want[((size_t)b * NH + h) * T + t] = dot / sqrtf((float)HS) + logf((float)(t + 1));
                }
            }
        }
        attention_ref(out, lse, NULL, qkv, NULL, B, T, NH, HS);
        check_close("lse", lse_want, lse, (size_t)B * NH * T, 1e-5f, 1e-5f);
        free(lse);
        free(lse_want);
        free(qkv);
        free(out);
        free(want);
    }
    const int B = 2, T = 5, NH = 2, HS = 4, C = NH * HS;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    uint64_t seed = 23;
    float* qkv = (float*)host_alloc(nqkv * sizeof(float));
    float* dout = (float*)host_alloc(nout * sizeof(float));
    float* out = (float*)host_alloc(nout * sizeof(float));
    float* dqkv = (float*)host_alloc(nqkv * sizeof(float));
    float* num = (float*)host_alloc(nqkv * sizeof(float));
    fill_uniform(qkv, nqkv, -1.5f, 1.5f, &seed);
    fill_uniform(dout, nout, -1.0f, 1.0f, &seed);
    attention_ref(out, NULL, dqkv, qkv, dout, B, T, NH, HS);
    for (size_t i = 0; i < nqkv; i++) {
        double L[2];
        float x0 = qkv[i], v[2];
        for (int k = 0; k < 2; k++) {
            qkv[i] = x0 + (k ? -1e-2f : 1e-2f);
            v[k] = qkv[i];
            attention_ref(out, NULL, NULL, qkv, NULL, B, T, NH, HS);
            L[k] = 0.0;
            for (size_t j = 0; j < nout; j++) { L[k] += (double)out[j] * dout[j]; }
        }
        qkv[i] = x0;
        num[i] = (float)((L[0] - L[1]) / ((double)v[0] - v[1]));
    }
    printf("reference vs finite differences (B = %d, T = %d, NH = %d, HS = %d)\n", B, T, NH, HS);
    check_close("dqkv", num, dqkv, nqkv, 1e-3f, 1e-2f);
    free(qkv);
    free(dout);
    free(out);
    free(dqkv);
    free(num);
    printf("the CPU reference passes\n");
    return 0;
}

#endif  // DEV_CUDA_ATTENTION_REF_H
