# tests/cudacpu/cudacpu.mk: our CUDA sources built with g++ through the CPU execution layer
# (tests/cudacpu/README.md). The top-level Makefile includes this fragment.
#   make tests/bin/test_gpt2cu_fp32_cpu    test_gpt2.cu, FP32 build, runs on the CPU
#   make tests/bin/test_gpt2cu_cpu         the same, BF16 build
#   make tests/bin/train_gpt2cu_cpu tests/bin/train_gpt2cu_fp32_cpu   the trainer, both precisions
#   make test-cudacpu                      what `make test` runs through the layer
# The CUDA headers supply the types (no GPU, no CUDA library is used): CUDA_INCLUDE is found next
# to nvcc or under /usr/local/cuda*; without them the targets say so and the test skips.

CUDA_INCLUDE ?= $(firstword $(wildcard $(dir $(shell command -v $(NVCC) 2>/dev/null))../include/cuda_bf16.h \
	/usr/local/cuda/include/cuda_bf16.h /usr/local/cuda-*/include/cuda_bf16.h))
CUDACPU_INC = $(patsubst %/,%,$(dir $(CUDA_INCLUDE)))
CUDACPU_OUT = tests/bin/cudacpu
CUDACPU_SRC = $(CUDACPU_OUT)/src
CUDACPU_CXX ?= g++
CUDACPU_CXXFLAGS = -std=c++17 -O2 -g -Wall -Wextra $(WERROR_CFLAGS) -I. -I$(CUDACPU_INC)
CUDACPU_KERNEL_FLAGS = $(CUDACPU_CXXFLAGS) -include $(CURDIR)/tests/cudacpu/cudacpu.h -Wno-unused-function
CUDACPU_HEADERS = tests/cudacpu/cudacpu.h tests/cudacpu/wmma.h
CUDACPU_OBJS = $(CUDACPU_OUT)/runtime.o $(CUDACPU_OUT)/cublaslt.o

.PHONY: test-cudacpu test-cudacpu-asan cudacpu-check-headers

cudacpu-check-headers:
	@[ -n "$(CUDA_INCLUDE)" ] || { echo "cudacpu: no CUDA headers found (set CUDA_INCLUDE=/path/to/cuda/include/cuda_bf16.h)"; exit 1; }

$(CUDACPU_OUT)/%.o: tests/cudacpu/%.cpp $(CUDACPU_HEADERS) | cudacpu-check-headers
	@mkdir -p $(CUDACPU_OUT)
	$(CUDACPU_CXX) $(CUDACPU_CXXFLAGS) -c $< -o $@

# every CUDA source rewritten (tests/cudacpu/rewrite.sh), under the same relative name
$(CUDACPU_SRC)/%: % tests/cudacpu/rewrite.sh
	@mkdir -p $(dir $@)
	sh tests/cudacpu/rewrite.sh $< $@

CUDACPU_TRAIN_SRCS = $(CUDACPU_SRC)/train_gpt2.cu $(CUDACPU_SRC)/siamese.cuh $(CUDACPU_SRC)/attention.cuh cuda_common.cuh \
	matmul_lt.cuh token_chunks.cuh
CUDACPU_TEST_SRCS = $(CUDACPU_SRC)/test_gpt2.cu $(CUDACPU_TRAIN_SRCS)

tests/bin/test_gpt2cu_cpu: $(CUDACPU_TEST_SRCS) $(CUDACPU_OBJS) $(COMMON_HEADERS) $(CUDACPU_HEADERS)
	$(CUDACPU_CXX) $(CUDACPU_KERNEL_FLAGS) -x c++ $< -x none $(CUDACPU_OBJS) -o $@ -lm
tests/bin/test_gpt2cu_fp32_cpu: $(CUDACPU_TEST_SRCS) $(CUDACPU_OBJS) $(COMMON_HEADERS) $(CUDACPU_HEADERS)
	$(CUDACPU_CXX) $(CUDACPU_KERNEL_FLAGS) -DENABLE_FP32 -x c++ $< -x none $(CUDACPU_OBJS) -o $@ -lm
# the trainer with MPI where the C trainer has it (common/dist.h: its gradients and weights then go
# through host memory, as on a GPU build without NCCL; tests/test_dist.sh runs it on 2 ranks)
CUDACPU_MPI_FLAGS = $(if $(filter 1,$(MPI)),$(MPI_CFLAGS) -DOMPI_SKIP_MPICXX)
tests/bin/train_gpt2cu_cpu: $(CUDACPU_TRAIN_SRCS) $(CUDACPU_OBJS) $(COMMON_HEADERS) $(CUDACPU_HEADERS) .mpi_flags
	$(CUDACPU_CXX) $(CUDACPU_KERNEL_FLAGS) $(CUDACPU_MPI_FLAGS) -x c++ $< -x none $(CUDACPU_OBJS) -o $@ -lm $(MPI_LDLIBS)
tests/bin/train_gpt2cu_fp32_cpu: $(CUDACPU_TRAIN_SRCS) $(CUDACPU_OBJS) $(COMMON_HEADERS) $(CUDACPU_HEADERS) .mpi_flags
	$(CUDACPU_CXX) $(CUDACPU_KERNEL_FLAGS) $(CUDACPU_MPI_FLAGS) -DENABLE_FP32 -x c++ $< -x none $(CUDACPU_OBJS) -o $@ -lm $(MPI_LDLIBS)
# the BF16 trainer on common/dist.h's NCCL path (USE_NCCL), where tests/fake_nccl/nccl.h, found
# before the real nccl.h, checks each NCCL call and carries it out with MPI (needs MPI=1)
tests/bin/train_gpt2cu_fakenccl_cpu: $(CUDACPU_TRAIN_SRCS) $(CUDACPU_OBJS) $(COMMON_HEADERS) $(CUDACPU_HEADERS) \
		tests/fake_nccl/nccl.h .mpi_flags
	$(CUDACPU_CXX) -Itests/fake_nccl $(CUDACPU_KERNEL_FLAGS) $(CUDACPU_MPI_FLAGS) -DUSE_NCCL -x c++ $< -x none \
		$(CUDACPU_OBJS) -o $@ -lm $(MPI_LDLIBS)

# the layer's own WMMA check (plain CUDA: it builds with nvcc as well)
tests/bin/test_wmma_cpu: $(CUDACPU_SRC)/tests/cudacpu/test_wmma.cu $(CUDACPU_OBJS) $(CUDACPU_HEADERS)
	$(CUDACPU_CXX) $(CUDACPU_KERNEL_FLAGS) -x c++ $< -x none $(CUDACPU_OBJS) -o $@ -lm

# attention.cuh's ldmatrix and mma.m16n8k16 as the layer runs them (shuffles), both precisions, against the PTX layouts
tests/bin/test_mma_cpu: $(CUDACPU_SRC)/tests/cudacpu/test_mma.cu $(CUDACPU_SRC)/attention.cuh cuda_common.cuh $(COMMON_HEADERS) \
		$(CUDACPU_OBJS) $(CUDACPU_HEADERS)
	$(CUDACPU_CXX) $(CUDACPU_KERNEL_FLAGS) -iquote $(CUDACPU_SRC) -x c++ $< -x none $(CUDACPU_OBJS) -o $@ -lm
tests/bin/test_mma_fp32_cpu: $(CUDACPU_SRC)/tests/cudacpu/test_mma.cu $(CUDACPU_SRC)/attention.cuh cuda_common.cuh $(COMMON_HEADERS) \
		$(CUDACPU_OBJS) $(CUDACPU_HEADERS)
	$(CUDACPU_CXX) $(CUDACPU_KERNEL_FLAGS) -DENABLE_FP32 -iquote $(CUDACPU_SRC) -x c++ $< -x none $(CUDACPU_OBJS) -o $@ -lm

# misuse the layer must catch (tests/cudacpu/test_misuse.sh)
tests/bin/test_misuse_cpu: $(CUDACPU_SRC)/tests/cudacpu/test_misuse.cu $(CUDACPU_OBJS) $(CUDACPU_HEADERS)
	$(CUDACPU_CXX) $(CUDACPU_KERNEL_FLAGS) -x c++ $< -x none $(CUDACPU_OBJS) -o $@ -lm

# what the thread schedules do (tests/cudacpu/test_schedule.sh)
tests/bin/test_schedule_cpu: $(CUDACPU_SRC)/tests/cudacpu/test_schedule.cu $(CUDACPU_OBJS) $(CUDACPU_HEADERS)
	$(CUDACPU_CXX) $(CUDACPU_KERNEL_FLAGS) -x c++ $< -x none $(CUDACPU_OBJS) -o $@ -lm

CUDACPU_TESTS = tests/bin/test_gpt2cu_fp32_cpu tests/bin/test_gpt2cu_cpu tests/bin/test_wmma_cpu tests/bin/test_mma_cpu \
	tests/bin/test_mma_fp32_cpu tests/bin/test_misuse_cpu \
	tests/bin/test_schedule_cpu \
	tests/bin/train_gpt2cu_cpu tests/bin/train_gpt2cu_fp32_cpu

test-cudacpu: test_gpt2
	@if [ -z "$(CUDA_INCLUDE)" ]; then echo "test-cudacpu: skipped: no CUDA headers (cuda_bf16.h) found"; \
	else $(MAKE) --no-print-directory $(CUDACPU_TESTS) WERROR=$(WERROR) && \
		CUDACPU_BUILD="$(CUDACPU_CXX) $(CUDACPU_KERNEL_FLAGS)" CUDACPU_OBJS="$(CUDACPU_OBJS)" \
		bash tests/cudacpu/test_cudacpu.sh; fi

# AddressSanitizer and UBSan over the layer and the FP32 test (not part of `make test`: the
# instrumented fibers make it several times slower): an out-of-bounds access in a kernel or on
# the host stops it with ASan's report; LeakSanitizer reports device memory never freed.
CUDACPU_SAN_FLAGS = -std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -Wall -Wextra -I. -I$(CUDACPU_INC)
# (the layer's own sources are compiled apart: cudacpu.h is force-included into the CUDA sources only)
CUDACPU_SAN_OBJS = $(CUDACPU_OUT)/asan/runtime.o $(CUDACPU_OUT)/asan/cublaslt.o
$(CUDACPU_OUT)/asan/%.o: tests/cudacpu/%.cpp $(CUDACPU_HEADERS) | cudacpu-check-headers
	@mkdir -p $(dir $@)
	$(CUDACPU_CXX) $(CUDACPU_SAN_FLAGS) -c $< -o $@
tests/bin/test_gpt2cu_fp32_asan: $(CUDACPU_TEST_SRCS) $(COMMON_HEADERS) $(CUDACPU_HEADERS) $(CUDACPU_SAN_OBJS)
	$(CUDACPU_CXX) $(CUDACPU_SAN_FLAGS) -include $(CURDIR)/tests/cudacpu/cudacpu.h -Wno-unused-function -DENABLE_FP32 \
		-x c++ $< -x none $(CUDACPU_SAN_OBJS) -o $@ -lm

test-cudacpu-asan: tests/bin/test_gpt2cu_fp32_asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		CUDACPU_SCHEDULE=shuffle:1 ./tests/bin/test_gpt2cu_fp32_asan

# an NVTX injection library that logs a program's push/pop ranges beside CUDACPU_LAUNCH_LOG
# (tests/cudacpu/nvtx_ranges.c; dev/gpu_check.sh --layer checks the trainer's "step" range with it)
tests/bin/nvtx_ranges.so: tests/cudacpu/nvtx_ranges.c | cudacpu-check-headers
	@mkdir -p tests/bin
	$(CC) -std=c11 -O2 -Wall -Wextra $(WERROR_CFLAGS) -I$(CUDACPU_INC) -shared -fPIC $< -o $@
