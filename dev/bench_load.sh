#!/usr/bin/env bash
# CPU trainer under load: wall time of a training run of d2 on the arithmetic data (B=16, T=64: the
# default run when this was first measured, kept so that the ratios stay comparable) for STEPS
# steps with 1 OpenMP thread, with 2 threads as the trainer runs them by default
# (OMP_WAIT_POLICY=PASSIVE: waiting threads sleep, common/train_common.h), and with 2 threads that
# spin while they wait (GOMP_SPINCOUNT=300000, libgomp's own default, what the trainer did before),
# first as the machine is, then with LOAD extra busy processes (`yes > /dev/null`) competing for
# the cores. Each configuration runs REPEATS times, interleaved with the others so that a change
# in the machine's own load hits them alike; the median is shown, then the ratios.
#   2 threads / 1 thread under load      should be <= 1 (threads must not cost time under load)
#   2 spinning / 1 thread under load     what the spinning default did (4.3 in dev/cpu/RESULTS.md)
#   2 threads / 2 spinning, no extra load   what sleeping costs on an idle machine
# On a shared machine "no extra load" is not quiet: compare ratios measured within one run.
# Usage: dev/bench_load.sh [steps]      (env: REPEATS=3, LOAD=2 busy processes)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-60}
REPEATS=${REPEATS:-3}
LOAD=${LOAD:-2}

make -s train_gpt2 data/arithmetic > /dev/null

CONFIGS=("1 thread" "2 threads" "2 spinning")
config_env() {
    case $1 in
        "1 thread") echo "OMP_NUM_THREADS=1" ;;
        "2 threads") echo "OMP_NUM_THREADS=2" ;;
        "2 spinning") echo "OMP_NUM_THREADS=2 GOMP_SPINCOUNT=300000" ;;
    esac
}

# seconds of one run of STEPS steps with the environment of configuration $1
time_run() {
    local t0 t1
    t0=$(date +%s%N)
    env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT $(config_env "$1") ./train_gpt2 -e d2 -t 64 -x "$STEPS" -v 0 -s 0 > /dev/null
    t1=$(date +%s%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", (b - a) / 1e9}'
}

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

LOAD_PIDS=()
stop_load() { for p in "${LOAD_PIDS[@]}"; do kill "$p" 2> /dev/null || true; done; LOAD_PIDS=(); }
trap stop_load EXIT

declare -A TIMES MEDIAN
echo "load benchmark: ./train_gpt2 -e d2 -t 64 -x $STEPS -v 0 -s 0 (B 16), median of $REPEATS runs"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for phase in "no extra load" "$LOAD busy processes"; do
    if [ "$phase" != "no extra load" ]; then
        for _ in $(seq "$LOAD"); do yes > /dev/null & LOAD_PIDS+=($!); done
        sleep 1
    fi
    for r in $(seq "$REPEATS"); do
        for c in "${CONFIGS[@]}"; do TIMES["$phase/$c"]+=" $(time_run "$c")"; done
    done
    stop_load
    for c in "${CONFIGS[@]}"; do
        MEDIAN["$phase/$c"]=$(echo "${TIMES["$phase/$c"]}" | median)
        printf "  %-20s %-11s %6.2f s   (runs:%s)\n" "$phase" "$c" "${MEDIAN["$phase/$c"]}" "${TIMES["$phase/$c"]}"
    done
done
ratio() { awk -v a="${MEDIAN[$1]}" -v b="${MEDIAN[$2]}" 'BEGIN {printf "%.2f", a / b}'; }
L="$LOAD busy processes"
Q="no extra load"
echo "ratios:"
echo "  under load:    2 threads / 1 thread     $(ratio "$L/2 threads" "$L/1 thread")   (goal <= 1)"
echo "  under load:    2 spinning / 1 thread    $(ratio "$L/2 spinning" "$L/1 thread")"
echo "  no extra load: 2 threads / 1 thread     $(ratio "$Q/2 threads" "$Q/1 thread")"
echo "  no extra load: 2 threads / 2 spinning   $(ratio "$Q/2 threads" "$Q/2 spinning")   (the price of sleeping)"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
