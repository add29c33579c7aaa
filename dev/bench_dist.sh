#!/usr/bin/env bash
# Data-parallel speed on the CPU: training throughput of the CPU trainer with 1 process and with
# 2 ranks (mpirun -np 2, common/dist.h), one OpenMP thread per rank, the same total batch (2
# micro-batches of B x T tokens per step: both on the one process, one on each rank). Prints the
# median ms per step of each (the first step, which warms caches, is left out) and the ratio of
# their throughputs, 2 ranks / 1 process (2.0 would be perfect scaling; communication, a shared
# memory bus and other processes on the machine take their share).
# Usage: dev/bench_dist.sh [steps]      (env: MODEL=d4c256, B=8, T=64, ZERO=1)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-20}
MODEL=${MODEL:-d4c256}
B=${B:-8}
T=${T:-64}
ZERO=${ZERO:-1}
command -v mpirun > /dev/null || { echo "bench_dist: mpirun not found (bash dev/install_mpi.sh)"; exit 1; }
make -s train_gpt2 data/arithmetic > /dev/null
ldd ./train_gpt2 | grep -q libmpi || { echo "bench_dist: train_gpt2 was built without MPI"; exit 1; }
export OMP_NUM_THREADS=1
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# median over steps 2..N of the "| 123.45 ms |" field of the step lines
median_ms() {
    grep -E '^step [0-9]+/' | sed -n '2,$p' | sed -E 's/.*\| ([0-9.]+) ms \|.*/\1/' | sort -g |
        awk '{a[NR]=$1} END {if (NR == 0) {print "nan"} else if (NR % 2) {print a[(NR+1)/2]} else {print (a[NR/2]+a[NR/2+1])/2}}'
}
FLAGS=(-e "$MODEL" -b "$B" -t "$T" -d $((2 * B * T)) -x "$STEPS" -v 0 -s 0 -z "$ZERO")
echo "data-parallel CPU benchmark: fresh $MODEL, B=$B, T=$T, total batch $((2 * B * T)) tokens, 1 thread per rank, $STEPS steps"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD)"
one=$(./train_gpt2 "${FLAGS[@]}" | median_ms)
two=$(mpirun -q --oversubscribe -np 2 ./train_gpt2 "${FLAGS[@]}" | median_ms)
echo "1 process: $one ms/step"
echo "2 ranks:   $two ms/step"
awk -v a="$one" -v b="$two" 'BEGIN {printf "throughput ratio 2 ranks / 1 process: %.2f\n", a / b}'
