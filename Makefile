# SiameseNorm GPT-2: build the CPU trainer, the CUDA trainer and the tests.
#   make train_gpt2      CPU trainer (fp32, OpenMP when the compiler has it)
#   make test            every test that runs without a GPU (GPU tests skip with a message), built
#                        with every compiler warning an error, C and CUDA (CI runs exactly this)
#   make train_gpt2cu    CUDA trainer (needs nvcc; see doc/cuda.md for GPU_ARCH and PRECISION)
#   make data/arithmetic the default dataset (./train_gpt2 also makes it when it is missing)
#   make test WERROR=0   the tests with warnings left as warnings (a newer compiler, say)
#   make dev/llmc_convert  converter between llm.c's GPT-2 checkpoints and ours (doc/formats.md, "llm.c")

CC ?= gcc
CFLAGS ?= -O3 -march=native
CFLAGS += -std=gnu11 -Wall -Wextra -fno-math-errno  # no errno from sqrtf: AdamW's loop then vectorizes
LDLIBS = -lm

# OpenMP when the compiler supports it
OPENMP := $(shell echo 'int main(void){return 0;}' | $(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo yes)
ifeq ($(OPENMP),yes)
  CFLAGS += -fopenmp
else
  $(info OpenMP not found: building single-threaded)
  CFLAGS += -Wno-unknown-pragmas  # the omp pragmas are then ignored, on purpose
endif

# WERROR=1 turns every warning into an error: CFLAGS (the trainer, the tests, the fuzz replays)
# and NVCC_FLAGS (nvcc's own warnings and the host compiler's). It is on for `make test` (and so
# in CI), off for the other goals unless given.
ifneq ($(filter test,$(MAKECMDGOALS)),)
  WERROR ?= 1
endif
WERROR ?= 0
ifeq ($(WERROR),1)
  WERROR_CFLAGS = -Werror
  WERROR_NVCC_FLAGS = -Werror all-warnings -Xcompiler -Werror
else ifneq ($(WERROR),0)
  $(error WERROR must be 0 or 1, not $(WERROR))
endif
CFLAGS += $(WERROR_CFLAGS)

COMMON_HEADERS = $(wildcard common/*.h)

# MPI when Open MPI is installed (mpicc found): `mpirun -np N ./train_gpt2` then trains on N
# processes (common/dist.h); without it, or with MPI=0, the trainer is built for one process.
# dev/install_mpi.sh installs it from Debian's packages (openmpi-bin, libopenmpi-dev).
MPI ?= $(shell command -v mpicc > /dev/null 2>&1 && echo 1 || echo 0)
ifeq ($(MPI),1)
  MPI_CFLAGS := -DUSE_MPI $(shell mpicc --showme:compile)
  MPI_LDLIBS := $(shell mpicc --showme:link)
else ifneq ($(MPI),0)
  $(error MPI must be 0 or 1, not $(MPI))
endif

.PHONY: all test test-eval test-hf test-roofline test-kernels test-dist test-cu-training test-recompute test-lt-fault test-parity test-corrupt test-modes test-arith test-llmc test-mechanism test-plot check-cuda clean data/arithmetic FORCE

all: train_gpt2 test_gpt2

# rebuild the trainer when MPI comes or goes
.mpi_flags: FORCE
	@echo '$(MPI_CFLAGS) $(MPI_LDLIBS)' | cmp -s - $@ || echo '$(MPI_CFLAGS) $(MPI_LDLIBS)' > $@

train_gpt2: train_gpt2.c $(COMMON_HEADERS) .mpi_flags
	$(CC) $(CFLAGS) $(MPI_CFLAGS) $< -o $@ $(LDLIBS) $(MPI_LDLIBS)

# the tests include train_gpt2.c; helpers it does not call are expected
test_gpt2: test_gpt2.c train_gpt2.c $(COMMON_HEADERS)
	$(CC) $(CFLAGS) -Wno-unused-function $< -o $@ $(LDLIBS)

# the stored PyTorch dumps (the trained one included: its absence is a failure here), then the path that makes reference dumps at shapes too large to store
# (test_gpt2cu reads them): an odd shape written by the CPU trainer and read back
test-parity: test_gpt2
	@out=$$(mktemp /tmp/test_gpt2_out.XXXXXX) && trap 'rm -f "$$out"' EXIT && \
		if ./test_gpt2 > "$$out"; then s=0; else s=1; fi; cat "$$out"; \
		[ $$s = 0 ] && grep -q '^\[siamese_trained\] PASSED' "$$out" || \
		{ echo "test_gpt2 FAILED, or did not check data/test/siamese_trained"; exit 1; }
	@dir=$$(mktemp -d /tmp/test_gpt2_odd.XXXXXX) && trap 'rm -rf "$$dir"' EXIT && \
		./test_gpt2 --write "$$dir" odd && ./test_gpt2 "$$dir" > "$$dir/out.txt" && \
		grep -E "^\[|worst|passed" "$$dir/out.txt" || { cat "$$dir/out.txt"; exit 1; }

# the parity test must fail on damaged dumps, and on bugs planted in train_gpt2.c
test-corrupt: test_gpt2
	bash tests/test_corrupt_dump.sh ./test_gpt2
	CC="$(CC)" CFLAGS="$(CFLAGS)" bash tests/test_planted_cpu.sh

# ----------------------------------------------------------------------------
# CUDA trainer and its test (nvcc + cuBLASLt). Compiles without a GPU; runs only with one.
#   make train_gpt2cu test_gpt2cu                 bf16 build for Hopper (sm_90)
#   make train_gpt2cu PRECISION=FP32              fp32 build (floatX = float, no TF32) for parity checks
#   make train_gpt2cu GPU_ARCH=80                 another GPU generation (A100: 80, H100: 90)
#   make train_gpt2cu_fp32 test_gpt2cu_fp32       the fp32 build under its own names
#   make check-cuda                               builds all four, runs both tests (they skip without a GPU)
#                                                 and tests/test_train_cu_cli.sh (no GPU needed)
# No --use_fast_math: its expf/tanhf approximations would loosen the parity with PyTorch.
NVCC ?= nvcc
GPU_ARCH ?= 90
# set but empty (GPU_ARCH= in the environment) means the default
ifeq ($(strip $(GPU_ARCH)),)
  override GPU_ARCH = 90
endif
PRECISION ?= BF16
NVCC_FLAGS = -O3 -std=c++17 -I. -gencode arch=compute_$(GPU_ARCH),code=sm_$(GPU_ARCH) \
	-gencode arch=compute_$(GPU_ARCH),code=compute_$(GPU_ARCH) -DGPU_ARCH_BUILT=$(GPU_ARCH) \
	-Xcompiler -Wall,-Wextra $(WERROR_NVCC_FLAGS)
NVCC_LDLIBS = -lcublasLt -lcublas
ifeq ($(PRECISION),FP32)
  PRECISION_FLAGS = -DENABLE_FP32
else ifneq ($(PRECISION),BF16)
  $(error PRECISION must be BF16 or FP32, not $(PRECISION))
endif
CUDA_SOURCES = train_gpt2.cu $(wildcard *.cuh) $(COMMON_HEADERS)

# rebuild the CUDA binaries when PRECISION or GPU_ARCH change
# several GPUs (common/dist.h, doc/distributed.md): the trainer gets MPI (to launch) where the C
# trainer does (MPI=1), and NCCL (to sum the gradients) where nccl.h is beside nvcc's headers;
# NCCL=0 leaves NCCL out (the sums then go through host memory, with MPI)
NVCC_ROOT := $(abspath $(dir $(shell command -v $(NVCC) 2>/dev/null))..)
NCCL ?= $(if $(wildcard $(NVCC_ROOT)/include/nccl.h),1,0)
ifeq ($(MPI),1)
  NVCC_DIST_FLAGS = $(MPI_CFLAGS) -DOMPI_SKIP_MPICXX  # the C API only (its C++ bindings do not build warning-free)
  NVCC_DIST_LDLIBS = $(MPI_LDLIBS)
  ifeq ($(NCCL),1)
    NVCC_DIST_FLAGS += -DUSE_NCCL
    NVCC_DIST_LDLIBS += -L$(NVCC_ROOT)/lib -L$(NVCC_ROOT)/lib64 -lnccl
  endif
endif

.cuda_flags: FORCE
	@echo '$(NVCC_FLAGS) $(PRECISION_FLAGS) $(NVCC_DIST_FLAGS)' | cmp -s - $@ || \
		echo '$(NVCC_FLAGS) $(PRECISION_FLAGS) $(NVCC_DIST_FLAGS)' > $@

train_gpt2cu: $(CUDA_SOURCES) .cuda_flags
	$(NVCC) $(NVCC_FLAGS) $(PRECISION_FLAGS) $(NVCC_DIST_FLAGS) $< -o $@ $(NVCC_LDLIBS) $(NVCC_DIST_LDLIBS)

test_gpt2cu: test_gpt2.cu $(CUDA_SOURCES) .cuda_flags
	$(NVCC) $(NVCC_FLAGS) $(PRECISION_FLAGS) $< -o $@ $(NVCC_LDLIBS)

train_gpt2cu_fp32: $(CUDA_SOURCES) .cuda_flags
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 $(NVCC_DIST_FLAGS) $< -o $@ $(NVCC_LDLIBS) $(NVCC_DIST_LDLIBS)

test_gpt2cu_fp32: test_gpt2.cu $(CUDA_SOURCES) .cuda_flags
	$(NVCC) $(NVCC_FLAGS) -DENABLE_FP32 $< -o $@ $(NVCC_LDLIBS)

# every check runs, whatever the one before it says, and each result is named. The command-line
# test needs no GPU: train_gpt2cu reads flags, data and checkpoint before it looks for one.
check-cuda: train_gpt2 tests/bin/mkshard
	@if command -v $(NVCC) > /dev/null 2>&1; then \
		$(MAKE) --no-print-directory train_gpt2cu test_gpt2cu train_gpt2cu_fp32 test_gpt2cu_fp32 PRECISION=BF16 WERROR=$(WERROR) || exit 1; \
		./test_gpt2cu; bf16=$$?; ./test_gpt2cu_fp32; fp32=$$?; bash tests/test_train_cu_cli.sh; cli=$$?; \
		echo "check-cuda: test_gpt2cu (bf16) exit $$bf16, test_gpt2cu_fp32 exit $$fp32, tests/test_train_cu_cli.sh exit $$cli"; \
		[ $$bf16 = 0 ] && [ $$fp32 = 0 ] && [ $$cli = 0 ]; \
	else echo "check-cuda: skipped: $(NVCC) not found (CUDA trainer not built)"; fi

FORCE:

# the default dataset, synthetic additions (common/arithmetic.h); rewriting it changes nothing
dev/data/arithmetic: dev/data/arithmetic.c $(COMMON_HEADERS)
	$(CC) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

data/arithmetic: dev/data/arithmetic
	./dev/data/arithmetic data/arithmetic

-include tests/tests.mk
-include tests/robust.mk
-include tests/cudacpu/cudacpu.mk
-include dev/cuda/layer.mk

# the CUDA trainer through the CPU execution layer: 20 steps from one checkpoint against train_gpt2
# (every mode, both precisions), a repeat and a resume bit for bit, checkpoints between the two
# trainers, the command line: the GPU-free stages of dev/gpu_check.sh (logs in tests/bin/gpu_check_layer)
#
# test-lt-fault: cuBLASLt refusing the fused GELU epilogues (tests/lt_fault.cpp in front of the
# layer's cuBLASLt): test_gpt2cu (FP32) must pass with the GELU kernel instead (tests/test_lt_fault.sh)
ifneq ($(CUDA_INCLUDE),)
test-cu-training: train_gpt2 tests/bin/mkshard tests/bin/train_gpt2cu_cpu tests/bin/train_gpt2cu_fp32_cpu
	WERROR=$(WERROR) OUT=tests/bin/gpu_check_layer bash dev/gpu_check.sh --layer

LT_FAULT_RENAMES = -DcublasLtMatmul=lt_fault_matmul -DcublasLtMatmulAlgoGetHeuristic=lt_fault_heuristic \
	-DcublasLtMatmulDescSetAttribute=lt_fault_set_attribute
tests/bin/test_gpt2cu_fp32_ltfault: $(CUDACPU_TEST_SRCS) $(CUDACPU_OBJS) $(COMMON_HEADERS) tests/cudacpu/cudacpu.h tests/lt_fault.cpp
	$(CUDACPU_CXX) $(CUDACPU_CXXFLAGS) -c tests/lt_fault.cpp -o tests/bin/lt_fault.o
	$(CUDACPU_CXX) $(CUDACPU_KERNEL_FLAGS) -DENABLE_FP32 $(LT_FAULT_RENAMES) -x c++ $< -x none tests/bin/lt_fault.o \
		$(CUDACPU_OBJS) -o $@ -lm

test-lt-fault: tests/bin/test_gpt2cu_fp32_ltfault
	bash tests/test_lt_fault.sh
else
test-cu-training test-lt-fault:
	@echo "$@: skipped: no CUDA headers (cuda_bf16.h) found"
endif

# the default dataset and the accuracy scorer (common/arithmetic.h)
tests/bin/test_arithmetic: tests/test_arithmetic.c tests/harness.h $(COMMON_HEADERS) | tests/bin
	$(CC) $(CFLAGS) -I. -Wno-unused-function $< -o $@ $(LDLIBS)

test-arith: tests/bin/test_arithmetic train_gpt2 dev/data/arithmetic
	./tests/bin/test_arithmetic
	./tests/test_arith_train.sh
	@# the CUDA trainer includes these headers too: they must stay valid C++
	printf '#include "common/arithmetic.h"\n#include "common/args.h"\nint main() { return 0; }\n' \
		| $(CXX) -x c++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -I. -

# the multiple-choice eval (-H, common/eval.h): the file format, scoring and refusals, then both
# trainers on the arithmetic data's eval file (the CUDA trainer through the CPU execution layer)
test-eval: tests/bin/test_eval train_gpt2 $(if $(CUDA_INCLUDE),tests/bin/train_gpt2cu_fp32_cpu)
	./tests/bin/test_eval
	bash tests/test_eval.sh

# a fourth norm mode must not build until every place that depends on the mode handles it
test-modes:
	bash tests/test_mode_dispatch.sh

# llm.c interop: tiny pre model -> llm.c float32 -> back (bit-identical, same loss), a bf16 file, refusals
dev/llmc_convert: dev/llmc_convert.c $(COMMON_HEADERS)
	$(CC) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

tests/bin/test_llmc: tests/test_llmc.c tests/harness.h train_gpt2.c $(COMMON_HEADERS) | tests/bin
	$(CC) $(CFLAGS) -I. -Wno-unused-function $< -o $@ $(LDLIBS)

test-llmc: tests/bin/test_llmc dev/llmc_convert
	./tests/bin/test_llmc dev/llmc_convert

# models exported for Hugging Face transformers (dev/export_hf.py) against the CPU trainer's logits
# and greedy tokens (tests/bin/trainer_logits), every norm mode. Not part of `make test`: it needs
# torch (not installed for you) and installs transformers, safetensors and tiktoken with pip when
# they are missing (tests/test_hf.sh)
tests/bin/trainer_logits: tests/trainer_logits.c train_gpt2.c $(COMMON_HEADERS) | tests/bin
	$(CC) $(CFLAGS) -I. -Wno-unused-function $< -o $@ $(LDLIBS)

test-hf: train_gpt2 tests/bin/trainer_logits tests/bin/mkshard data/arithmetic
	bash tests/test_hf.sh

# the residual-stream measurements of dev/experiments/mechanism.sh (the program includes train_gpt2.c)
dev/experiments/mechanism: dev/experiments/mechanism.c train_gpt2.c $(COMMON_HEADERS)
	$(CC) $(CFLAGS) -I. -Wno-unused-function $< -o $@ $(LDLIBS)

test-mechanism: dev/experiments/mechanism train_gpt2 tests/bin/mkshard
	bash tests/test_mechanism.sh

# dev/plot.py refuses a log with nothing to plot; the data scripts' progress counter (standard
# library only; skipped without python3)
test-plot:
	@if command -v python3 > /dev/null 2>&1; then python3 dev/test_plot.py && python3 dev/data/test_progress.py; \
	else echo "test-plot: skipped: python3 not found"; fi

# doc/cuda.md's roofline table is dev/roofline.py's current output, and the script's own checks
# (the counts against attention.cuh's and dev/cuda/README.md's, the profile join on canned CSVs);
# standard library only, skipped without python3
test-roofline: | tests/bin
	@if command -v python3 > /dev/null 2>&1; then python3 dev/roofline.py --check doc/cuda.md && \
		python3 dev/roofline.py --self-test > tests/bin/roofline_self_test.txt || { cat tests/bin/roofline_self_test.txt; exit 1; }; \
		tail -n 1 tests/bin/roofline_self_test.txt; \
	else echo "test-roofline: skipped: python3 not found"; fi

# several processes (common/dist.h): 2 ranks against 1, bit-identical repeats and resumes, ZeRO-1 on
# and off, errors, a killed rank, a parameter count 2 and 3 do not divide; the CUDA trainer's host
# path through the CPU execution layer, and its NCCL path with tests/fake_nccl/nccl.h as NCCL
# (skipped without Open MPI: bash dev/install_mpi.sh installs it)
tests/bin/ckpt_diff: tests/ckpt_diff.c $(COMMON_HEADERS) | tests/bin
	$(CC) $(CFLAGS) -I. -Wno-unused-function $< -o $@ $(LDLIBS)

# the shard layout alone (common/dist.h, no MPI needed): every n up to 300 over 1 to 13 ranks
tests/bin/test_dist_shards: tests/test_dist_shards.c tests/harness.h $(COMMON_HEADERS) | tests/bin
	$(CC) $(CFLAGS) -I. -Wno-unused-function $< -o $@ $(LDLIBS)

test-dist: train_gpt2 tests/bin/ckpt_diff tests/bin/mkshard dev/data/arithmetic tests/bin/test_dist_shards \
	$(if $(CUDA_INCLUDE),tests/bin/train_gpt2cu_fp32_cpu tests/bin/train_gpt2cu_cpu \
		$(if $(filter 1,$(MPI)),tests/bin/train_gpt2cu_fakenccl_cpu))
	./tests/bin/test_dist_shards
	bash tests/test_dist.sh

# the CUDA trainer's kernels through the CPU execution layer: two shapes the stored dumps lack (flash
# attention over three tiles, the last partial; several column-sum chunks), and planted bugs that must
# fail (tests/test_kernels.sh)
test-kernels: test_gpt2
	@if [ -z "$(CUDA_INCLUDE)" ]; then echo "test-kernels: skipped: no CUDA headers (cuda_bf16.h) found"; \
	else bash tests/test_kernels.sh; fi

# recompute (-r 0, 1, 2): the same step lines and the same final files, byte for byte, in every mode;
# the CUDA trainer too, both precisions, through the CPU execution layer (tests/test_recompute.sh)
test-recompute: train_gpt2 $(if $(CUDA_INCLUDE),tests/bin/train_gpt2cu_cpu tests/bin/train_gpt2cu_fp32_cpu)
	TRAINERS="./train_gpt2 $(if $(CUDA_INCLUDE),tests/bin/train_gpt2cu_cpu tests/bin/train_gpt2cu_fp32_cpu)" \
		bash tests/test_recompute.sh

test: test-parity test-corrupt test-modes test-data test-arith test-llmc test-train-cli test-mechanism test-readme \
	test-plot test-roofline test-fuzz-replay test-dist check-cuda test-cudacpu test-eval test-dev-cuda test-kernels \
	test-cu-training test-lt-fault test-recompute

clean:
	rm -f train_gpt2 test_gpt2 train_gpt2cu test_gpt2cu train_gpt2cu_fp32 test_gpt2cu_fp32 .cuda_flags .mpi_flags dev/data/arithmetic \
		dev/llmc_convert dev/experiments/mechanism
	rm -rf tests/bin
