#!/usr/bin/env bash
# Quality at equal tokens: Pre-Norm vs Post-Norm vs SiameseNorm, a deep and narrow model on
# byte-level tiny shakespeare, the same data, schedule, token budget and initialisation recipe,
# three seeds (each seed: other initial weights and another order of the training batches).
# Read: $RESULTS/quality/summary.md (final and best val loss per run, mean ± std per mode) and
# quality.png (the curves of the first seed). The final models are kept for
# dev/experiments/mechanism.sh (KEEP_CHECKPOINTS="none" deletes them).
# Usage: bash dev/experiments/quality.sh           (CPU preset: d12c64h4, 500 steps of 1024 tokens)
#        SIZE=gpu bash dev/experiments/quality.sh  (GPU preset: d24c256h4, 1000 steps of 8k tokens)
# env: SHAPE B T STEPS LR WARMUP VAL_EVERY VAL_BATCHES SEEDS MODES JOBS RESULTS
set -euo pipefail
cd "$(dirname "$0")/../.."
source dev/experiments/common.sh
if [[ $SIZE == cpu ]]; then
    : "${SHAPE:=d12c64h4}" "${B:=8}" "${T:=128}" "${STEPS:=500}" "${VAL_EVERY:=50}" "${VAL_BATCHES:=8}"
else
    : "${SHAPE:=d24c256h4}" "${B:=32}" "${T:=256}" "${STEPS:=1000}" "${VAL_EVERY:=50}" "${VAL_BATCHES:=16}"
fi
: "${LR:=1e-3}" "${WARMUP:=50}" "${SEEDS:=1 2 3}" "${MODES:=pre post siamese}"
DATA_DIR=$(shakespeare_char_dir)
begin quality
first=${SEEDS%% *}
KEEP_CHECKPOINTS=${KEEP_CHECKPOINTS:-"*"}  # the final models, for dev/experiments/mechanism.sh
for seed in $SEEDS; do
    for mode in $MODES; do
        spawn run_training "${mode}_s$seed" "$mode" "$seed" "$LR" "$SHAPE" \
            "$DATA_DIR/shakespeare_char_train.bin" "$DATA_DIR/shakespeare_char_val.bin"
    done
done
wait
python3 dev/experiments/summarize.py "$EXP_DIR" -o "$EXP_DIR/summary.md" --unigram_from "$DATA_DIR/shakespeare_char_val.bin"
runs=()
for mode in $MODES; do runs+=("$mode=$EXP_DIR/${mode}_s$first"); done
plot "$EXP_DIR/quality.png" "quality: $SHAPE, byte-level tiny shakespeare, warmup $WARMUP, seed $first" --smooth 20 --from_step 20 "${runs[@]}"
