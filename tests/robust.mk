# tests/robust.mk: the trainer's robustness tests, included by the top-level Makefile.
#   make test-train-cli   the step's arithmetic (tests/test_train_loop.c), then end-to-end tests of
#                         ./train_gpt2 (tests/test_train_cli.sh)
#   make test-readme      the commands of README.md and doc/*.md, run as written in a fresh copy (tests/test_readme.sh)
#   make test-fuzz-replay the fuzz harnesses (dev/fuzz/) built with plain gcc, replaying
#                         tests/fuzz_regressions/<target>/* (crashes once found, and corpus samples)
#   make asan             the C tests and the trainer under AddressSanitizer + UBSan, then the
#                         trainer's tests and a short run with checkpoints and a resume (not in `make test`)

FUZZ_TARGETS := checkpoint state dataloader tokenizer eval
FUZZ_REPLAY_BINS := $(addprefix tests/bin/replay_,$(FUZZ_TARGETS))
ROBUST_CFLAGS := -O1 -g -std=gnu11 -Wall -Wextra $(WERROR_CFLAGS) -I. -Wno-unused-function -Wno-unknown-pragmas
# the replays in `make test` check for undefined behaviour too where the compiler has UBSan
REPLAY_UBSAN := $(shell echo 'int main(void){return 0;}' | $(CC) -fsanitize=undefined -x c - -o /dev/null 2>/dev/null \
	&& echo -fsanitize=undefined -fno-sanitize-recover=all)
ASAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all

.PHONY: test-train-cli test-readme test-fuzz-replay asan

tests/bin/mkshard: tests/mkshard.c | tests/bin
	$(CC) -O2 -Wall -Wextra $(WERROR_CFLAGS) -o $@ $<

# the trainer with the faults the tests plant (common/test_hooks.h: TRAIN_GPT2_NAN_STEPS); one thread
# is all its runs need, and no MPI
tests/bin/train_gpt2_hooks: train_gpt2.c $(COMMON_HEADERS) | tests/bin
	$(CC) $(CFLAGS) -DTEST_HOOKS $< -o $@ $(LDLIBS)

# the learning-rate schedules, the clip and the AdamW slices against values worked out by hand
tests/bin/test_train_loop: tests/test_train_loop.c tests/harness.h $(COMMON_HEADERS) | tests/bin
	$(CC) $(CFLAGS) -I. -Wno-unused-function $< -o $@ $(LDLIBS)

test-train-cli: train_gpt2 tests/bin/train_gpt2_hooks tests/bin/test_train_loop tests/bin/mkshard
	./tests/bin/test_train_loop
	bash tests/test_train_cli.sh

test-readme:
	bash tests/test_readme.sh

# each harness with a main() that calls LLVMFuzzerTestOneInput on every file named on the command line
# (built with gcc: no libFuzzer needed)
$(FUZZ_REPLAY_BINS): tests/bin/replay_%: dev/fuzz/fuzz_%.c dev/fuzz/fuzz.h dev/fuzz/replay_main.c train_gpt2.c $(COMMON_HEADERS) | tests/bin
	$(CC) $(ROBUST_CFLAGS) $(REPLAY_UBSAN) -DFUZZING -o $@ $< dev/fuzz/replay_main.c -lm

test-fuzz-replay: $(FUZZ_REPLAY_BINS)
	@for t in $(FUZZ_TARGETS); do ./tests/bin/replay_$$t tests/fuzz_regressions/$$t/* || exit 1; done

asan: export ASAN_OPTIONS = halt_on_error=1:detect_leaks=1
asan: export UBSAN_OPTIONS = halt_on_error=1:print_stacktrace=1
asan: | tests/bin
	$(CC) -std=gnu11 -Wall -Wextra $(ASAN_FLAGS) -fopenmp train_gpt2.c -o tests/bin/train_gpt2_asan -lm
	$(CC) -std=gnu11 -Wall -Wextra $(ASAN_FLAGS) -Wno-unused-function test_gpt2.c -o tests/bin/test_gpt2_asan -lm
	for t in $(FUZZ_TARGETS); do $(CC) $(ROBUST_CFLAGS) $(ASAN_FLAGS) -DFUZZING -o tests/bin/replay_$${t}_asan \
		dev/fuzz/fuzz_$$t.c dev/fuzz/replay_main.c -lm || exit 1; done
	$(MAKE) --no-print-directory tests/bin/mkshard tests/bin/train_gpt2_hooks test-data-asan
	for t in $(FUZZ_TARGETS); do ./tests/bin/replay_$${t}_asan tests/fuzz_regressions/$$t/* || exit 1; done
	./tests/bin/test_gpt2_asan
	$(CC) -std=gnu11 -Wall -Wextra $(ASAN_FLAGS) -fopenmp -I. -Wno-unused-function tests/test_llmc.c -o tests/bin/test_llmc_asan -lm
	$(CC) -std=gnu11 -Wall -Wextra $(ASAN_FLAGS) -I. dev/llmc_convert.c -o tests/bin/llmc_convert_asan -lm
	@# one thread: a child forked while OpenMP threads run makes LeakSanitizer report false leaks
	OMP_NUM_THREADS=1 ./tests/bin/test_llmc_asan tests/bin/llmc_convert_asan
	TRAIN=tests/bin/train_gpt2_asan bash tests/test_train_cli.sh
