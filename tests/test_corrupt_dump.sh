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

# where things are in the siamese dump (doc/formats.md, "Debug-state dump"): B 2, T 32, C 32, Vp 256,
# 49312 parameters, 10 steps; offsets in bytes
D=$WORK/dumps/siamese/debug_state.bin
size=$(stat -c %s "$D")
BT=64; C=32; P=49312
LOGITS=$((1024 + 4 * 2 * BT))
GRADS=$((LOGITS + 4 * BT * 256 + 4))
LOSSES=$((GRADS + 4 * P))
NORMS=$((LOSSES + 4 * 10))
ACTS=$((NORMS + 4 * 10))
# forward order: e, then per attention sublayer a LN(y) a+LN(y) u qkv(3C) atty z x y, per MLP
# sublayer a LN(y) a+LN(y) u fch(4C) fch_gelu(4C) z x y: layer 1 attn LN(y) starts after
# e (1), layer 0 attn (11 C-wide), layer 0 mlp (15 C-wide) and layer 1 attn a (1)
LAYER1_ATTN_LNY=$((ACTS + 4 * BT * C * (1 + 11 + 15 + 1)))
# the stream gradients follow the 57 activations (3 + 2 * 11 + ... = 1 + 3 * (11 + 15) + 2 C-wide),
# backward order: dx dy after layer 2 mlp, dx dy after layer 2 attn, dx after layer 1 mlp, ...
STREAM=$((ACTS + 4 * BT * C * (1 + 3 * (11 + 15) + 2)))
DX_AFTER_LAYER1_MLP=$((STREAM + 4 * BT * C * 4))
# the yardsticks close the file: 58 forward tensors, the loss, 14 stream gradients, 28 parameter
# tensors, 10 step losses, 10 step norms; the loss's is the 59th
YARDS=$((STREAM + 4 * BT * C * 14))
[[ $size == $((YARDS + 4 * (58 + 1 + 14 + 28 + 10 + 10))) ]] || { echo "  FAIL  the dump is not laid out as this script expects ($size bytes)"; exit 1; }
# the trained dump: same layout; lny1b (tolerance 3.7e-4, raised by its yardstick 3.7e-5) starts
# after wte, wpe, lnx1w, lnx1b, lny1w; its element 95 is its largest
DT=$WORK/dumps/siamese_trained/debug_state.bin
LNY1B_95=$((GRADS + 4 * (256 * C + 64 * C + 3 * 3 * C + 95)))

fresh_copy; xor_byte "$D" $((GRADS + 4 * (P - 3 * C + 7) + 2)) 0x01; run    # lnfyb[7]: mantissa bit 16
expect "one gradient element of lnfyb changed by ~1%" 1 "lnfyb .*FAIL"
fresh_copy; xor_byte "$DT" $((LNY1B_95 + 1)) 0x20; run                   # mantissa bit 13: ~1e-3
expect "trained model: the largest gradient element of lny1b changed by ~0.1%" 1 "lny1b .*FAIL"
fresh_copy; xor_byte "$D" $((LOSSES + 4 * 7 + 1)) 0x01; run                  # step loss 7: mantissa bit 8
expect "one step loss changed by ~3e-5 (relative)" 1 "step  7  loss .* FAIL  norm"
fresh_copy; xor_byte "$D" $((NORMS + 4 * 4 + 1)) 0x01; run                   # step norm 4: mantissa bit 8
expect "one step's gradient norm changed by ~3e-5 (relative)" 1 "step  4  loss .* ok  norm .* FAIL$"
fresh_copy; xor_byte "$D" $((NORMS + 4 * 3 + 3)) 0x80; run                   # step norm 3: the sign bit
expect "a negative gradient norm is refused" 1 "^error: .*the gradient norm of step 3 is -0.88.*not a positive finite"
fresh_copy; xor_byte "$D" $((LOGITS + 4 * 300 + 2)) 0x40; run               # a logit, past the tokens
expect "one logit changed" 1 "logits [0-9.e+-]+/[0-9.e+-]+ FAIL"
fresh_copy; xor_byte "$D" $((LAYER1_ATTN_LNY + 4 * 77 + 2)) 0x40; run       # one element of LN(y)
expect "one activation changed: named as the first divergence" 1 "forward: FIRST DIVERGENCE at layer 1 attn LN\(y\); 1 of"
fresh_copy; xor_byte "$D" $((DX_AFTER_LAYER1_MLP + 4 * 5 + 2)) 0x40; run    # one element of a stream gradient
expect "one stream gradient changed: named as the first divergence" 1 "backward: FIRST DIVERGENCE at after layer 1 mlp dx; 1 of"
fresh_copy; xor_byte "$D" 4 0x05; run                                        # version 4 -> 1
expect "a version 1 dump is a clear error" 1 "^error: .*dump version 1 has no activations; regenerate"
fresh_copy; xor_byte "$D" 4 0x06; run                                        # version 4 -> 2
expect "a version 2 dump is a clear error" 1 "^error: .*dump version 2 has no yardsticks .*; regenerate"
fresh_copy; xor_byte "$D" 4 0x07; run                                        # version 4 -> 3
expect "a version 3 dump is a clear error" 1 "^error: .*dump version 3 has no gradient norms .*; regenerate"
fresh_copy; xor_byte "$D" $((YARDS + 4 * 58 + 3)) 0x40; run                  # the loss's yardstick -> huge
expect "a yardstick over 1e-3 is refused" 1 "^error: .*yardstick 58 is .*outside \\[0, 0.001\\]"
fresh_copy; truncate -s $((size - 4)) "$D"; run
expect "truncated dump is an error" 1 "^error: .*truncated or corrupted"
fresh_copy; xor_byte "$D" 0 0xff; run
expect "wrong magic is an error" 1 "^error: .*not a debug-state dump"
fresh_copy; cp "$WORK/dumps/pre/model.bin" "$WORK/dumps/siamese/model.bin"; run
expect "a model of another mode is an error" 1 "^error: .*holds a pre model, expected siamese"

echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
