#!/usr/bin/env bash
# tests/cudacpu/test_blocking.sh: where the CUDA trainer's host waits for the GPU in a training
# step, counted through the CPU execution layer (CUDACPU_BLOCKING_LOG, tests/cudacpu/README.md):
# every cudaMemcpy but device to device, every cudaMemcpyAsync with pageable host memory, every
# cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, cudaFree and cudaFreeHost,
# per call site. A step's count is that of a run of 5 steps less that of a run of 2, over 3
# (evaluation, sampling and checkpoints off; 2 micro-batches per step). In a step the host may
# wait only at these, each at one call site:
#   gpt2_forward     once per micro-batch: the losses read back (2 per step)
#   gpt2_grad_sumsq  once: the norm's partial sums read back (the loop clips and checks the norm
#                    on the host)
#   gpu_sync         once: the step's clock stops when the GPU has done the step
# With 2 ranks (where mpirun and an MPI build of the trainer exist; one micro-batch each) every rank waits at
# dist_copy 4 times a step: gradients to the host and its shard back (reduce-scatter), the updated
# working weights to the host and back (all-gather), the exchange through host memory of a build
# without NCCL. Anything else (a token copy that blocks, a synchronize) fails, named by its site.
# Both precisions. make test-cudacpu runs it (tests/cudacpu/test_cudacpu.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/test_blocking.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset TRAIN_GPT2_NAN_STEPS TRAIN_GPT2CU_SYNC_CHECK
# a tiny fresh model on the default (arithmetic) data; -d: 2 micro-batches of B*T per step
RUN=(-e d2c32h2 -b 2 -t 16 -d 64 -v 0 -s 0)
failed=0

# per_step NAME: "PER_STEP CALL FUNCTION SITE" of every call site whose count grew from run
# NAME.2 to run NAME.5 (a count that is not a multiple of 3 prints as "?")
per_step() {
    awk 'FNR == NR { a[$2 " " $3 " " $4] = $1; next } { k = $2 " " $3 " " $4; d = $1 - a[k];
             if (d != 0) { print (d % 3 == 0 ? d / 3 : "?"), k } }' "$tmp/$1.2" "$tmp/$1.5"
}

# check NAME EXPECTED: the per-step waits of NAME are exactly EXPECTED ("FUNCTION COUNT ...")
check() {
    local name=$1 expected=$2 got report
    got=$(per_step "$name" | sort -k3,3 -k4,4)
    report=$(printf '%s\n' "$got" | awk -v expected="$expected" '
        BEGIN { n = split(expected, e, " "); for (i = 1; i < n; i += 2) { want[e[i]] = e[i + 1] } }
        NF == 0 { next }
        { rows++; count[rows] = $1; call[rows] = $2; func[rows] = $3; site[rows] = $4; sites[$3]++ }
        END {
            for (i = 1; i <= rows; i++) {
                f = func[i]
                if ((f in want) && want[f] == count[i] && sites[f] == 1) {
                    ok = ok sep count[i] " " call[i] " in " f " (" site[i] ")"; sep = ", "; found[f] = 1
                } else {
                    bad = bad "\n  unexpected: " count[i] " " call[i] " per step in " f " at " site[i]
                }
            }
            for (f in want) { if (!(f in found)) { bad = bad "\n  missing: " want[f] " per step in " f " (at one site)" } }
            if (bad != "") { print "FAILED:" bad; exit 1 }
            print ok
        }')
    if [ $? = 0 ]; then
        echo "test-blocking: $name: per training step the host waits only at: $report"
    else
        echo "test-blocking: $name: $report"
        echo "  (expected per step: $expected; counts of the 2-step run in $name.2, listed below)"
        sed 's/^/    /' "$tmp/$name.2"
        failed=1
    fi
}

# run NAME BIN STEPS [RANKS]: one run with its counts in $tmp/NAME.STEPS, or with RANKS ranks
# under mpirun in $tmp/NAME.STEPS.RANK
run() {
    local name=$1 bin=$2 steps=$3 ranks=${4:-0} log=$tmp/$1.$3
    local cmd=(env CUDACPU_BLOCKING_LOG="$log" "$bin" "${RUN[@]}" -x "$steps")
    if [ "$ranks" -gt 0 ]; then
        cmd=(mpirun -q --oversubscribe --bind-to none -np "$ranks"
             bash -c 'CUDACPU_BLOCKING_LOG=$0.$OMPI_COMM_WORLD_RANK exec "$@"' "$log" "$bin" "${RUN[@]}" -x "$steps")
    fi
    if ! "${cmd[@]}" > "$log.out" 2>&1; then
        cat "$log.out"
        echo "test-blocking: $name: the $steps-step run failed"
        failed=1
        return 1
    fi
}

for p in fp32 bf16; do
    bin=tests/bin/train_gpt2cu_cpu
    [ $p = fp32 ] && bin=tests/bin/train_gpt2cu_fp32_cpu
    run "$p" "$bin" 2 && run "$p" "$bin" 5 && check "$p" "gpt2_forward 2 gpt2_grad_sumsq 1 gpu_sync 1"
done

# 2 ranks (FP32), each with the same waits
if command -v mpirun > /dev/null 2>&1 && ldd tests/bin/train_gpt2cu_fp32_cpu 2> /dev/null | grep -q libmpi; then
    if run ranks tests/bin/train_gpt2cu_fp32_cpu 2 2 && run ranks tests/bin/train_gpt2cu_fp32_cpu 5 2; then
        for r in 0 1; do
            mv "$tmp/ranks.2.$r" "$tmp/rank$r.2" && mv "$tmp/ranks.5.$r" "$tmp/rank$r.5" &&
                check "rank$r" "gpt2_forward 1 gpt2_grad_sumsq 1 gpu_sync 1 dist_copy 4" || failed=1
        done
    fi
else
    echo "test-blocking: 2 ranks: skipped (no mpirun, or the trainer was built without MPI)"
fi
exit $failed
