#!/usr/bin/env bash
# tests/test_cu_training.sh: the CUDA trainer trains like the CPU trainer, and repeats and resumes
# itself bit for bit.
#
#   bash tests/test_cu_training.sh        GPU=./train_gpt2cu CPU=./train_gpt2 (the defaults)
#
# GPU names the CUDA trainer: a real build on a GPU (dev/gpu_check.sh), or one built through the
# CPU execution layer (make test). Per norm mode in MODES, on the default data (the arithmetic
# set, made when missing), with a small fresh model SHAPE:
#   1. train_gpt2 trains it CKPT_STEPS steps and writes a checkpoint; from that one checkpoint both
#      trainers train STEPS more steps, and every step loss of the CUDA trainer must be within a
#      relative TOL of the CPU trainer's: TOL_FP32 for an fp32 build, TOL_BF16 for a bf16 build
#      (the build says which on its "device:" line);
#   2. the CUDA trainer's run again, from the same checkpoint: the same step lines and the same
#      final model and state files, byte for byte (a second process gives the same bits);
#   3. the run stopped at half way and resumed with -y 1: the same step lines, the same samples
#      after the resume, and the same final model and state files, byte for byte;
#   4. (SCHEDULES, by default all four when REPEAT_MODES is not empty) each learning-rate schedule
#      -K: 8 steps of a fresh model, the lr of every step against its closed form (tests/cli_lib.sh),
#      and -K wsd resumed at step 6, inside its decay: the same final files, byte for byte.
# Where the CUDA trainer finds no device it prints a skip line and exits 0. CU_PRECISION=fp32|bf16
# overrides what the device line says (GPU=./train_gpt2 CU_PRECISION=fp32 checks this script itself).
# Prints the largest relative step-loss difference per mode (what TOL_BF16 was set from) and
# ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
GPU=${GPU:-./train_gpt2cu}
CPU=${CPU:-./train_gpt2}
MODES=${MODES:-"pre post siamese"}
REPEAT_MODES=${REPEAT_MODES-$MODES}  # the modes that also get checks 2 and 3 ("" for none)
SCHEDULES=${SCHEDULES-$([ -n "$REPEAT_MODES" ] && echo "cosine linear constant wsd")}  # check 4 ("" for none)
SHAPE=${SHAPE:-d2c64h4}
CKPT_STEPS=${CKPT_STEPS:-10}
STEPS=${STEPS:-20}
TOL_FP32=${TOL_FP32:-1e-5}
TOL_BF16=${TOL_BF16:-3e-3}  # bf16: largest difference measured through the layer 7.0e-4 (post), about 4.3x that
CLI_TEST_NAME=test_cu_training
source tests/cli_lib.sh

for bin in "$GPU" "$CPU"; do [ -x "$bin" ] || { echo "error: $bin not built" >&2; exit 1; }; done
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# a small batch of the default data, no validation, no sampling unless asked for below. The warmup covers
# the first half, so a run of -x HALF has the learning rates of the first half of a run of -x STEPS
HALF=$((STEPS / 2))
RUN=(-b 4 -t 32 -l 1e-3 -u "$HALF" -v 0 -s 0)

# step lines without the planned -x and the timings: "step 3 | loss 2.345678 | norm 1.2345 | lr 1.00e-03"
steps_of() { grep '^step [0-9]*/' "$1" | sed -e 's|^step \([0-9]*\)/[0-9]*|step \1|' -e 's/ | [0-9.]* ms |.*//'; }
# the largest relative difference of the step losses of two runs (a number, or "missing")
max_rel_diff() {
    paste <(steps_of "$1" | sed -n 's/.* | loss \([^ ]*\) | .*/\1/p') <(steps_of "$2" | sed -n 's/.* | loss \([^ ]*\) | .*/\1/p') |
        awk -v n="$STEPS" 'NF == 2 { d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r; k++ }
                           END { if (k != n) print "missing"; else printf "%.3g\n", m }'
}

# go NAME WHAT CMD...: runs CMD (output in $W/NAME.out, .err); it must exit 0 with nothing on stderr
go() {
    local name=$1 what=$2
    shift 2
    run "$name" "$@"
    if [ "$rc" -eq 0 ] && [ ! -s "$W/$name.err" ]; then ok "$what"; else echo "       exit status $rc"; bad "$what" "$W/$name.err"; fi
}
F=$(printf '%08d.bin' "$STEPS")
diffs=""
precision=""

for mode in $MODES; do
    echo "== $mode"
    go "ck_$mode" "$mode: checkpoint after $CKPT_STEPS CPU steps" "$CPU" -e "$SHAPE" -N "$mode" "${RUN[@]}" -x "$CKPT_STEPS" -o "$W/ck_$mode"
    CK="$W/ck_$mode/$(printf 'model_%08d.bin' "$CKPT_STEPS")"
    go "cpu_$mode" "$mode: train_gpt2 $STEPS steps from it" "$CPU" -e "$CK" "${RUN[@]}" -x "$STEPS" -o "$W/cpu_$mode"
    run "gpu_$mode" "$GPU" -e "$CK" "${RUN[@]}" -x "$STEPS" -o "$W/gpu_$mode"
    if grep -q "^error: no CUDA device" "$W/gpu_$mode.err"; then
        echo "test_cu_training: skipped: $(head -n 1 "$W/gpu_$mode.err")"
        exit 0
    fi
    check "$mode: ${GPU##*/} $STEPS steps from it (exit status $rc)" test "$rc" -eq 0 -a ! -s "$W/gpu_$mode.err"
    precision=${CU_PRECISION:-$(sed -n 's/^device: .* | precision \([a-z0-9]*\)$/\1/p' "$W/gpu_$mode.out")}
    case "$precision" in
        fp32) tol=$TOL_FP32 ;;
        bf16) tol=$TOL_BF16 ;;
        *) bad "$mode: no 'device: ... | precision fp32|bf16' line in the output of $GPU" "$W/gpu_$mode.out"; continue ;;
    esac
    diff=$(max_rel_diff "$W/gpu_$mode.out" "$W/cpu_$mode.out")
    diffs+="$mode $diff "
    check "$mode ($precision): step losses within $tol of train_gpt2's (largest relative difference $diff)" \
        awk -v d="$diff" -v t="$tol" 'BEGIN { exit !(d != "missing" && d <= t) }'

    [[ " $REPEAT_MODES " == *" $mode "* ]] || continue
    # the same run in a second process: the same bits
    go "again_$mode" "$mode: the same run again" "$GPU" -e "$CK" "${RUN[@]}" -x "$STEPS" -o "$W/again_$mode"
    check "$mode: ... the same step lines" diff <(steps_of "$W/gpu_$mode.out") <(steps_of "$W/again_$mode.out")
    for f in "model_$F" "state_$F"; do check "$mode: ... $f byte-identical" cmp -s "$W/gpu_$mode/$f" "$W/again_$mode/$f"; done

    # stopped half way and resumed, with samples half way and at the end (the sampling random state
    # is in the state file); 40 tokens with -t 32: every window length, then a sliding window
    SAMPLE=(-s "$HALF" -g 40)
    go "straight_$mode" "$mode: $STEPS steps with a sample" "$GPU" -e "$CK" "${RUN[@]}" "${SAMPLE[@]}" -x "$STEPS" -o "$W/straight_$mode"
    go "first_$mode" "$mode: the first $HALF" "$GPU" -e "$CK" "${RUN[@]}" "${SAMPLE[@]}" -x "$HALF" -o "$W/resumed_$mode"
    go "second_$mode" "$mode: resumed to $STEPS" "$GPU" -e "$CK" "${RUN[@]}" "${SAMPLE[@]}" -x "$STEPS" -o "$W/resumed_$mode" -y 1
    check "$mode: resume: the same step lines" diff <(steps_of "$W/straight_$mode.out") <(cat "$W/first_$mode.out" "$W/second_$mode.out" | steps_of /dev/stdin)
    check "$mode: two samples of 40 tokens" test "$(grep -c '^generating:' "$W/straight_$mode.out")" -eq 2
    check "$mode: resume: the same samples" diff <(sed -n '/^generating:/,/^---$/p' "$W/straight_$mode.out") \
        <(cat "$W/first_$mode.out" "$W/second_$mode.out" | sed -n '/^generating:/,/^---$/p')
    for f in "model_$F" "state_$F"; do check "$mode: resume: $f byte-identical" cmp -s "$W/straight_$mode/$f" "$W/resumed_$mode/$f"; done
done

if [ -n "$SCHEDULES" ]; then
    echo "== schedules"
    # steps 5..8 of -K wsd decay (-w 0.5 of -x 8); -n 6: a checkpoint inside the decay
    K_RUN=(-e "$SHAPE" -b 2 -t 16 -l 1e-3 -u 2 -q 0.1 -w 0.5 -v 0 -s 0 -x 8 -n 6)
    for k in $SCHEDULES; do
        go "lr_$k" "-K $k: 8 steps of a fresh $SHAPE" "$GPU" "${K_RUN[@]}" -K "$k" -o "$W/lr_$k"
        check_lr_schedule "-K $k: the lr of every step is the closed form" "$W/lr_$k/main.log" "$k" 1e-3 2 0.1 0.5 8
    done
    if [[ " $SCHEDULES " == *" wsd "* ]]; then
        mkdir -p "$W/lr_wsd_resumed"
        cp "$W/lr_wsd/model_00000006.bin" "$W/lr_wsd/state_00000006.bin" "$W/lr_wsd_resumed/"
        go lr_wsd_resume "-K wsd: resumed at step 6, inside the decay" "$GPU" "${K_RUN[@]}" -K wsd -o "$W/lr_wsd_resumed" -y 1
        check "-K wsd: resume: the same steps 7 and 8" diff <(train_lines "$W/lr_wsd/main.log" | tail -n 2) \
            <(train_lines "$W/lr_wsd_resumed/main.log")
        for f in model_00000008.bin state_00000008.bin; do
            check "-K wsd: resume: $f byte-identical" cmp -s "$W/lr_wsd/$f" "$W/lr_wsd_resumed/$f"
        done
    fi
fi

echo "test_cu_training: largest relative step-loss difference, $STEPS steps of ${GPU##*/} ($precision) against train_gpt2: $diffs"
cli_summary test_cu_training
