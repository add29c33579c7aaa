#!/usr/bin/env bash
# tests/test_recompute.sh: recompute (-r) changes the memory a trainer keeps, never its results.
#
#   bash tests/test_recompute.sh                          TRAINERS="./train_gpt2" (the default)
#   TRAINERS="./train_gpt2 tests/bin/train_gpt2cu_cpu" bash tests/test_recompute.sh
#
# For each trainer in TRAINERS and each norm mode in MODES, a small fresh model SHAPE trains STEPS
# steps of the default data with -r 0, 1 and 2. The step lines (loss, norm, learning rate) and the
# final model and state files must be the same, byte for byte, and the activation memory the
# trainer prints must shrink from -r 0 to 2 (and never grow from one level to the next). A trainer
# through the CPU execution layer runs the CUDA sources as they are, so this checks the CUDA
# trainer's recompute too (both precisions where both builds are named). -r 3 must be refused with
# a one-line error. Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
TRAINERS=${TRAINERS:-./train_gpt2}
MODES=${MODES:-"pre post siamese"}
SHAPE=${SHAPE:-d2c64h4}
STEPS=${STEPS:-4}
CLI_TEST_NAME=test_recompute
source tests/cli_lib.sh

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
RUN=(-e "$SHAPE" -b 4 -t 32 -l 1e-3 -u 2 -v 0 -s 0 -x "$STEPS")
F=$(printf '%08d.bin' "$STEPS")
# step lines without the timings: "step 3/4 | loss 2.345678 | norm 1.2345 | lr 1.00e-03"
steps_of() { grep '^step [0-9]*/' "$1" | sed -e 's/ | [0-9.]* ms |.*//'; }
# the MiB of activations on the memory line ("..., 1.5 MiB activations ...")
acts_of() { sed -n 's/^.*memory: .*, \([0-9.]*\) MiB activations.*$/\1/p' "$1"; }

for bin in $TRAINERS; do
    [ -x "$bin" ] || { echo "error: $bin not built" >&2; exit 1; }
    name=${bin##*/}
    for mode in $MODES; do
        for r in 0 1 2; do
            run "${name}_${mode}_$r" "$bin" "${RUN[@]}" -N "$mode" -r "$r" -o "$W/${name}_${mode}_$r"
            if [ "$rc" -eq 0 ] && [ ! -s "$W/${name}_${mode}_$r.err" ] && [ "$(steps_of "$W/${name}_${mode}_$r.out" | wc -l)" -eq "$STEPS" ]; then
                ok "$name $mode -r $r: $STEPS steps"
            else
                echo "       exit status $rc"
                bad "$name $mode -r $r: $STEPS steps" "$W/${name}_${mode}_$r.err"
            fi
        done
        base="$W/${name}_${mode}_0"
        for r in 1 2; do
            out="$W/${name}_${mode}_$r"
            check "$name $mode -r $r: the step lines of -r 0" diff <(steps_of "$base.out") <(steps_of "$out.out")
            for f in "model_$F" "state_$F"; do check "$name $mode -r $r: $f byte-identical" cmp -s "$base/$f" "$out/$f"; done
        done
        a0=$(acts_of "$base.out") a1=$(acts_of "$W/${name}_${mode}_1.out") a2=$(acts_of "$W/${name}_${mode}_2.out")
        # (printed to 0.1 MiB: at this size one level's saving can round away, so >= per level, > over both)
        check "$name $mode: activations shrink with -r: $a0 >= $a1 >= $a2 MiB, $a0 > $a2" \
            awk -v a="$a0" -v b="$a1" -v c="$a2" 'BEGIN { exit !(a != "" && b != "" && c != "" && a + 0 >= b + 0 && b + 0 >= c + 0 && a + 0 > c + 0) }'
    done
    expect_error "$name -r 3" "-r 3 is out of range [0, 2]" "$bin" "${RUN[@]}" -r 3
done
cli_summary test_recompute
