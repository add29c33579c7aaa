#!/usr/bin/env bash
# tests/test_train_cu_cli.sh: train_gpt2cu reads its flags, data and checkpoint before it looks for
# a GPU, so -h and every input error read the same with or without one.
#
#   bash tests/test_train_cu_cli.sh       (make test runs it where nvcc builds train_gpt2cu;
#                                          TRAIN=... picks another build, CPU=... the CPU trainer)
#
# It checks that
#   - `train_gpt2cu -h` exits 0 and prints the same help as `train_gpt2 -h` (the flags are shared) but for
#     -r, whose levels end at 3 here and at 2 there (each help says so; each trainer refuses the next);
#   - every flag error of tests/cli_flags.sh, a bad checkpoint and a token out of the vocabulary end
#     with exactly one "error: ..." line and exit status 1, as they do for train_gpt2; so does a
#     head size above 128, which train_gpt2 takes and attention here does not;
#   - a run that fails to start (a missing checkpoint; without a GPU, good input too) creates no
#     output folder: -o is created and locked only once the run can start (train_gpt2 likewise);
#   - a run with good input: without a GPU, one "error: no CUDA device ..." line, exit 1, and no
#     output folder; where a device exists, it trains 2 steps and writes its checkpoint.
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-./train_gpt2cu}
CPU=${CPU:-./train_gpt2}
MKSHARD=${MKSHARD:-tests/bin/mkshard}
MODEL=data/test/siamese/model.bin
CLI_TEST_NAME=test_train_cu_cli
source tests/cli_lib.sh

for bin in "$TRAIN" "$CPU" "$MKSHARD"; do [ -x "$bin" ] || { echo "error: $bin not built" >&2; exit 1; }; done
mkdir -p "$W/data"
"$MKSHARD" "$W/data/train_000.bin" 120 200 1
T=(-i "$W/data/train_000.bin" -j "" -b 2 -t 8 -x 2 -s 0)

# -h: the shared help, word for word but for the program name and -r (levels 0 to 3 here, 0 to 2 in train_gpt2)
# the help without the -r entry (its line and the indented lines under it), the program name as PROGRAM
help_but_r() { sed "s|$1|PROGRAM|" | awk '/^  -r / { skip = 1; next } skip && /^   / { next } { skip = 0; print }'; }
run help "$TRAIN" -h
"$CPU" -h 2> /dev/null | help_but_r "$CPU" > "$W/help_cpu"
help_but_r "$TRAIN" < "$W/help.out" > "$W/help_gpu"
if [ "$rc" -eq 0 ] && [ ! -s "$W/help.err" ] && grep -q -- "-x <int>" "$W/help.out" && cmp -s "$W/help_cpu" "$W/help_gpu"; then
    ok "-h: exit 0, the same help as $CPU -h but for -r"
else
    echo "       exit status $rc"
    bad "-h" "$W/help.err"
fi
check "-h: states -r <0..3>" grep -q -- "^  -r <0\.\.3> " "$W/help.out"
check "$CPU -h: states -r <0..2>" grep -q -- "^  -r <0\.\.2> " <("$CPU" -h)

source tests/cli_flags.sh
expect_error "flag: -r 4 (levels 0 to 3)" "-r 4 is out of range [0, 3]" "$TRAIN" -e "$MODEL" "${T[@]}" -r 4
expect_error "flag: -r -1" "-r -1 is out of range [0, 3]" "$TRAIN" -e "$MODEL" "${T[@]}" -r -1
# a shape the CPU trainer takes but this one does not: attention's head sizes end at 128 (attention.cuh)
expect_error "shape: -e d1c256h1 (head size 256)" "head size 256 is not supported: attention runs head sizes 1 to 128" \
    "$TRAIN" -e d1c256h1 "${T[@]}"

# input errors found on the host: the checkpoint's header and the data against its vocabulary
cp "$MODEL" "$W/magic.bin"
put_int "$W/magic.bin" 0 12345
expect_error "checkpoint wrong magic" "not a model checkpoint (bad magic 12345)" "$TRAIN" -e "$W/magic.bin" "${T[@]}"
expect_error "checkpoint missing" "cannot open $W/none.bin" "$TRAIN" -e "$W/none.bin" "${T[@]}" -o "$W/failed/cu"
check "checkpoint missing: no output folder created" test ! -e "$W/failed"
expect_error "train_gpt2, checkpoint missing" "cannot open $W/none.bin" "$CPU" -e "$W/none.bin" "${T[@]}" -o "$W/failed/cpu"
check "train_gpt2, checkpoint missing: no output folder created" test ! -e "$W/failed"
"$MKSHARD" "$W/data/oov.bin" 100 300 4
expect_error "data: token id out of the model's vocabulary" "outside the vocabulary of 200 tokens" "$TRAIN" -e "$MODEL" "${T[@]}" -i "$W/data/oov.bin"

# good input: without a GPU the one error says so, and there is no output folder (nor its lock)
run good "$TRAIN" -e "$MODEL" "${T[@]}" -o "$W/good"
if grep -q "^error: no CUDA device" "$W/good.err"; then
    expect_error "good input without a GPU" "no CUDA device" "$TRAIN" -e "$MODEL" "${T[@]}" -o "$W/nogpu"
    check "good input without a GPU: no output folder created" test ! -e "$W/nogpu"
else
    check "good input: 2 steps (exit status $rc)" test "$rc" -eq 0
    check "good input: the step-2 checkpoint" test -f "$W/good/model_00000002.bin"
fi

cli_summary test_train_cu_cli
