# tests/tests.mk: build and run the tests of the data pipeline (common/tokenizer.h and
# common/dataloader.h). The top-level Makefile includes this fragment; it also works alone:
#
#     make -f tests/tests.mk test-data        build and run the two C tests
#     make -f tests/tests.mk check-cxx-data   the headers also compile as C++ (as nvcc will see them)
#     make -f tests/tests.mk test-data-asan   the C tests again under AddressSanitizer/UBSan
#
# The C tests write their own files and need no Python. dev/data/test_roundtrip.py uses
# tests/bin/decode_tokens to check the C decoder against tiktoken on real text.

ifeq ($(origin CC),default)
CC = gcc
endif
CFLAGS ?= -O2 -Wall -Wextra
CXX ?= g++

DATA_HEADERS := common/utils.h common/rng.h common/tokenizer.h common/dataloader.h
DATA_TESTS := tests/bin/test_tokenizer tests/bin/test_dataloader tests/bin/decode_tokens
# a test uses a few of the static helpers of common/utils.h; gcc would warn about the others
DATA_TEST_FLAGS := -I. -Wno-unused-function

.PHONY: test_tokenizer test_dataloader decode_tokens test-data test-data-asan check-cxx-data

test_tokenizer: tests/bin/test_tokenizer
test_dataloader: tests/bin/test_dataloader
decode_tokens: tests/bin/decode_tokens

tests/bin:
	mkdir -p tests/bin

$(DATA_TESTS): tests/bin/%: tests/%.c tests/harness.h $(DATA_HEADERS) | tests/bin
	$(CC) $(CFLAGS) $(DATA_TEST_FLAGS) -o $@ $<

test-data: tests/bin/test_tokenizer tests/bin/test_dataloader
	./tests/bin/test_tokenizer
	./tests/bin/test_dataloader

test-data-asan: | tests/bin
	$(CC) -O1 -g -Wall -Wextra $(DATA_TEST_FLAGS) -fsanitize=address,undefined -o tests/bin/test_tokenizer_asan tests/test_tokenizer.c
	$(CC) -O1 -g -Wall -Wextra $(DATA_TEST_FLAGS) -fsanitize=address,undefined -o tests/bin/test_dataloader_asan tests/test_dataloader.c
	./tests/bin/test_tokenizer_asan
	./tests/bin/test_dataloader_asan

# the headers are shared with the CUDA trainer, so they must be valid C++ too (and, where nvcc
# is installed, also compile as CUDA source)
check-cxx-data: | tests/bin
	printf '#include "common/tokenizer.h"\n#include "common/dataloader.h"\nint main() { return 0; }\n' \
		> tests/bin/check_data.cu
	$(CXX) -x c++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -I. tests/bin/check_data.cu
	@if command -v nvcc > /dev/null 2>&1; then \
		echo "nvcc -std=c++17 -I. -c tests/bin/check_data.cu"; \
		nvcc -std=c++17 -I. -c -o tests/bin/check_data.o tests/bin/check_data.cu || exit 1; \
	else echo "(nvcc not found: CUDA compile check skipped)"; fi
	@echo "check-cxx-data: common/tokenizer.h and common/dataloader.h compile as C++"

# the multiple-choice eval (common/eval.h): its file format, scoring and refusals, the arithmetic
# data's eval file; then both trainers on it (tests/test_eval.sh)
tests/bin/test_eval: tests/test_eval.c tests/harness.h common/eval.h common/arithmetic.h common/utils.h common/rng.h | tests/bin
	$(CC) $(CFLAGS) $(DATA_TEST_FLAGS) -o $@ $< -lm
