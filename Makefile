# SiameseNorm GPT-2: build the CPU trainer, the CUDA trainer and the tests.
#   make train_gpt2      CPU trainer (fp32, OpenMP when the compiler has it)
#   make test            every test that runs without a GPU (GPU tests skip with a message)
#   make train_gpt2cu    CUDA trainer (needs nvcc; see README for GPU_ARCH and PRECISION)
#   make data/arithmetic the default dataset (./train_gpt2 also makes it when it is missing)

CC ?= gcc
CFLAGS ?= -O3 -march=native
CFLAGS += -std=gnu11 -Wall -Wextra
LDLIBS = -lm

# OpenMP when the compiler supports it
OPENMP := $(shell echo 'int main(void){return 0;}' | $(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo yes)
ifeq ($(OPENMP),yes)
  CFLAGS += -fopenmp
else
  $(info OpenMP not found: building single-threaded)
endif

COMMON_HEADERS = $(wildcard common/*.h)

.PHONY: all test test-parity test-corrupt test-arith test-mechanism clean data/arithmetic

all: train_gpt2 test_gpt2

train_gpt2: train_gpt2.c $(COMMON_HEADERS)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

# the tests include train_gpt2.c; helpers it does not call are expected
test_gpt2: test_gpt2.c train_gpt2.c $(COMMON_HEADERS)
	$(CC) $(CFLAGS) -Wno-unused-function $< -o $@ $(LDLIBS)

test-parity: test_gpt2
	./test_gpt2

# the parity test must fail on damaged dumps
test-corrupt: test_gpt2
	bash tests/test_corrupt_dump.sh ./test_gpt2

# ----------------------------------------------------------------------------
# CUDA trainer and its test (nvcc + cuBLASLt). Compiles without a GPU; runs only with one.
#   make train_gpt2cu test_gpt2cu                 bf16 build for Hopper (sm_90)
#   make train_gpt2cu PRECISION=FP32              fp32 build (floatX = float, no TF32) for parity checks
#   make train_gpt2cu GPU_ARCH=80                 another GPU generation (A100: 80, H100: 90)
#   make train_gpt2cu_fp32 test_gpt2cu_fp32       the fp32 build under its own names
#   make check-cuda                               builds all four, runs the tests (they skip without a GPU)
# No --use_fast_math: its expf/tanhf approximations would loosen the parity with PyTorch.
NVCC ?= nvcc
GPU_ARCH ?= 90
PRECISION ?= BF16
NVCC_FLAGS = -O3 -std=c++17 -I. -gencode arch=compute_$(GPU_ARCH),code=sm_$(GPU_ARCH) \
	-gencode arch=compute_$(GPU_ARCH),code=compute_$(GPU_ARCH) -DGPU_ARCH_BUILT=$(GPU_ARCH) \
	-Xcompiler -Wall,-Wextra
NVCC_LDLIBS = -lcublasLt -lcublas
ifeq ($(PRECISION),FP32)
  PRECISION_FLAGS = -DENABLE_FP32
else ifneq ($(PRECISION),BF16)
  $(error PRECISION must be BF16 or FP32, not $(PRECISION))
endif
CUDA_SOURCES = train_gpt2.cu siamese.cuh $(COMMON_HEADERS)

# rebuild the CUDA binaries when PRECISION or GPU_ARCH change
.cuda_flags: FORCE
	@echo '$(NVCC_FLAGS) $(PRECISION_FLAGS)' | cmp -s - $@ || echo '$(NVCC_FLAGS) $(PRECISION_FLAGS)' > $@

train_gpt2cu: $(CUDA_SOURCES) .cuda_flags
	$(NVCC) $(NVCC_FLAGS) $(PRECISION_FLAGS) $< -o $@ $(NVCC_LDLIBS)

test_gpt2cu: test_gpt2.cu $(CUDA_SOURCES) .cuda_flags
	$(NVCC) $(NVCC_FLAGS) $(PRECISION_FLAGS) $< -o $@ $(NVCC_LDLIBS)

train_gpt2cu_fp32: $(CUDA_SOURCES) .cuda_flags
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 $< -o $@ $(NVCC_LDLIBS)

test_gpt2cu_fp32: test_gpt2.cu $(CUDA_SOURCES) .cuda_flags
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 $< -o $@ $(NVCC_LDLIBS)

check-cuda:
	@if command -v $(NVCC) > /dev/null 2>&1; then \
		$(MAKE) --no-print-directory train_gpt2cu test_gpt2cu train_gpt2cu_fp32 test_gpt2cu_fp32 PRECISION=BF16 && \
		./test_gpt2cu && ./test_gpt2cu_fp32; \
	else echo "check-cuda: skipped: $(NVCC) not found (CUDA trainer not built)"; fi

.PHONY: check-cuda FORCE
FORCE:

# the default dataset, synthetic additions (common/arithmetic.h); rewriting it changes nothing
dev/data/arithmetic: dev/data/arithmetic.c $(COMMON_HEADERS)
	$(CC) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

data/arithmetic: dev/data/arithmetic
	./dev/data/arithmetic data/arithmetic

-include tests/tests.mk
-include tests/robust.mk

# the default dataset and the accuracy scorer (common/arithmetic.h)
tests/bin/test_arithmetic: tests/test_arithmetic.c tests/harness.h $(COMMON_HEADERS) | tests/bin
	$(CC) $(CFLAGS) -I. -Wno-unused-function $< -o $@ $(LDLIBS)

test-arith: tests/bin/test_arithmetic train_gpt2 dev/data/arithmetic
	./tests/bin/test_arithmetic
	./tests/test_arith_train.sh
	@# the CUDA trainer includes these headers too: they must stay valid C++
	printf '#include "common/arithmetic.h"\n#include "common/args.h"\nint main() { return 0; }\n' \
		| $(CXX) -x c++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -I. -

# the residual-stream measurements of dev/experiments/mechanism.sh (the program includes train_gpt2.c)
dev/experiments/mechanism: dev/experiments/mechanism.c train_gpt2.c $(COMMON_HEADERS)
	$(CC) $(CFLAGS) -I. -Wno-unused-function $< -o $@ $(LDLIBS)

test-mechanism: dev/experiments/mechanism train_gpt2 tests/bin/mkshard
	bash tests/test_mechanism.sh

test: test-parity test-corrupt test-data test-arith test-train-cli test-mechanism test-fuzz-replay check-cuda

clean:
	rm -f train_gpt2 test_gpt2 train_gpt2cu test_gpt2cu train_gpt2cu_fp32 test_gpt2cu_fp32 .cuda_flags dev/data/arithmetic
	rm -f dev/experiments/mechanism
	rm -rf tests/bin
