#!/usr/bin/env bash
# CPU speed benchmark: ms per training step of a fresh d12 (GPT-2 124M) model at
# B=4, T=64 for each norm mode, with THREADS OpenMP threads (default 2), and PyTorch's CPU time for
# the same model and batch (dev/train_gpt2.py, fp32, eager) when torch is installed. Prints the
# median step time (the first step, which warms caches, is left out) and the ratios:
#   pre / 3.0 s        llm.c's reference CPU trainer takes about 3.0 s/step here (a reference
#                      figure, not measured by this script; goal <= 0.6)
#   siamese / pre      the price of the second stream (goal <= 1.08)
#   ours / PyTorch     per mode (goal < 1)
# Usage: dev/bench_cpu.sh [steps]      (env: THREADS=2, MODES="pre post siamese", DEPTH=d12)
#
# BASELINE=path/to/an/older/train_gpt2 instead times that binary against this one, alternately
# (baseline, ours, baseline, ours, ... ROUNDS=3 times per mode), and prints ours / baseline per
# mode from the medians of all their steps: on a loaded machine the two see the same load, so the
# ratio is the figure to compare (PyTorch is skipped). For example, against commit REV:
#   git worktree add /tmp/old REV && make -C /tmp/old train_gpt2 && BASELINE=/tmp/old/train_gpt2 bash dev/bench_cpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-6}
THREADS=${THREADS:-2}
MODES=${MODES:-"pre post siamese"}
DEPTH=${DEPTH:-d12}
WORK=$(mktemp -d /tmp/bench_cpu.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

make -s train_gpt2

# a shard of random GPT-2 token ids (the content does not matter for speed)
python3 - "$WORK/tokens.bin" <<'EOF'
import random, struct, sys
random.seed(0)
n = 200_000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *(random.randrange(50257) for _ in range(n))))
EOF

# median of the "| 123.45 ms |" field of all the step lines read
median_ms_all() {
    sed -E 's/.*\| ([0-9.]+) ms \|.*/\1/' | sort -g |
        awk '{a[NR]=$1} END {if (NR == 0) {print "nan"} else if (NR % 2) {print a[(NR+1)/2]} else {print (a[NR/2]+a[NR/2+1])/2}}'
}
# median over steps 2..N of the step lines of one run
median_ms() {
    grep -E '^step [0-9]+/' | sed -n '2,$p' | median_ms_all
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }

if [[ -n "${BASELINE:-}" ]]; then
    [[ -x "$BASELINE" ]] || { echo "BASELINE=$BASELINE is not an executable file"; exit 1; }
    ROUNDS=${ROUNDS:-3}
    echo "CPU benchmark: this tree's train_gpt2 against $BASELINE, alternately, fresh $DEPTH, B=4, T=64," \
        "$THREADS threads, $ROUNDS rounds of $STEPS steps (median of steps 2..$STEPS of every round)"
    echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; commit $(git rev-parse --short HEAD)"
    for mode in $MODES; do
        : > "$WORK/base.txt"
        : > "$WORK/ours.txt"
        for ((round = 1; round <= ROUNDS; round++)); do
            for who in base ours; do
                bin=./train_gpt2
                [[ $who == base ]] && bin=$BASELINE
                OMP_NUM_THREADS=$THREADS "$bin" -i "$WORK/tokens.bin" -j "" -e "$DEPTH" -N "$mode" -b 4 -t 64 \
                    -x "$STEPS" -v 0 -s 0 | grep -E '^step [0-9]+/' | sed -n '2,$p' >> "$WORK/$who.txt"
            done
        done
        base_ms=$(median_ms_all < "$WORK/base.txt")
        ours_ms=$(median_ms_all < "$WORK/ours.txt")
        echo "  $mode: baseline $base_ms ms/step, ours $ours_ms ms/step, ours / baseline $(ratio "$ours_ms" "$base_ms")"
    done
    exit 0
fi

declare -A OURS TORCH
echo "CPU benchmark: fresh $DEPTH, B=4, T=64, $THREADS threads, $STEPS steps (median of steps 2..$STEPS)"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; commit $(git rev-parse --short HEAD)"
for mode in $MODES; do
    OURS[$mode]=$(OMP_NUM_THREADS=$THREADS ./train_gpt2 -i "$WORK/tokens.bin" -j "" -e "$DEPTH" -N "$mode" \
        -b 4 -t 64 -x "$STEPS" -v 0 -s 0 | median_ms)
    echo "train_gpt2 $mode: ${OURS[$mode]} ms/step"
done
HAVE_TORCH=0
if python3 -c "import torch" 2>/dev/null; then
    HAVE_TORCH=1
    for mode in $MODES; do
        TORCH[$mode]=$(python3 dev/train_gpt2.py -i "$WORK/tokens.bin" -e "$DEPTH" -N "$mode" -b 4 -t 64 \
            -x "$STEPS" -v 0 --threads "$THREADS" --device cpu | median_ms)
        echo "pytorch    $mode: ${TORCH[$mode]} ms/step"
    done
else
    echo "pytorch: not installed (pip install torch) - skipped"
fi

echo "ratios:"
if [[ -n "${OURS[pre]:-}" ]]; then
    echo "  pre / llm.c reference (3000 ms): $(ratio "${OURS[pre]}" 3000)   (goal <= 0.6)"
fi
if [[ -n "${OURS[pre]:-}" && -n "${OURS[siamese]:-}" ]]; then
    echo "  siamese / pre: $(ratio "${OURS[siamese]}" "${OURS[pre]}")   (goal <= 1.08)"
fi
if [[ $HAVE_TORCH == 1 ]]; then
    for mode in $MODES; do
        echo "  ours / pytorch ($mode): $(ratio "${OURS[$mode]}" "${TORCH[$mode]}")   (goal < 1)"
    done
fi
