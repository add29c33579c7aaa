#!/usr/bin/env bash
# tests/test_recompute.sh: recompute (-r) changes the memory a trainer keeps, never its results.
#
#   bash tests/test_recompute.sh                          TRAINERS="./train_gpt2" (the default)
#   TRAINERS="./train_gpt2 tests/bin/train_gpt2cu_cpu" bash tests/test_recompute.sh
#
# For each trainer in TRAINERS and each norm mode in MODES, a small fresh model SHAPE trains STEPS
# steps of the default data with each -r level the trainer has (its -h: 0 to 2 for train_gpt2, 0 to 3
# for train_gpt2cu). The step lines (loss, norm, learning rate) and the final model and state files
# must be the same, byte for byte, and the activation memory the trainer prints must shrink from -r 0
# to the top level (and never grow from one level to the next). A trainer through the CPU execution
# layer runs the CUDA sources as they are, so this checks the CUDA trainer's recompute too (both
# precisions where both builds are named). -r 3 keeps siamese stream Y only at every y_every-th
# sublayer boundary (train_gpt2.cu, sublayer_at): Y_SHAPES add siamese models at -r 0 and 3 whose slot
# mappings differ from SHAPE's (d2: kept 0, 2, 4, segment {1} rebuilt; d1: kept 0, 2, nothing
# rebuilt; d7: y_every 5, kept 0, 5, 10 and 14 (2L not a multiple), segments of four rebuilt and a
# partial top segment). The level above the top must be refused with a one-line error. Ends with
# "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
TRAINERS=${TRAINERS:-./train_gpt2}
MODES=${MODES:-"pre post siamese"}
SHAPE=${SHAPE:-d2c64h4}
Y_SHAPES=${Y_SHAPES:-"d1c32h2 d7c32h2"}
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

# the same step lines and final files as -r 0 (the run "$1"_0) for the run "$1"_$2
same_as_r0() {
    local base="$W/$1_0" out="$W/$1_$2" f
    check "$1 -r $2: the step lines of -r 0" diff <(steps_of "$base.out") <(steps_of "$out.out")
    for f in "model_$F" "state_$F"; do check "$1 -r $2: $f byte-identical" cmp -s "$base/$f" "$out/$f"; done
}

for bin in $TRAINERS; do
    [ -x "$bin" ] || { echo "error: $bin not built" >&2; exit 1; }
    name=${bin##*/}
    top=$("$bin" -h | sed -n 's/^  -r <0\.\.\([0-9]\)>.*$/\1/p')  # the trainer's highest -r level
    [ -n "$top" ] || { echo "error: $bin -h states no -r range '-r <0..N>'" >&2; exit 1; }
    levels=$(seq 0 "$top")
    for mode in $MODES; do
        for r in $levels; do
            run "${name}_${mode}_$r" "$bin" "${RUN[@]}" -N "$mode" -r "$r" -o "$W/${name}_${mode}_$r"
            if [ "$rc" -eq 0 ] && [ ! -s "$W/${name}_${mode}_$r.err" ] && [ "$(steps_of "$W/${name}_${mode}_$r.out" | wc -l)" -eq "$STEPS" ]; then
                ok "$name $mode -r $r: $STEPS steps"
            else
                echo "       exit status $rc"
                bad "$name $mode -r $r: $STEPS steps" "$W/${name}_${mode}_$r.err"
            fi
        done
        for r in $(seq 1 "$top"); do same_as_r0 "${name}_${mode}" "$r"; done
        acts=$(for r in $levels; do acts_of "$W/${name}_${mode}_$r.out"; done | tr '\n' ' ')
        # (printed to 0.1 MiB: at this size one level's saving can round away, so >= per level, > over all)
        check "$name $mode: activations shrink with -r: ${acts% } MiB" awk -v a="$acts" -v n="$((top + 1))" \
            'BEGIN { k = split(a, v, " "); ok = k == n && v[1] + 0 > v[k] + 0; for (i = 2; i <= k; i++) ok = ok && v[i - 1] + 0 >= v[i] + 0; exit !ok }'
    done
    if [ "$top" -ge 3 ]; then
        for shape in $Y_SHAPES; do
            for r in 0 3; do
                run "${name}_${shape}_$r" "$bin" "${RUN[@]}" -e "$shape" -N siamese -r "$r" -o "$W/${name}_${shape}_$r"
                if [ "$rc" -ne 0 ] || [ "$(steps_of "$W/${name}_${shape}_$r.out" | wc -l)" -ne "$STEPS" ]; then
                    echo "       exit status $rc"
                    bad "$name $shape siamese -r $r: $STEPS steps" "$W/${name}_${shape}_$r.err"
                fi
            done
            same_as_r0 "${name}_$shape" 3
        done
    fi
    expect_error "$name -r $((top + 1))" "-r $((top + 1)) is out of range [0, $top]" "$bin" "${RUN[@]}" -r "$((top + 1))"
    expect_error "$name -r -1" "-r -1 is out of range [0, $top]" "$bin" "${RUN[@]}" -r -1
done
cli_summary test_recompute
