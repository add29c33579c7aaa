#!/usr/bin/env bash
# Data-parallel speed on the CPU: training throughput of the CPU trainer with 1 process and with
# 2 ranks (mpirun -np 2, common/dist.h), one OpenMP thread per rank, the same total batch (2
# micro-batches of B x T tokens per step: both on the one process, one on each rank). Prints the
# median ms per step of each (the first step, which warms caches, is left out) and the ratio of
# their throughputs, 2 ranks / 1 process, for each of ROUNDS rounds and their median (2.0 would be perfect scaling; communication, a shared
# memory bus and other processes on the machine take their share).
# Usage: dev/bench_dist.sh [steps]      (env: MODEL=d4c256, B=8, T=64, ZERO=1, ROUNDS=3)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-20}
MODEL=${MODEL:-d4c256}
B=${B:-8}
T=${T:-64}
ZERO=${ZERO:-1}
ROUNDS=${ROUNDS:-3}
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
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) cores; load $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD)"
# the two runs alternate ROUNDS times (other processes on the machine change from minute to minute:
# the ratio of each round compares runs taken moments apart); the median ratio closes
ratios=()
for round in $(seq 1 "$ROUNDS"); do
    one=$(./train_gpt2 "${FLAGS[@]}" | median_ms)
    two=$(mpirun -q --oversubscribe -np 2 ./train_gpt2 "${FLAGS[@]}" | median_ms)
    ratio=$(awk -v a="$one" -v b="$two" 'BEGIN {printf "%.2f", a / b}')
    ratios+=("$ratio")
    echo "round $round: 1 process $one ms/step, 2 ranks $two ms/step, throughput ratio $ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
echo "throughput ratio 2 ranks / 1 process (wall clock): $median (median of $ROUNDS rounds)"

# On a machine busy with other work the wall clock says how much of the CPU the scheduler gave the
# ranks more than what they need. The CPU time each process used does not depend on that: the CPU
# seconds of a step (a run of STEPS steps minus a run of 1 step, over STEPS - 1) of the one process,
# against those of the busier rank, is the throughput ratio when every rank has a core of its own.
if [ -x /usr/bin/time ]; then
    W=$(mktemp -d /tmp/bench_dist.XXXXXX)
    trap 'rm -rf "$W"' EXIT
    # cpu NAME RANKS STEPS: user+sys seconds of each process of the run, one line each
    cpu() {
        local f=("${FLAGS[@]}")
        f[${#f[@]}]=-x; f[${#f[@]}]=$3
        if [ "$2" = 0 ]; then
            /usr/bin/time -f "%U %S" -o "$W/$1.0" ./train_gpt2 "${f[@]}" > /dev/null
        else
            mpirun -q --oversubscribe -np "$2" sh -c '/usr/bin/time -f "%U %S" -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' \
                "$W/$1" ./train_gpt2 "${f[@]}" > /dev/null
        fi
        cat "$W/$1".* | awk '{print $1 + $2}'
    }
    one_long=$(cpu one_long 0 "$STEPS"); one_short=$(cpu one_short 0 1)
    two_long=$(cpu two_long 2 "$STEPS" | sort -g | tail -n 1); two_short=$(cpu two_short 2 1 | sort -g | tail -n 1)
    awk -v a="$one_long" -v b="$one_short" -v c="$two_long" -v d="$two_short" -v n="$STEPS" 'BEGIN {
        one = (a - b) / (n - 1) * 1000; two = (c - d) / (n - 1) * 1000
        printf "CPU time per step: 1 process %.1f ms, busier of 2 ranks %.1f ms\n", one, two
        printf "throughput ratio 2 ranks / 1 process (CPU time, a core per rank): %.2f\n", one / two }'
fi
