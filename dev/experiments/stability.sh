#!/usr/bin/env bash
# Learning-rate stability: a sweep over six peak learning rates from 5e-4 to 2e-2, at two depths,
# per norm mode, on byte-level tiny shakespeare (one seed; every run sees the same data and
# starts from the same initial weights for its shape). Read: $RESULTS/stability/summary.md, one
# row per run with its final val loss and a verdict (dev/experiments/summarize.py says what
# counts as diverged), and stability.png (final val loss against lr, per depth and mode).
# Usage: bash dev/experiments/stability.sh           (CPU preset: d4c64h4 and d12c64h4, 200 steps of 512 tokens)
#        SIZE=gpu bash dev/experiments/stability.sh  (GPU preset: d6c256h4 and d24c256h4, 500 steps of 8k tokens)
# env: SHAPES LRS B T STEPS WARMUP VAL_EVERY VAL_BATCHES SEEDS MODES JOBS RESULTS
set -euo pipefail
cd "$(dirname "$0")/../.."
source dev/experiments/common.sh
if [[ $SIZE == cpu ]]; then
    : "${SHAPES:=d4c64h4 d12c64h4}" "${B:=8}" "${T:=64}" "${STEPS:=200}" "${VAL_EVERY:=50}" "${VAL_BATCHES:=8}"
else
    : "${SHAPES:=d6c256h4 d24c256h4}" "${B:=32}" "${T:=256}" "${STEPS:=500}" "${VAL_EVERY:=50}" "${VAL_BATCHES:=16}"
fi
: "${LRS:=5e-4 1e-3 2e-3 4e-3 1e-2 2e-2}" "${WARMUP:=20}" "${SEEDS:=1}" "${MODES:=pre post siamese}"
DATA_DIR=$(shakespeare_char_dir)
begin stability
for seed in $SEEDS; do
    for shape in $SHAPES; do
        for lr in $LRS; do
            for mode in $MODES; do
                spawn run_training "${shape}_${mode}_lr${lr}_s$seed" "$mode" "$seed" "$lr" "$shape" \
                    "$DATA_DIR/shakespeare_char_train.bin" "$DATA_DIR/shakespeare_char_val.bin"
            done
        done
    done
done
wait
VAL=$DATA_DIR/shakespeare_char_val.bin
python3 dev/experiments/summarize.py "$EXP_DIR" -o "$EXP_DIR/summary.md" --unigram_from "$VAL"
python3 dev/experiments/plot_sweep.py "$EXP_DIR" -o "$EXP_DIR/stability.png" --unigram_from "$VAL"
