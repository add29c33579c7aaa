/*
common/vec_math.h: exp for the CPU trainer's element-wise loops (GELU, the softmax of the
classifier and of attention), written in plain C that the compiler turns into vector code.

Why. libm's expf and tanhf are calls the compiler cannot vectorize: GELU's tanhf alone (forward
and backward over B*T*4C numbers per layer) took about 8% of a d12 training step, the
classifier's expf a few percent more. vec_exp below is inlined into the loop that calls it and
vectorized with it (16 numbers per AVX-512 instruction), about 20 instructions for 16 results.

How. e^x = 2^n e^r with n = x / ln 2 rounded to the nearest integer and r = x - n ln 2, so
|r| <= ln(2) / 2. n ln 2 is subtracted in two parts (Cody and Waite: 0.693359375, which has 9
significant bits so that n times it is exact, and the small rest), e^r comes from a polynomial of
degree 7 (the coefficients of Cephes' expf, S. Moshier), and 2^n is built directly in the exponent
bits of a float. The rounding of n uses the 1.5 * 2^23 trick: adding that constant pushes the
fraction bits out of the float, so the sum holds round(x / ln 2) in its lowest mantissa bits. The
relative error is about one float ulp: at most 7.5e-8 on the 110000 points test_gpt2 checks
against exp in double ("vec_exp", which allows 1.5e-7). Below -87.3 (where e^x leaves the normal floats) the result is 0, above
88.38 (127.5 ln 2, where 2^n would leave the floats) it is +inf, and a NaN stays NaN (the clamps are comparisons, false for NaN), so a diverged
model still reports a NaN loss.

GELU uses vec_exp through the identity 0.5 (1 + tanh(u)) = 1 / (1 + e^(-2u)): train_gpt2.c,
"GELU".
*/
#ifndef COMMON_VEC_MATH_H
#define COMMON_VEC_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float vec_exp(float x) {
    const float hi = 88.3762626f, lo = -87.3365479f;  // 127.5 ln 2 (n <= 127), and e^lo the smallest normal float
    float xc = x > hi ? hi : x;
    xc = xc < lo ? lo : xc;
    const float round = 12582912.0f;  // 1.5 * 2^23
    float t = xc * 1.44269504088896341f + round;  // round(x / ln 2) in the low mantissa bits
    float n = t - round;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;  // e^r
    int32_t ti, ri;
    memcpy(&ti, &t, sizeof(ti));
    ri = (ti - 0x4B400000) * (1 << 23) + 0x3F800000;  // n + 127 in the exponent field: 2^n (0x4B400000: round's bits)
    float scale;
    memcpy(&scale, &ri, sizeof(scale));
    float e = p * scale;
    e = x < lo ? 0.0f : e;
    e = x > hi ? INFINITY : e;
    return e;
}

#endif // COMMON_VEC_MATH_H
