#!/usr/bin/env bash
# tests/test_lt_fault.sh: the CUDA trainer goes on when cuBLASLt refuses a fused GELU epilogue the
# heuristic offered. Runs tests/bin/test_gpt2cu_fp32_ltfault (test_gpt2.cu through the CPU execution
# layer, with tests/lt_fault.cpp in front of cuBLASLt) with LT_FAULT=gelu: every fused GELU
# epilogue fails (CUBLAS_STATUS_NOT_SUPPORTED) and the GELU kernel must run instead. It must pass
# every check of test_gpt2cu, with at least one refusal, and each matmul shape must ask the
# heuristic once (the plan cache of matmul_lt.cuh): fewer queries than half the calls, and a
# refused plan is not tried again (refusals fewer than queries). (make test-lt-fault)
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-tests/bin/test_gpt2cu_fp32_ltfault}
[ -x "$BIN" ] || { echo "error: $BIN not built" >&2; exit 1; }
log=$(mktemp /tmp/test_lt_fault.XXXXXX)
trap 'rm -f "$log"' EXIT
LT_FAULT=gelu "$BIN" > "$log" 2>&1
rc=$?
counts=$(grep -m1 '^lt_fault: ' "$log")
read -r queries calls refused < <(echo "$counts" |
    sed -E 's/^lt_fault: ([0-9]+) heuristic queries for ([0-9]+) matmul calls, ([0-9]+) refused$/\1 \2 \3/')
failed=0
if [ $rc -eq 0 ] && grep -q '^all checks passed' "$log"; then
    echo "ok   LT_FAULT=gelu: all checks passed"
else
    grep -E 'FAIL|error' "$log" | head -20
    echo "FAIL LT_FAULT=gelu: exit status $rc"
    failed=1
fi
if [[ "$queries $calls $refused" =~ ^[0-9]+\ [0-9]+\ [0-9]+$ ]] && [ $((2 * queries)) -lt "$calls" ] &&
    [ "$refused" -gt 0 ] && [ "$refused" -lt "$queries" ]; then
    echo "ok   LT_FAULT=gelu: $queries heuristic queries for $calls matmul calls, $refused refused"
else
    echo "FAIL LT_FAULT=gelu: '${counts:-no counts printed}': a query per shape, a refusal per fused plan"
    failed=1
fi
exit $failed
