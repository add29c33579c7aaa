#!/usr/bin/env bash
# dev/cpu/bench_small.sh: tokens per second of the small models the experiments in dev/experiments
# train on the CPU (4 to 12 layers of 64 channels, byte-level data, V = 257), this trainer against
# PyTorch (dev/train_gpt2.py, fp32, eager) on the same model and batch, on THREADS threads (default
# 1: the experiments run one thread per run, two runs at a time).
#
#     bash dev/cpu/bench_small.sh          (env: THREADS=1, STEPS=21, MODE=siamese, CASES="...")
#
# A case is SHAPE:B:T; the default cases are the CPU presets of the experiments (stability.sh
# d4c64h4 and d12c64h4 at 8 x 64, quality.sh d12c64h4 at 8 x 128, arithmetic.sh d6c64h4 at 16 x 48).
# Each figure is CPU time per step: the CPU time (user + system, /usr/bin/time) of a run of STEPS
# steps less that of a run of 1 step, over STEPS - 1, divided by THREADS, so that start-up (the
# Python import of torch, the model's initialization) is left out and a machine that others keep
# busy changes it little; the wall-clock median of steps 2..STEPS of the longer run is printed
# beside it. The data are random byte-level tokens with the 257-token tokenizer beside them, so
# both trainers build a V = 257 model.
set -euo pipefail
cd "$(dirname "$0")/../.."
THREADS=${THREADS:-1}
STEPS=${STEPS:-21}
MODE=${MODE:-siamese}
CASES=${CASES:-"d4c64h4:8:64 d12c64h4:8:64 d12c64h4:8:128 d6c64h4:16:48"}
WORK=$(mktemp -d /tmp/bench_small.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

make -s train_gpt2
HAVE_TORCH=0
python3 -c "import torch" 2>/dev/null && HAVE_TORCH=1

# random byte-level tokens, and the byte-level tokenizer (V = 257) the trainers read beside them
python3 - "$WORK" <<'EOF'
import os, random, struct, sys
sys.path.insert(0, "dev/data")
from data_common import ByteEncoding, write_tokenizer
random.seed(0)
n = 300_000
with open(os.path.join(sys.argv[1], "train.bin"), "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *(random.randrange(257) for _ in range(n))))
write_tokenizer(os.path.join(sys.argv[1], "tokenizer.bin"), ByteEncoding())
EOF

# CPU ms per step, and the wall-clock median ms of steps 2..N: cpu_ms COMMAND... (the command takes -x)
cpu_ms() {
    /usr/bin/time -f '%U %S' -o "$WORK/t1" "$@" -x 1 > /dev/null
    /usr/bin/time -f '%U %S' -o "$WORK/tn" "$@" -x "$STEPS" > "$WORK/out"
    local wall
    wall=$(grep -E '^step [0-9]+/' "$WORK/out" | sed -n '2,$p' | sed -E 's/.*\| ([0-9.]+) ms \|.*/\1/' | sort -g |
        awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    awk -v a="$(awk '{print $1 + $2}' "$WORK/tn")" -v o="$(awk '{print $1 + $2}' "$WORK/t1")" -v n="$STEPS" \
        -v t="$THREADS" -v w="$wall" 'BEGIN {printf "%.2f %.2f", (a - o) / (n - 1) / t * 1000, w}'
}

echo "small models: $MODE, $THREADS thread(s), CPU time per step over $STEPS - 1 steps (wall-clock median beside)"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; commit" \
    "$(git rev-parse --short HEAD); load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-16s %6s | %12s %10s %9s | %12s %10s %9s | %s\n" case tokens "ours CPU ms" "wall ms" "tok/s" \
    "torch CPU ms" "wall ms" "tok/s" "ours/torch (time)"
for c in $CASES; do
    IFS=: read -r shape B T <<< "$c"
    read -r ours ours_wall <<< "$(cpu_ms env OMP_NUM_THREADS="$THREADS" ./train_gpt2 -i "$WORK/train.bin" -j "" \
        -e "$shape" -N "$MODE" -b "$B" -t "$T" -v 0 -s 0)"
    tok=$((B * T))
    if [[ $HAVE_TORCH == 1 ]]; then
        read -r torch torch_wall <<< "$(cpu_ms python3 dev/train_gpt2.py -i "$WORK/train.bin" -e "$shape" -N "$MODE" \
            -b "$B" -t "$T" -v 0 --threads "$THREADS" --device cpu)"
    else
        torch=nan torch_wall=nan
    fi
    awk -v c="$c" -v tok="$tok" -v o="$ours" -v ow="$ours_wall" -v p="$torch" -v pw="$torch_wall" 'BEGIN {
        printf "%-16s %6d | %12.2f %10.2f %9.0f | %12.2f %10.2f %9.0f | %.3f\n", c, tok, o, ow, tok / o * 1000, p, pw,
               tok / p * 1000, o / p }'
done
[[ $HAVE_TORCH == 1 ]] || echo "pytorch: not installed (pip install torch) - its columns are nan"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
