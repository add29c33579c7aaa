/*
dev/cuda/trainer.h: the CUDA trainer's own kernels, for the experiments that check and time them
beside other versions (siamese_input_forward.cu, siamese_input_backward.cu, layernorm.cu,
classifier.cu, column_sums.cu, vec_kernels.cu). train_gpt2.cu is included whole, as test_gpt2.cu
includes it (TESTING leaves out its main), in the bf16 build; its helpers (cudaCheck, ceil_div,
warp_sum, ...) then stand in for common.h's own.

A version that IS the trainer's calls the trainer's host function (column_grads,
layernorm_forward, layernorm_backward, siamese_input_forward, siamese_input_backward,
classifier, ...), which picks its kernel and launches it exactly as a training step does. Where that choice depends on the shape (a 16-byte
width where the rows allow it, row_width; the one-pass classifier where the row fits), the
program checks the shape first, so the version it names is the one that runs.
*/
#ifndef DEV_CUDA_TRAINER_H
#define DEV_CUDA_TRAINER_H

#ifdef ENABLE_FP32
#error "the dev/cuda experiments check and time the bf16 build of the trainer"
#endif
#define TESTING
#include "train_gpt2.cu"
#define DEV_CUDA_TRAINER
#include "common.h"

// the scratch that gpt2_allocate sets up in the trainer, for rows of up to C columns: the two-stage
// column sums' (column_grads) and the LayerNorm backwards' block sums (up to the six of a
// SiameseNorm input side)
static inline void trainer_partials(int C) {
    partials_reserve((size_t)COLUMN_MAX_SPLITS * C);
    partials_reserve((size_t)LN_GRAD_BLOCKS * SIAMESE_SUMS * C);
}

// the means and the rstds of n LayerNorm statistics saved on the device, as two host arrays
static inline void from_device_stats(float* mean, float* rstd, const LnStats* d, size_t n) {
    LnStats* h = (LnStats*)host_alloc(n * sizeof(LnStats));
    cudaCheck(cudaMemcpy(h, d, n * sizeof(LnStats), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        mean[i] = h[i].mean;
        rstd[i] = h[i].rstd;
    }
    free(h);
}

#endif  // DEV_CUDA_TRAINER_H
