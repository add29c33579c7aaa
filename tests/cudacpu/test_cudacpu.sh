#!/usr/bin/env bash
# tests/cudacpu/test_cudacpu.sh: test_gpt2.cu (the CUDA trainer's parity test) executed on the CPU
# through the execution layer (tests/cudacpu/README.md), under more than one thread schedule.
# Needs tests/bin/test_gpt2cu_fp32_cpu and tests/bin/test_wmma_cpu (make test-cudacpu builds them
# and runs this).
set -euo pipefail
cd "$(dirname "$0")/../.."

log=$(mktemp /tmp/test_cudacpu.XXXXXX)
trap 'rm -f "$log"' EXIT
failed=0

# run_test NAME SCHEDULE BINARY [ARGS]: every mode, fused and separate GELU, must pass
run_test() {
    local name=$1 schedule=$2 bin=$3
    shift 3
    local start=$SECONDS
    if CUDACPU_SCHEDULE=$schedule "$bin" "$@" > "$log" 2>&1 && grep -q '^all checks passed' "$log"; then
        echo "test-cudacpu: $name, schedule $schedule: $(grep -c 'PASSED$' "$log") mode runs passed ($((SECONDS - start)) s)"
    else
        cat "$log"
        echo "test-cudacpu: $name, schedule $schedule: FAILED"
        failed=1
    fi
}

# the software WMMA against a double-precision matmul (every shape, type and layout)
if tests/bin/test_wmma_cpu > "$log" 2>&1; then
    echo "test-cudacpu: WMMA: $(grep -c ' ok$' "$log") cases passed"
else
    cat "$log"
    echo "test-cudacpu: WMMA: FAILED"
    failed=1
fi

# FP32 (every mode, both GELU paths within one run): threads of a block in reverse order, then a
# seeded shuffle (a missing barrier shows under one or the other)
run_test "test_gpt2cu FP32" reverse tests/bin/test_gpt2cu_fp32_cpu
run_test "test_gpt2cu FP32" shuffle:1 tests/bin/test_gpt2cu_fp32_cpu

exit $failed
