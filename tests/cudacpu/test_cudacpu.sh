#!/usr/bin/env bash
# tests/cudacpu/test_cudacpu.sh: the CUDA sources executed on the CPU through the execution layer
# (tests/cudacpu/README.md): the layer's WMMA and misuse checks, the host's waits in a training
# step of train_gpt2.cu (tests/cudacpu/test_blocking.sh), what the thread schedules do
# (tests/cudacpu/test_schedule.sh), test_gpt2.cu (the CUDA trainer's parity test) in FP32 and BF16
# under several thread schedules, on the stored dumps and on the `odd` and a flash-attention shape
# the CPU trainer writes, and the planted bugs the test must catch.
# make test-cudacpu builds what this needs (tests/bin/*_cpu, ./test_gpt2) and runs it.
set -euo pipefail
cd "$(dirname "$0")/../.."

tmp=$(mktemp -d /tmp/test_cudacpu.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
log=$tmp/log.txt
failed=0

# run_test NAME SCHEDULE BINARY [DUMPS]: every mode, fused and separate GELU, must pass
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

# attention.cuh's ldmatrix and mma emulation against the PTX ISA's register layouts (BF16 and FP32 builds)
for prec in "" _fp32; do
    if tests/bin/test_mma${prec}_cpu > "$log" 2>&1; then
        echo "test-cudacpu: ldmatrix and mma.m16n8k16${prec:+ (FP32)}: $(cat "$log")"
    else
        cat "$log"
        echo "test-cudacpu: ldmatrix and mma.m16n8k16${prec:+ (FP32)}: FAILED"
        failed=1
    fi
done

# barrier, shuffle, WMMA and memory misuse the layer must report
bash tests/cudacpu/test_misuse.sh || failed=1

# what the schedules do: warps of a block alone between barriers (warp, warp-reverse), races they show
bash tests/cudacpu/test_schedule.sh || failed=1

# where the trainer's host waits for the GPU in a training step: the losses, the norm, the clock
bash tests/cudacpu/test_blocking.sh || failed=1

# FP32 (every mode, both GELU paths, within one run): threads of a block in reverse order, then a
# seeded shuffle (a missing barrier shows under one or the other)
run_test "test_gpt2cu FP32" reverse tests/bin/test_gpt2cu_fp32_cpu
run_test "test_gpt2cu FP32" shuffle:1 tests/bin/test_gpt2cu_fp32_cpu

# BF16: every mode must pass, siamese_trained included (its numbers that bf16 cannot determine,
# where PyTorch float32's error times 2^16 exceeds 0.1, are printed but not counted by test_gpt2cu)
# all_passed MODE: the log has runs of MODE and every one passed
all_passed() { grep -q "^\[$1\] (.*) PASSED$" "$log" && ! grep -q "^\[$1\] (.*) FAILED$" "$log"; }
start=$SECONDS
CUDACPU_SCHEDULE=shuffle:2 tests/bin/test_gpt2cu_cpu > "$log" 2>&1 || true
if all_passed pre && all_passed post && all_passed siamese && all_passed siamese_trained; then
    echo "test-cudacpu: test_gpt2cu BF16, schedule shuffle:2: pre, post, siamese, siamese_trained: $(grep -c -E '^\[(pre|post|siamese|siamese_trained)\] \(.*PASSED$' "$log") mode runs passed ($((SECONDS - start)) s)"
else
    cat "$log"
    echo "test-cudacpu: test_gpt2cu BF16, schedule shuffle:2: FAILED"
    failed=1
fi

# the odd reference shape (C 200, NH 5, T 80, V 301) the CPU trainer writes: head size 40, which
# attention pads to 64 (data/test's head size 16 needs no padding). Its batches are the embedding
# gradient's two extremes: FP32 on one where a token fills half the 160 positions (80: two chunks
# of the work list, 64 and 16), BF16 on one where every position has a different token
for tokens in half distinct; do
    ./test_gpt2 --write "$tmp/odd_$tokens" odd $tokens > "$log" 2>&1 ||
        { cat "$log"; echo "test-cudacpu: ./test_gpt2 --write odd $tokens FAILED"; exit 1; }
done
run_test "test_gpt2cu FP32, odd shape, a token at half the positions" shuffle:3 tests/bin/test_gpt2cu_fp32_cpu "$tmp/odd_half"
run_test "test_gpt2cu BF16, odd shape, every token different" reverse tests/bin/test_gpt2cu_cpu "$tmp/odd_distinct"

# each warp of a block alone between barriers, first to last and last to first (a barrier missing
# between warps with warp operations between the racing accesses shows only here): BF16 (WMMA
# tiles) on a shape where flash attention streams several key tiles through shared memory with
# the rows of every warp inside T (L 1, C 96, NH 2: head size 48; V 97; T 144: query and key tiles
# of 64, 64 and 16; B 1)
./test_gpt2 --write "$tmp/flash" 1,96,2,97,144,1 > "$log" 2>&1 || { cat "$log"; echo "test-cudacpu: ./test_gpt2 --write flash shape FAILED"; exit 1; }
run_test "test_gpt2cu BF16, flash shape" warp tests/bin/test_gpt2cu_cpu "$tmp/flash"
run_test "test_gpt2cu BF16, flash shape" warp-reverse tests/bin/test_gpt2cu_cpu "$tmp/flash"

# each planted bug must make the test fail (FP32; BF16 where the plant says so)
bash tests/cudacpu/test_planted.sh || failed=1

exit $failed
