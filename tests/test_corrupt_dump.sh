#!/usr/bin/env bash
# tests/test_corrupt_dump.sh: the parity test must be able to fail. Copies the stored dumps, damages
# the copy in several ways and checks that ./test_gpt2 on the copy exits non-zero each time (and
# passes on an undamaged copy, so a failure is due to the damage).
#     tests/test_corrupt_dump.sh [path/to/test_gpt2]
set -u
cd "$(dirname "$0")/.."
TEST_GPT2=${1:-./test_gpt2}
WORK=$(mktemp -d /tmp/test_corrupt_dump.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
passed=0
failed=0

fresh_copy() { rm -rf "$WORK/dumps"; cp -r data/test "$WORK/dumps"; }

# xor_byte FILE OFFSET MASK: flip bits of one byte in place
xor_byte() {
    local byte
    byte=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
    printf "$(printf '\\%03o' $((byte ^ $3)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# expect NAME STATUS PATTERN: the last run exited with STATUS (0 or non-zero) and printed PATTERN
expect() {
    local name=$1 want=$2 pattern=$3
    local ok=1
    if [[ $want == 0 && $status != 0 ]] || [[ $want != 0 && $status == 0 ]]; then ok=0; fi
    if ! grep -qE "$pattern" "$WORK/out"; then ok=0; fi
    if [[ $ok == 1 ]]; then
        passed=$((passed + 1)); echo "  ok    $name"
    else
        failed=$((failed + 1)); echo "  FAIL  $name (exit $status, wanted ${want/1/non-zero}; pattern '$pattern')"
        tail -n 3 "$WORK/out" | sed 's/^/        /'
    fi
}
run() { "$TEST_GPT2" "$WORK/dumps" > "$WORK/out" 2>&1; status=$?; }

echo "test_gpt2 on damaged copies of data/test:"
fresh_copy; run
expect "undamaged copy passes" 0 "^all checks passed"

# the siamese dump ends with: ... lnfyw lnfyb lnfw lnfb gradients (C = 32 floats each), 10 step losses
D=$WORK/dumps/siamese/debug_state.bin
size=$(stat -c %s "$D")
fresh_copy; xor_byte "$D" $((size - 40 - 4 * 32 * 3 + 4 * 7 + 2)) 0x01; run    # lnfyb[7]: mantissa bit 16
expect "one gradient element of lnfyb changed by ~1%" 1 "lnfyb .*FAIL"
fresh_copy; xor_byte "$D" $((size - 4 * 3 + 1)) 0x01; run                       # step loss 7: mantissa bit 8
expect "one step loss changed by ~3e-5 (relative)" 1 "step  7 .*FAIL"
fresh_copy; xor_byte "$D" $((1024 + 4 * 4 * 32 * 2 + 4 * 300 + 2)) 0x40; run  # a logit, past the tokens
expect "one logit changed" 1 "logits .*FAIL"
fresh_copy; truncate -s $((size - 4)) "$D"; run
expect "truncated dump is an error" 1 "^error: .*truncated or corrupted"
fresh_copy; xor_byte "$D" 0 0xff; run
expect "wrong magic is an error" 1 "^error: .*not a debug-state dump"
fresh_copy; cp "$WORK/dumps/pre/model.bin" "$WORK/dumps/siamese/model.bin"; run
expect "a model of another mode is an error" 1 "^error: .*holds a pre model, expected siamese"

echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
