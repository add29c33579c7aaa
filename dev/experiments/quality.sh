#!/usr/bin/env bash
# Experiment (a), quality (issue 7): pre vs post vs siamese at equal tokens on tiny shakespeare,
# same data, schedule and initialisation recipe, several seeds. Compare the minimum and the final
# validation loss per mode in $RESULTS/quality/summary.md.
# Usage: bash dev/experiments/quality.sh       (env: TRAINER, SIZE, RESULTS, MODES, SEEDS, LR and
#        the preset knobs of dev/experiments/common.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
source dev/experiments/common.sh
MODES=${MODES:-"pre post siamese"}
preset quality
DATA_DIR=$(shakespeare_dir)
run_grid "" "$LR" "$DATA_DIR" tiny_shakespeare_train.bin tiny_shakespeare_val.bin
finish_first_seed
