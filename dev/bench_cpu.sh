#!/usr/bin/env bash
# CPU speed benchmark: ms per training step of a fresh d12 (GPT-2 124M) model at B=4, T=64 for each
# norm mode, with THREADS OpenMP threads (default 2), against this machine's own limits measured in
# the same run, and against PyTorch's CPU time for the same model and batch (dev/train_gpt2.py,
# fp32, eager, its OpenMP threads sleeping while they wait as the trainer's do) when torch is
# installed. Prints the median step time (the first step, which warms
# caches, is left out) and:
#   GFLOP/s, fraction of peak   the step's model FLOPs (below) / its time, and that / the fp32 FMA
#                               peak of THREADS threads (dev/cpu/peak.c, measured right before and
#                               right after the mode's run; their mean; in an AVX-512 build the
#                               AVX-512 loop's, with the AVX2 loop's printed beside it once)
#   fraction of the limit       limit / step time; the limit = the FLOPs at the FMA peak + the
#                               optimizer's bytes at the memory bandwidth (the adamw figure of
#                               dev/cpu/peak.c, measured at the start and at the end; their mean)
#   pre / 3.0 s                 llm.c's reference CPU trainer takes about 3.0 s/step here (a
#                               reference figure, not measured by this script; goal <= 0.6)
#   siamese / pre               the price of the second stream (goal <= 1.08)
#   ours / PyTorch              per mode (goal < 1)
# Model FLOPs of a step: 6 per matmul parameter per token (the L x 12 C^2 of the layers and the
# Vp x C of the tied classifier; biases, LayerNorms and the position embedding are not matmul
# parameters), plus attention's q.k^T and att.v, 12 L C T per token (forward and backward, the
# whole T x T square; the trainer computes only the causal half). The optimizer's bytes: OPT_BYTES
# (default 36) per parameter: AdamW reads p, g, m, v and writes p, m, v (28), the gradient norm
# reads g (4), the zeroing of the gradients writes them (4). doc/speed.md explains both counts.
# The load average (uptime) is printed at the start and at the end: on a shared machine compare
# the fractions, which divide by limits measured under the same load, not the seconds.
# Usage: dev/bench_cpu.sh [steps]   (env: THREADS=2, MODES="pre post siamese", DEPTH=d12, B=4, T=64)
#
# CPU_TIME=1 times by CPU time instead of the wall clock, for a machine that others keep busy: a
# step is the trainer's CPU time (user + system, /usr/bin/time) of a run of `steps` steps less that
# of a run of 1 step, over steps - 1, divided by THREADS, and the peak and the bandwidth are timed
# the same way (dev/cpu/peak.c --cpu-time). That is about what the step takes alone on the machine,
# except that time a thread spends asleep waiting for the other one (an uneven split of the work)
# is not counted, so it can only flatter a step; quote it as CPU time, never as a step time.
#
# BASELINE=path/to/an/older/train_gpt2 instead times that binary against this one, alternately
# (baseline, ours, baseline, ours, ... ROUNDS=3 times per mode), and prints ours / baseline per
# mode from the medians of all their steps, and each one's fraction of the FMA peak (measured
# before every run): on a loaded machine the two see the same load, so the ratio is the figure to
# compare (PyTorch is skipped). For example, against commit REV:
#   git worktree add /tmp/old REV && make -C /tmp/old train_gpt2 && BASELINE=/tmp/old/train_gpt2 bash dev/bench_cpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-6}
THREADS=${THREADS:-2}
MODES=${MODES:-"pre post siamese"}
DEPTH=${DEPTH:-d12}
B=${B:-4}
T=${T:-64}
OPT_BYTES=${OPT_BYTES:-36}
WORK=$(mktemp -d /tmp/bench_cpu.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

make -s train_gpt2
gcc -O3 -march=native -fopenmp dev/cpu/peak.c -o "$WORK/peak"

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
mean() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", (a + b) / 2}'; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
# the median of the FMA peak (GFLOP/s) and of the adamw bandwidth (GB/s), THREADS threads
CPU_TIME=${CPU_TIME:-0}
CPU_FLAG=""
[[ $CPU_TIME == 1 ]] && CPU_FLAG=--cpu-time
# (threads that sleep while they wait, as the trainer's do: spinning ones would count as CPU time)
# (an AVX-512 build of peak.c also prints the AVX2 figure; the last one is kept in $WORK/fma.txt)
fma_peak() {
    OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$THREADS "$WORK/peak" fma $CPU_FLAG > "$WORK/fma.txt"
    awk '$1 == "fma_gflops" {print $3}' "$WORK/fma.txt"
}
adamw_bandwidth() {
    OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$THREADS "$WORK/peak" stream $CPU_FLAG | awk '$2 == "adamw" {print $4}'
}
train() {  # train BINARY MODE [STEPS]: the step lines of one run (and the model line, for the shape)
    OMP_NUM_THREADS=$THREADS "$1" -i "$WORK/tokens.bin" -j "" -e "$DEPTH" -N "$2" -b "$B" -t "$T" -x "${3:-$STEPS}" \
        -v 0 -s 0 | grep -E '^(step [0-9]+/|model:)'
}
# CPU seconds (user + system) of a run of N steps
train_cpu_seconds() {
    /usr/bin/time -f '%U %S' -o "$WORK/time.txt" env OMP_NUM_THREADS="$THREADS" "$1" -i "$WORK/tokens.bin" -j "" \
        -e "$DEPTH" -N "$2" -b "$B" -t "$T" -x "$3" -v 0 -s 0 > /dev/null
    awk '{print $1 + $2}' "$WORK/time.txt"
}
# model FLOPs and optimizer bytes of one step, from the trainer's "model:" line
step_flops() {
    sed -nE 's/^model: .*\| L ([0-9]+) \| C ([0-9]+) \|.*padded ([0-9]+)\).*/\1 \2 \3/p' | head -1 |
        awk -v b="$B" -v t="$T" '{L = $1; C = $2; Vp = $3; tok = b * t;
            printf "%.6e", 6.0 * (12.0 * L * C * C + Vp * C) * tok + 12.0 * L * C * t * tok}'
}
step_bytes() {
    sed -nE 's/^model: .*\| ([0-9]+) parameters.*/\1/p' | head -1 | awk -v o="$OPT_BYTES" '{printf "%.6e", o * $1}'
}
machine() {
    echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores," \
        "$(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || { grep -qw avx2 /proc/cpuinfo && echo AVX2 || echo 'no AVX2'; }); commit $(git rev-parse --short HEAD)"
}

if [[ -n "${BASELINE:-}" ]]; then
    [[ -x "$BASELINE" ]] || { echo "BASELINE=$BASELINE is not an executable file"; exit 1; }
    ROUNDS=${ROUNDS:-3}
    echo "CPU benchmark: this tree's train_gpt2 against $BASELINE, alternately, fresh $DEPTH, B=$B, T=$T," \
        "$THREADS threads, $ROUNDS rounds of $STEPS steps (median of steps 2..$STEPS of every round)"
    machine
    echo "load average at the start: $(load)"
    for mode in $MODES; do
        : > "$WORK/base.txt"
        : > "$WORK/ours.txt"
        : > "$WORK/peak_base.txt"
        : > "$WORK/peak_ours.txt"
        for ((round = 1; round <= ROUNDS; round++)); do
            for who in base ours; do
                bin=./train_gpt2
                [[ $who == base ]] && bin=$BASELINE
                fma_peak >> "$WORK/peak_$who.txt"
                train "$bin" "$mode" > "$WORK/run.txt"
                grep -E '^step' "$WORK/run.txt" | sed -n '2,$p' >> "$WORK/$who.txt"
            done
        done
        flops=$(step_flops < "$WORK/run.txt")
        base_ms=$(median_ms_all < "$WORK/base.txt")
        ours_ms=$(median_ms_all < "$WORK/ours.txt")
        frac() {  # frac MS PEAKFILE: fraction of the median peak of the file
            local p
            p=$(sort -g "$2" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
            awk -v f="$flops" -v ms="$1" -v p="$p" 'BEGIN {printf "%.3f", f / (ms / 1000) / 1e9 / p}'
        }
        echo "  $mode: baseline $base_ms ms/step ($(frac "$base_ms" "$WORK/peak_base.txt") of peak)," \
            "ours $ours_ms ms/step ($(frac "$ours_ms" "$WORK/peak_ours.txt") of peak), ours / baseline $(ratio "$ours_ms" "$base_ms")"
    done
    echo "load average at the end: $(load)"
    exit 0
fi

declare -A OURS TORCH PEAK WALL
echo "CPU benchmark: fresh $DEPTH, B=$B, T=$T, $THREADS threads, $STEPS steps (median of steps 2..$STEPS)"
machine
echo "load average at the start: $(load)"
peak_prev=$(fma_peak)
peak_avx2=$(awk '$1 == "fma_gflops_avx2" {print $3}' "$WORK/fma.txt")
bw_start=$(adamw_bandwidth)
for mode in $MODES; do
    train ./train_gpt2 "$mode" > "$WORK/run_$mode.txt"
    OURS[$mode]=$(median_ms < "$WORK/run_$mode.txt")
    if [[ $CPU_TIME == 1 ]]; then
        (( STEPS >= 2 )) || { echo "CPU_TIME=1 needs at least 2 steps"; exit 1; }
        one=$(train_cpu_seconds ./train_gpt2 "$mode" 1)
        all=$(train_cpu_seconds ./train_gpt2 "$mode" "$STEPS")
        WALL[$mode]=${OURS[$mode]}
        OURS[$mode]=$(awk -v a="$all" -v o="$one" -v n="$STEPS" -v t="$THREADS" 'BEGIN {printf "%.2f", (a - o) / (n - 1) / t * 1000}')
    fi
    peak_next=$(fma_peak)
    PEAK[$mode]=$(mean "$peak_prev" "$peak_next")
    peak_prev=$peak_next
done
bw_end=$(adamw_bandwidth)
BW=$(mean "$bw_start" "$bw_end")
[[ $CPU_TIME == 1 ]] && echo "CPU TIME: every figure below is CPU time / $THREADS threads (wall-clock medians in brackets)"
peaks=""
for mode in $MODES; do peaks="$peaks $mode ${PEAK[$mode]},"; done
echo "limits (medians): fp32 FMA peak ($(awk '$1 == "fma_gflops" {print $7}' "$WORK/fma.txt")) around each mode's run (GFLOP/s):${peaks%,};" \
    "memory bandwidth (adamw pattern) $bw_start GB/s at the start, $bw_end at the end"
if [[ -n $peak_avx2 ]]; then echo "  (the same FMA loop on 256-bit AVX2 vectors, at the start: $peak_avx2 GFLOP/s)"; fi
for mode in $MODES; do
    flops=$(step_flops < "$WORK/run_$mode.txt")
    bytes=$(step_bytes < "$WORK/run_$mode.txt")
    wall=""
    [[ $CPU_TIME == 1 ]] && wall=" (wall ${WALL[$mode]})"
    awk -v m="$mode" -v ms="${OURS[$mode]}" -v wall="$wall" -v f="$flops" -v by="$bytes" -v p="${PEAK[$mode]}" -v bw="$BW" 'BEGIN {
        gf = f / (ms / 1000) / 1e9; lim = f / (p * 1e9) * 1000 + by / (bw * 1e9) * 1000;
        printf "train_gpt2 %s: %s ms/step%s | %.1f GFLOP (model) -> %.1f GFLOP/s = %.3f of the FMA peak (%.1f) | limit %.0f ms (FLOPs at peak %.0f + %.2f GB at %.1f GB/s %.0f) -> %.3f of the limit\n",
               m, ms, wall, f / 1e9, gf, gf / p, p, lim, f / (p * 1e9) * 1000, by / 1e9, bw, by / (bw * 1e9) * 1000, lim / ms }'
done
HAVE_TORCH=0
if [[ $CPU_TIME == 1 ]]; then
    echo "pytorch: skipped (CPU_TIME=1)"
elif python3 -c "import torch" 2>/dev/null; then
    HAVE_TORCH=1
    for mode in $MODES; do
        TORCH[$mode]=$(OMP_WAIT_POLICY=PASSIVE python3 dev/train_gpt2.py -i "$WORK/tokens.bin" -e "$DEPTH" -N "$mode" \
            -b "$B" -t "$T" -x "$STEPS" -v 0 --threads "$THREADS" --device cpu | median_ms)
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
echo "load average at the end: $(load)"
