#!/usr/bin/env bash
# Mechanism: what the trained models of dev/experiments/quality.sh (the final models it keeps, of
# every seed) do with their residual streams, measured by dev/experiments/mechanism.c on
# validation batches: per sublayer the update size ||z|| against the stream it is added to
# (pre, post, and both streams of siamese), and for siamese the two terms of the final merge
# LN(x; lnfx) + LN(y; lnfy): their norms, and the validation loss with either one ablated.
# Read: $RESULTS/mechanism/<mode>_s<seed>.txt, summary.md and mechanism.png.
# Usage: bash dev/experiments/mechanism.sh    (after quality.sh; SIZE=gpu reads the GPU preset's
#        models the same way: the measurement itself runs on the CPU, a few val batches)
# env: SEEDS (default 1 2 3; seeds without a kept model are skipped) B T BATCHES RESULTS
set -euo pipefail
cd "$(dirname "$0")/../.."
source dev/experiments/common.sh
: "${SEEDS:=1 2 3}" "${B:=8}" "${T:=128}" "${BATCHES:=16}"
DATA_DIR=$(shakespeare_char_dir)
QUALITY=$RESULTS/quality
EXP_DIR=$RESULTS/mechanism
mkdir -p "$EXP_DIR"
make -s dev/experiments/mechanism
files=()
for seed in $SEEDS; do
    for mode in pre post siamese; do
        model=$(ls "$QUALITY/${mode}_s$seed"/model_*.bin 2>/dev/null | tail -n 1 || true)
        if [[ -z $model ]]; then echo "note: no final model in $QUALITY/${mode}_s$seed (run quality.sh first)"; continue; fi
        out="$EXP_DIR/${mode}_s$seed.txt"
        ./dev/experiments/mechanism "$model" "$DATA_DIR/shakespeare_char_val.bin" -b "$B" -t "$T" -m "$BATCHES" > "$out"
        echo "$mode seed $seed: $(grep '^model=' "$out")"
        files+=("$out")
    done
done
[[ ${#files[@]} -gt 0 ]] || { echo "error: no models measured" >&2; exit 1; }
python3 dev/experiments/plot_mechanism.py "${files[@]}" -o "$EXP_DIR/mechanism.png" --table "$EXP_DIR/summary.md"
