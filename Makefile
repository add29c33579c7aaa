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

.PHONY: all test test-parity test-arith clean data/arithmetic

all: train_gpt2 test_gpt2

train_gpt2: train_gpt2.c $(COMMON_HEADERS)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

# the tests include train_gpt2.c; helpers it does not call are expected
test_gpt2: test_gpt2.c train_gpt2.c $(COMMON_HEADERS)
	$(CC) $(CFLAGS) -Wno-unused-function $< -o $@ $(LDLIBS)

test-parity: test_gpt2
	./test_gpt2

# the default dataset, synthetic additions (common/arithmetic.h); rewriting it changes nothing
dev/data/arithmetic: dev/data/arithmetic.c $(COMMON_HEADERS)
	$(CC) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

data/arithmetic: dev/data/arithmetic
	./dev/data/arithmetic data/arithmetic

-include tests/tests.mk

# the default dataset and the accuracy scorer (common/arithmetic.h)
tests/bin/test_arithmetic: tests/test_arithmetic.c tests/harness.h $(COMMON_HEADERS) | tests/bin
	$(CC) $(CFLAGS) -I. -Wno-unused-function $< -o $@ $(LDLIBS)

test-arith: tests/bin/test_arithmetic train_gpt2 dev/data/arithmetic
	./tests/bin/test_arithmetic
	./tests/test_arith_train.sh
	@# the CUDA trainer includes these headers too: they must stay valid C++
	printf '#include "common/arithmetic.h"\n#include "common/args.h"\nint main() { return 0; }\n' \
		| $(CXX) -x c++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -I. -

test: test-parity test-data test-arith

clean:
	rm -f train_gpt2 test_gpt2 train_gpt2cu test_gpt2cu dev/data/arithmetic
	rm -rf tests/bin
