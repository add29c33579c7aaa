#!/usr/bin/env bash
# tests/test_eval.sh: the multiple-choice eval (-H, common/eval.h) in both trainers.
#
#   bash tests/test_eval.sh     (make test-eval; TRAIN, TRAIN_CU and TRAIN_CU_BF16 pick the binaries)
#
# On a small model trained 600 steps on the default (arithmetic) data, with its multiple-choice file
# (data/arithmetic/arithmetic_choices.bin, the default -H):
#   a. the evaluation line and main.log carry the accuracy; -H "" turns it off; -i without -H has
#      none, -i with -H has it; a -t too short for the default file gives a note, not an error
#   b. train_gpt2 and the CUDA trainer through the CPU execution layer (FP32) give the same
#      accuracy on the same checkpoint and file; the BF16 build's is printed beside them
#   c. 2 and 3 ranks (mpirun, where the trainer has MPI) give the count of one process
#   d. bad input, in both trainers: a missing file, a truncated one, wrong magic, wrong version,
#      a token id >= the vocabulary, an example longer than -t: one error line, exit status 1,
#      no output folder
#   e. where python3 and numpy are, dev/data/data_common.py's writer gives the C writer's bytes
# KEEP=1 keeps the work folder. Closes with "N passed, N failed" (exit 1 when anything failed).
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-./train_gpt2}
TRAIN_CU=${TRAIN_CU:-tests/bin/train_gpt2cu_fp32_cpu}
TRAIN_CU_BF16=${TRAIN_CU_BF16:-tests/bin/train_gpt2cu_cpu}
CLI_TEST_NAME=test_eval
source tests/cli_lib.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
unset TRAIN_GPT2_NAN_STEPS
[ -x "$TRAIN" ] || { echo "error: $TRAIN not built" >&2; exit 1; }
CHOICES=data/arithmetic/arithmetic_choices.bin

# the "eval acc A (N/M)" of the first evaluation line of a run's output
acc_of() { sed -n 's/.*eval acc \([0-9.]* ([0-9]*\/[0-9]*)\).*/\1/p' "$1" | head -n 1; }

echo "== a. the accuracy on the evaluation line and in main.log"
expect_success "checkpoint: d2c32, 600 steps" "$TRAIN" -e d2c32 -x 600 -l 1e-2 -v 0 -s 0 -o "$W/ck"
CK="$W/ck/model_00000600.bin"
[ -f "$CHOICES" ] || { bad "$CHOICES was not made with the data"; cli_summary test_eval; exit 1; }
# the evaluation at step 0, one step with lr 0, the last evaluation; -t 16 (the eval's rows are 11 tokens)
EV=(-e "$CK" -x 1 -l 0 -v 1 -m 1 -k 0 -s 0 -b 32 -t 16)
expect_success "train_gpt2 evaluates the checkpoint" "$TRAIN" "${EV[@]}" -o "$W/cpu"
cpu=$(acc_of "$W/train_gpt2_evaluates_the_checkpoint.out")
check "the evaluation line has 'eval acc A (N/128)': $cpu" grep -Eq "^val loss [0-9.]+ \| eval acc [01]\.[0-9]{4} \([0-9]+/128\)$" \
    "$W/train_gpt2_evaluates_the_checkpoint.out"
check "the start-up line names the file" grep -q "^multiple-choice eval: $CHOICES, 128 examples, 512 completions" \
    "$W/train_gpt2_evaluates_the_checkpoint.out"
check "main.log: step=0 and step=1 with eval_acc" test "$(grep -Ec "^step=[01] val_loss=[0-9.]+ eval_acc=[01]\.[0-9]{4}$" "$W/cpu/main.log")" = 2
# the accuracy of a trained model is above chance (0.25) and short of all right: the scores mean
# something (the exact figure moves with the floating-point rounding of the training run)
check "the trained checkpoint's accuracy $cpu is between 0.30 and 0.98" awk -v a="${cpu%% *}" 'BEGIN { exit !(a > 0.30 && a < 0.98) }'
run no_eval "$TRAIN" "${EV[@]}" -H ""
check "-H \"\": no eval accuracy" test "$rc" = 0 -a -z "$(acc_of "$W/no_eval.out")"
# (./data/...: the same files, but not the default -i)
run data_i "$TRAIN" "${EV[@]}" -i ./data/arithmetic/arithmetic_train.bin -j data/arithmetic/arithmetic_val.bin
check "-i without -H: no eval accuracy" test "$rc" = 0 -a -z "$(acc_of "$W/data_i.out")"
run data_i_h "$TRAIN" "${EV[@]}" -i ./data/arithmetic/arithmetic_train.bin -j data/arithmetic/arithmetic_val.bin -H "$CHOICES"
check "-i with -H: the same accuracy $(acc_of "$W/data_i_h.out")" test "$rc" = 0 -a "$(acc_of "$W/data_i_h.out")" = "$cpu"
run short_t "$TRAIN" "${EV[@]}" -t 10
check "-t 10 with the default file: a note, no eval" test "$rc" = 0 -a -z "$(acc_of "$W/short_t.out")"
check "... the note says what -t it needs" grep -q "^note: no multiple-choice eval: $CHOICES needs -t >= 11$" "$W/short_t.out"
run batch_3 "$TRAIN" "${EV[@]}" -b 3
check "-b 3 (examples straddle batches): the same accuracy $(acc_of "$W/batch_3.out")" test "$rc" = 0 -a "$(acc_of "$W/batch_3.out")" = "$cpu"

echo "== b. the CUDA trainer through the CPU execution layer"
if [ -x "$TRAIN_CU" ]; then
    expect_success "${TRAIN_CU##*/} evaluates the checkpoint" "$TRAIN_CU" "${EV[@]}" -o "$W/cu"
    cu=$(acc_of "$W/${TRAIN_CU##*/}_evaluates_the_checkpoint.out")
    check "FP32: eval acc $cu, train_gpt2's $cpu" test -n "$cu" -a "$cu" = "$cpu"
    check "FP32: main.log has the same step=0 eval_acc" test "$(grep '^step=0 ' "$W/cu/main.log" | sed 's/.*eval_acc=//')" = \
        "$(grep '^step=0 ' "$W/cpu/main.log" | sed 's/.*eval_acc=//')"
else
    echo "skipped: $TRAIN_CU not built"
fi
if [ -x "$TRAIN_CU_BF16" ]; then
    run cu_bf16 "$TRAIN_CU_BF16" "${EV[@]}"
    echo "       BF16 build: eval acc $(acc_of "$W/cu_bf16.out") (train_gpt2: $cpu; not compared: bf16 rounding)"
    check "BF16: the run evaluates" test "$rc" = 0 -a -n "$(acc_of "$W/cu_bf16.out")"
fi

echo "== c. several ranks"
if command -v mpirun > /dev/null 2>&1 && ldd "$TRAIN" 2>/dev/null | grep -q libmpi; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    for n in 2 3; do
        run "ranks_$n" env OMP_NUM_THREADS=1 mpirun -q --oversubscribe --bind-to none -np "$n" "$TRAIN" "${EV[@]}" -b 16
        check "$n ranks: eval acc $(acc_of "$W/ranks_$n.out"), one process's $cpu" test "$rc" = 0 -a "$(acc_of "$W/ranks_$n.out")" = "$cpu"
    done
else
    echo "skipped: no mpirun, or $TRAIN without MPI"
fi

echo "== d. bad input"
cp "$CHOICES" "$W/magic.bin" && put_int "$W/magic.bin" 0 20240520
cp "$CHOICES" "$W/version.bin" && put_int "$W/version.bin" 1 2
head -c 5000 "$CHOICES" > "$W/truncated.bin"
cp "$CHOICES" "$W/token.bin"  # the first context token of example 1 (example 0 has 6 + 7 + 4 * 5 values) becomes 300
printf '\054\001' | dd of="$W/token.bin" bs=1 seek=$((1024 + 2 * (33 + 6))) conv=notrunc status=none
for bin in "$TRAIN" "$TRAIN_CU"; do
    [ -x "$bin" ] || continue
    b=${bin##*/}
    expect_error "$b: missing file" "cannot open $W/none.bin" "$bin" "${EV[@]}" -H "$W/none.bin" -o "$W/out_$b"
    expect_error "$b: truncated" "is truncated" "$bin" "${EV[@]}" -H "$W/truncated.bin" -o "$W/out_$b"
    expect_error "$b: wrong magic" "bad magic 20240520" "$bin" "${EV[@]}" -H "$W/magic.bin" -o "$W/out_$b"
    expect_error "$b: wrong version" "version 2, expected 1" "$bin" "${EV[@]}" -H "$W/version.bin" -o "$W/out_$b"
    expect_error "$b: token id >= vocabulary" "example 1: token id 300 is not below the vocabulary size 257" \
        "$bin" "${EV[@]}" -H "$W/token.bin" -o "$W/out_$b"
    expect_error "$b: example longer than -t" "context and completion are 11 tokens, more than -t 10" \
        "$bin" "${EV[@]}" -t 10 -H "$CHOICES" -o "$W/out_$b"
    check "$b: no output folder after them" test ! -e "$W/out_$b"
done

echo "== e. the Python writer"
if command -v python3 > /dev/null 2>&1 && python3 -c "import numpy" 2> /dev/null; then
    # the arithmetic file's examples, read back with the format's description, written again by Python
    python3 - "$CHOICES" "$W/python.bin" <<'EOF'
import sys
import numpy as np
sys.path.insert(0, "dev/data")
from data_common import write_evalfile
data = open(sys.argv[1], "rb").read()
n = int(np.frombuffer(data[:1024], dtype="<i4")[2])
s = np.frombuffer(data[1024:], dtype="<u2").astype(int)
examples, p = [], 0
for i in range(n):
    label, k, p = s[p + 3], s[p + 4], p + 5
    context = list(s[p + 1:p + 1 + s[p]])
    p += 1 + s[p]
    completions = []
    for _ in range(k):
        completions.append(list(s[p + 1:p + 1 + s[p]]))
        p += 1 + s[p]
    examples.append((context, completions, int(label)))
write_evalfile(sys.argv[2], examples)
EOF
    check "dev/data/data_common.py write_evalfile: the C writer's bytes" cmp "$CHOICES" "$W/python.bin"
else
    echo "skipped: python3 with numpy not found"
fi

cli_summary test_eval
