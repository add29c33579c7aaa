# dev/cuda/layer.mk: the kernel experiments of dev/cuda built through the CPU execution layer
# (tests/cudacpu/cudacpu.mk: the same rewrite, flags and runtime as tests/bin/*_cpu) and run at
# small sizes, every version checked against its CPU reference (dev/cuda/test_layer.sh). The
# top-level Makefile includes this fragment after tests/cudacpu/cudacpu.mk.
#   make test-dev-cuda                            what `make test` runs
#   make tests/bin/dev_cuda/classifier_cpu        one program; run it as ./tests/bin/dev_cuda/classifier_cpu N=5 V=301 Vp=304
# The rewritten sources (tests/bin/cudacpu/src/...) are found first for quoted includes (-iquote),
# so a program's own headers and the trainer's chapters it includes come rewritten too.
# nvcc's `#pragma unroll` means nothing to g++ (-Wno-unknown-pragmas).

DEV_CUDA_PROGRAMS = siamese_input_forward siamese_input_backward layernorm classifier attention_forward \
	attention_backward column_sums vec_kernels encoder_backward
DEV_CUDA_LAYER_BINS = $(DEV_CUDA_PROGRAMS:%=tests/bin/dev_cuda/%_cpu)
DEV_CUDA_HEADERS = $(addprefix $(CUDACPU_SRC)/dev/cuda/,common.h attention_v1.h attention_ref.h attention_flash_smem.h \
	attention_fwd_wmma.h attention_bwd_wmma.h attention_wmma.h trainer.h layernorm_v1.h ln_backward_cols.h) \
	$(CUDACPU_TRAIN_SRCS) $(COMMON_HEADERS)

.PHONY: test-dev-cuda

tests/bin/dev_cuda/%_cpu: $(CUDACPU_SRC)/dev/cuda/%.cu $(DEV_CUDA_HEADERS) $(CUDACPU_OBJS) $(CUDACPU_HEADERS)
	@mkdir -p $(dir $@)
	$(CUDACPU_CXX) $(CUDACPU_KERNEL_FLAGS) -Wno-unknown-pragmas -iquote $(CUDACPU_SRC) -x c++ $< -x none $(CUDACPU_OBJS) -o $@ -lm

# the binaries are prerequisites (not a sub-make), so that this make builds the layer's objects once
ifneq ($(CUDA_INCLUDE),)
test-dev-cuda: $(DEV_CUDA_LAYER_BINS)
	bash dev/cuda/test_layer.sh
else
test-dev-cuda:
	@echo "test-dev-cuda: skipped: no CUDA headers (cuda_bf16.h) found"
endif

# the rewritten sources stay (they are only rewritten again when their original changes)
.SECONDARY: $(DEV_CUDA_PROGRAMS:%=$(CUDACPU_SRC)/dev/cuda/%.cu) $(DEV_CUDA_HEADERS)
