/*
dev/cuda/trainer.h: the CUDA trainer's own kernels, for the experiments that check and time them
beside their old versions (column_sums.cu, vec_kernels.cu, classifier.cu). train_gpt2.cu is
included whole, as test_gpt2.cu includes it (TESTING leaves out its main), in the bf16 build;
its helpers (cudaCheck, ceil_div, warp_sum, ...) then stand in for common.h's own.

A program picks the trainer's path as TRAIN_GPT2CU_KERNELS would, by setting new_kernels (the
trainer's bit set of KERNEL_COLSUM, KERNEL_VEC, KERNEL_CLASSIFIER, ...; 0: the old kernels), and
calls the trainer's host function (column_grads, layernorm_forward, ...), which launches the kernel
exactly as a training step does. Where a new kernel needs aligned rows or a whole number of
16-byte vectors (vec_fits), the program checks that first, so the version it names is the one
that runs.
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

// sets the trainer's kernel choice (what TRAIN_GPT2CU_KERNELS sets): 0 the old paths, or KERNEL_* bits
static inline void use_new_kernels(int bits) { new_kernels = bits; }

#endif  // DEV_CUDA_TRAINER_H
