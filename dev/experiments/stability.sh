#!/usr/bin/env bash
# Experiment (b), stability (issue 7): a learning-rate sweep per norm mode on tiny shakespeare.
# Records per run the final and minimum validation loss and whether it diverged (the trainer
# stopped after non-finite steps, any non-finite step, or a loss that ended above where it
# started): $RESULTS/stability/summary.md. The paper's claim to check: siamese stays stable at
# learning rates where post diverges.
# Usage: bash dev/experiments/stability.sh     (env: LRS="3e-4 1e-3 2e-3 4e-3", MODES, SEEDS, ...)
set -euo pipefail
cd "$(dirname "$0")/../.."
source dev/experiments/common.sh
MODES=${MODES:-"pre post siamese"}
# the tiny check adds an absurd rate, so that the divergence bookkeeping is exercised too
if [[ ${SIZE:-gpu} == tiny ]]; then LRS=${LRS:-"1e-3 3"}; else LRS=${LRS:-"3e-4 1e-3 2e-3 4e-3"}; fi
preset stability
DATA_DIR=$(shakespeare_dir)
patterns=()
for lr in $LRS; do
    run_grid "_lr$lr" "$lr" "$DATA_DIR" tiny_shakespeare_train.bin tiny_shakespeare_val.bin
    patterns+=("lr$lr=*_lr${lr}_s*")
done
finish "${patterns[@]}"
