#!/usr/bin/env bash
# tests/test_lt_fault.sh: the CUDA trainer goes on when a cuBLASLt algorithm the heuristic offered
# fails at run time. Runs tests/bin/test_gpt2cu_fp32_ltfault (test_gpt2.cu through the CPU execution
# layer, with tests/lt_fault.cpp in front of cuBLASLt) twice:
#   LT_FAULT=gelu   every fused GELU epilogue fails: the GELU kernels must run instead;
#   LT_FAULT=first  the first of two offered algorithms fails: the second must run.
# Each must pass every check of test_gpt2cu and print its one note. (make test-lt-fault)
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-tests/bin/test_gpt2cu_fp32_ltfault}
[ -x "$BIN" ] || { echo "error: $BIN not built" >&2; exit 1; }
log=$(mktemp /tmp/test_lt_fault.XXXXXX)
trap 'rm -f "$log"' EXIT
failed=0
for spec in "gelu:the GELU kernels run instead" "first:another algorithm ran instead"; do
    mode=${spec%%:*} want=${spec#*:}
    LT_FAULT=$mode "$BIN" > "$log" 2>&1
    rc=$?
    note=$(grep -m1 '^note: .*failed at run time' "$log")
    if [ $rc -eq 0 ] && grep -q '^all checks passed' "$log" && [[ "$note" == *"$want"* ]]; then
        echo "ok   LT_FAULT=$mode: all checks passed; $note"
    else
        grep -E 'FAIL|error|note' "$log" | head -20
        echo "FAIL LT_FAULT=$mode: exit status $rc, note: ${note:-none} (expected one ending '$want')"
        failed=1
    fi
done
exit $failed
