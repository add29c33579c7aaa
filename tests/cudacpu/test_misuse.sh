#!/usr/bin/env bash
# tests/cudacpu/test_misuse.sh: each case of tests/cudacpu/test_misuse.cu must be caught by the CPU
# execution layer with the message given here (or, for the last cases, end with status 0), under
# the default schedule and under warp-reverse (each warp of a block runs alone between barriers).
# Needs tests/bin/test_misuse_cpu (make test-cudacpu builds it).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=tests/bin/test_misuse_cpu
failed=0
passed=0

# expect CASE MESSAGE: the case stops with "cudacpu: error: ...MESSAGE..." and status 70
expect() {
    local out status=0
    out=$("$bin" "$1" 2>&1) || status=$?
    if [ $status = 70 ] && printf '%s\n' "$out" | grep -q "cudacpu: error: .*$2"; then
        passed=$((passed + 1))
    else
        echo "test-misuse: $1, schedule $CUDACPU_SCHEDULE: expected status 70 and \"$2\", got status $status:"
        printf '%s\n' "$out"
        failed=1
    fi
}

for CUDACPU_SCHEDULE in forward warp-reverse; do
    export CUDACPU_SCHEDULE
    expect exit_before_barrier "wait at __syncthreads (tests/cudacpu/test_misuse.cu:22) that thread (16,0,0) and 15 others never reach: they have exited"
    expect divergent_barriers "threads wait at different __syncthreads"
    expect shuffle_exited_lane "__shfl_xor_sync at tests/cudacpu/test_misuse.cu:39: mask 0xffffffff names lane 5, which has exited"
    expect shuffle_outside_mask "lane 0 reads lane 20, which is not in the mask 0x0000ffff"
    expect wmma_half_warp "load_matrix_sync at tests/cudacpu/test_misuse.cu:50: mask 0xffffffff names lane 16, which has exited"
    expect wmma_misaligned "load_matrix_sync at tests/cudacpu/test_misuse.cu:56: pointer .* is not 32-byte aligned"
    expect shuffle_while_barrier "deadlock: 63 threads wait at __syncthreads (tests/cudacpu/test_misuse.cu:63) while 1 wait at __shfl_sync (tests/cudacpu/test_misuse.cu:62)"
    expect mask_beyond_partial_warp "__shfl_xor_sync at tests/cudacpu/test_misuse.cu:68: mask 0xffffffff names lanes beyond the 16 lanes of this warp"
    expect threadidx_on_host "threadIdx used outside a running kernel"
    expect copy_past_allocation "cudaMemcpy source: 4100 bytes at .* are not inside one device allocation"
    expect matmul_past_allocation "cublasLtMatmul operand A (not transposed): 8064 bytes at .* are not inside one device allocation"
    expect pinned_written_early "pinned host memory at .* (1024 bytes) was written before the cudaMemcpyAsync from it at tests/cudacpu/test_misuse.cu:[0-9]* (in main) was waited for (cudaStreamSynchronize at"
    expect static_beside_dynamic "static_beside_dynamic.* 49152 bytes of dynamic shared memory beside 1024 static, above the 48128 allowed"
    for c in uninitialised_is_nan static_shared_is_nan download_lands_at_wait too_many_threads; do
        if out=$("$bin" $c 2>&1); then
            passed=$((passed + 1))
        else
            echo "test-misuse: $c, schedule $CUDACPU_SCHEDULE: FAILED:"
            printf '%s\n' "$out"
            failed=1
        fi
    done
done
echo "test-misuse: $passed of 34 misuse cases caught as expected (17 cases, 2 schedules)"
exit $failed
