#!/usr/bin/env bash
# tests/test_lt_fault.sh: the CUDA trainer goes on when a cuBLASLt algorithm the heuristic offered
# fails at run time. Runs tests/bin/test_gpt2cu_fp32_ltfault (test_gpt2.cu through the CPU execution
# layer, with tests/lt_fault.cpp in front of cuBLASLt) twice:
#   LT_FAULT=gelu   every fused GELU epilogue fails (CUBLAS_STATUS_NOT_SUPPORTED): the GELU kernels
#                   must run instead;
#   LT_FAULT=first  the first of two offered algorithms fails (CUBLAS_STATUS_EXECUTION_FAILED): the
#                   second must run.
# Each must pass every check of test_gpt2cu and print its one note, which names the status in
# words (cublasGetStatusString); and each matmul shape must ask
# the heuristic once (the plan cache of matmul_lt.cuh): fewer queries than half the calls.
# (make test-lt-fault)
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-tests/bin/test_gpt2cu_fp32_ltfault}
[ -x "$BIN" ] || { echo "error: $BIN not built" >&2; exit 1; }
log=$(mktemp /tmp/test_lt_fault.XXXXXX)
trap 'rm -f "$log"' EXIT
failed=0
for spec in "gelu:(the functionality requested is not supported); the GELU kernels run instead" \
    "first:(the GPU program failed to execute); another algorithm ran instead"; do
    mode=${spec%%:*} want=${spec#*:}
    LT_FAULT=$mode "$BIN" > "$log" 2>&1
    rc=$?
    note=$(grep -m1 '^note: .*failed at run time' "$log")
    counts=$(grep -m1 '^lt_fault: ' "$log")
    read -r queries calls < <(echo "$counts" | sed -E 's/^lt_fault: ([0-9]+) heuristic queries for ([0-9]+) matmul calls$/\1 \2/')
    if [ $rc -eq 0 ] && grep -q '^all checks passed' "$log" && [[ "$note" == *"$want"* ]]; then
        echo "ok   LT_FAULT=$mode: all checks passed; $note"
    else
        grep -E 'FAIL|error|note' "$log" | head -20
        echo "FAIL LT_FAULT=$mode: exit status $rc, note: ${note:-none} (expected one ending '$want')"
        failed=1
    fi
    if [[ "$queries" =~ ^[0-9]+$ && "$calls" =~ ^[0-9]+$ ]] && [ $((2 * queries)) -lt "$calls" ]; then
        echo "ok   LT_FAULT=$mode: $queries heuristic queries for $calls matmul calls"
    else
        echo "FAIL LT_FAULT=$mode: '${counts:-no counts printed}': each shape must ask the heuristic once"
        failed=1
    fi
done
exit $failed
