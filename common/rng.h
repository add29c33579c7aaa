/*
common/rng.h: a small, fast, reproducible random number generator (xorshift64*), used for fresh
initialisation and for sampling. Both trainers use it, so the same seed gives the same fresh model
on the CPU and on the GPU (initialisation happens on the host).
*/
#ifndef COMMON_RNG_H
#define COMMON_RNG_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifndef M_PI  // strict C (e.g. _POSIX_C_SOURCE builds) leaves it out of math.h
#define M_PI 3.14159265358979323846
#endif

static inline uint32_t random_u32(uint64_t* state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1DULL) >> 32);
}

// splitmix64's finaliser: a well-mixed 64-bit hash of x (a seed into positions, pairs into buckets)
static inline uint64_t random_mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

// uniform in [0, 1)
static inline float random_f32(uint64_t* state) { return (float)(random_u32(state) >> 8) / 16777216.0f; }

// fills out[0..n) with N(0, std^2) samples (Box-Muller, two samples per pair of uniforms)
static inline void random_normal(float* out, size_t n, float std, uint64_t* state) {
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((double)random_u32(state) + 1.0) / 4294967296.0;  // (0, 1]: log is finite
        double u2 = (double)random_u32(state) / 4294967296.0;
        double r = sqrt(-2.0 * log(u1));
        out[i] = (float)(std * r * cos(2.0 * M_PI * u2));
        if (i + 1 < n) { out[i + 1] = (float)(std * r * sin(2.0 * M_PI * u2)); }
    }
}

// samples an index from a probability vector of length n, given a uniform coin in [0, 1)
static inline int sample_from_probs(const float* probs, int n, float coin) {
    float cdf = 0.0f;
    for (int i = 0; i < n; i++) {
        cdf += probs[i];
        if (coin < cdf) { return i; }
    }
    return n - 1;  // rounding: the cdf may end just below 1
}

#endif // COMMON_RNG_H
