#!/usr/bin/env bash
# tests/test_cross_checkpoint.sh: checkpoints move between the CPU and the GPU trainer.
#
# For each norm mode it
#   1. trains a small fresh model (d2, same seed) for a few steps with train_gpt2 (CPU, fp32) and
#      with train_gpt2cu (GPU, bf16 by default), each writing its final checkpoint;
#   2. evaluates each checkpoint with BOTH trainers (-e <checkpoint> -l 0: the validation loss at
#      step 0, before any update);
#   3. checks that the two trainers agree on the val loss of the same checkpoint within the bf16
#      tolerance (relative 2e-2; pass TOL=... to change it, e.g. TOL=1e-4 with PRECISION=FP32), and
#      that the fresh models agree at step 0 (fresh initialisation happens on the host with
#      common/params.h, so both trainers start from the same weights).
# It needs a GPU; without one (or without nvcc) it prints a skip line and exits 0.
#
# Usage: tests/test_cross_checkpoint.sh            (from the repository root or anywhere)
#        PRECISION=FP32 TOL=1e-4 tests/test_cross_checkpoint.sh
#        GPU_TRAIN=path/to/train_gpt2cu tests/test_cross_checkpoint.sh   a CUDA trainer built
#                 elsewhere (e.g. through the CPU execution layer), used as it is
# SHAPE (default d2) is the fresh model; DATA=arith trains on the default arithmetic data (V 257)
# instead of the synthetic GPT-2-vocabulary shard, which makes every step much cheaper.
set -euo pipefail
cd "$(dirname "$0")/.."

PRECISION=${PRECISION:-BF16}
TOL=${TOL:-2e-2}
STEPS=${STEPS:-6}
SHAPE=${SHAPE:-d2}
DATA=${DATA:-synthetic}
GPU_TRAIN=${GPU_TRAIN:-}
if [ -z "$GPU_TRAIN" ]; then
    if ! command -v nvcc > /dev/null 2>&1; then
        echo "test_cross_checkpoint: skipped: nvcc not found"
        exit 0
    fi
    # (no "| grep -q" here: under pipefail, grep -q leaving early could fail the pipeline with SIGPIPE)
    if ! command -v nvidia-smi > /dev/null 2>&1 || [[ "$(nvidia-smi -L 2> /dev/null || true)" != *GPU* ]]; then
        echo "test_cross_checkpoint: skipped: no CUDA device (nvidia-smi lists none)"
        exit 0
    fi
    make --no-print-directory train_gpt2 train_gpt2cu PRECISION="$PRECISION" > /dev/null
    GPU_TRAIN=./train_gpt2cu
else
    make --no-print-directory train_gpt2 > /dev/null
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/cross_checkpoint.XXXXXX")
trap 'rm -rf "$work"' EXIT

# a synthetic shard with structure a small model can pick up (GPT-2 vocabulary, ids < 50257)
# (the Python standard library only: a bare GPU machine may have no numpy)
python3 - "$work/shard.bin" <<'EOF'
import random
import struct
import sys
rng = random.Random(0)
words = [[rng.randrange(50257) for _ in range(6)] for _ in range(64)]  # 64 "words" of 6 tokens
tokens = [t for _ in range(4000) for t in words[rng.randrange(64)]]    # a random text of words
header = [20240520, 1, len(tokens)] + [0] * 253                        # the shard header (doc/formats.md)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack("<%dH" % len(tokens), *tokens))
EOF

common=(-i "$work/shard.bin" -j "$work/shard.bin" -b 4 -t 64 -v 1000 -m 4 -s 0 -c 0.1 -u 2)
if [ "$DATA" = arith ]; then  # (the trainers make the default data when it is missing)
    common=(-i data/arithmetic/arithmetic_train.bin -j data/arithmetic/arithmetic_val.bin -k 0 -b 4 -t 64 -v 1000 -m 4 -s 0 -c 0.1 -u 2)
fi

# prints the first "val loss X" of a run (the step-0 evaluation). awk reads to the end: an awk
# that left at the first match (gawk's `exit` does) would kill the still-running trainer with
# SIGPIPE on its next line, and under pipefail that ends this script (silently, through set -e).
val_loss() { "$@" | awk '/^val loss/ && !seen { print $3; seen = 1 }'; }

# compare NAME A B: |A - B| / |B| <= TOL
failures=0
compare() {
    local ok
    ok=$(awk -v a="$2" -v b="$3" -v tol="$TOL" 'BEGIN { d = a - b; if (d < 0) d = -d; if (b < 0) b = -b; print (d <= tol * b) ? "ok" : "FAIL" }')
    printf '  %-44s %s vs %s  %s\n' "$1" "$2" "$3" "$ok"
    if [ "$ok" != ok ]; then failures=$((failures + 1)); fi
}

for mode in pre post siamese; do
    echo "[$mode]"
    ./train_gpt2 "${common[@]}" -e "$SHAPE" -N "$mode" -x "$STEPS" -o "$work/cpu_$mode" > "$work/cpu_$mode.txt"
    if ! "$GPU_TRAIN" "${common[@]}" -e "$SHAPE" -N "$mode" -x "$STEPS" -o "$work/gpu_$mode" > "$work/gpu_$mode.txt" 2> "$work/gpu_$mode.err"; then
        if grep -q "no CUDA device" "$work/gpu_$mode.err"; then echo "test_cross_checkpoint: skipped: $(cat "$work/gpu_$mode.err")"; exit 0; fi
        cat "$work/gpu_$mode.err"; exit 1
    fi
    cpu_fresh=$(awk '/^val loss/ { print $3; exit }' "$work/cpu_$mode.txt")
    gpu_fresh=$(awk '/^val loss/ { print $3; exit }' "$work/gpu_$mode.txt")
    compare "fresh model, step 0 (gpu vs cpu)" "$gpu_fresh" "$cpu_fresh"
    ckpt=$(printf 'model_%08d.bin' "$STEPS")
    for who in cpu gpu; do
        file="$work/${who}_$mode/$ckpt"
        [ -f "$file" ] || { echo "  missing $file"; failures=$((failures + 1)); continue; }
        on_cpu=$(val_loss ./train_gpt2 "${common[@]}" -e "$file" -x 1 -l 0 -v 1)
        on_gpu=$(val_loss "$GPU_TRAIN" "${common[@]}" -e "$file" -x 1 -l 0 -v 1)
        compare "$who checkpoint: val loss on gpu vs cpu" "$on_gpu" "$on_cpu"
    done
    # the two runs trained the same fresh model on the same data: their checkpoints should be close too
    a=$(val_loss ./train_gpt2 "${common[@]}" -e "$work/gpu_$mode/$ckpt" -x 1 -l 0 -v 1)
    b=$(val_loss ./train_gpt2 "${common[@]}" -e "$work/cpu_$mode/$ckpt" -x 1 -l 0 -v 1)
    compare "after $STEPS steps: gpu-trained vs cpu-trained" "$a" "$b"
done

if [ "$failures" -eq 0 ]; then
    echo "test_cross_checkpoint: all checks passed"
else
    echo "test_cross_checkpoint: $failures checks FAILED"
    exit 1
fi
