#!/usr/bin/env bash
# device call 2: the candidate tree (.gpu/cand, a git archive) or this checkout: correctness and timing of the
# trainer, the attention experiments, racecheck on the attention kernels, -r 2 and -r 3 (memory, time, the same bits),
# then d24 against compiled PyTorch with what time is left. Everything under $OUT/r2, packed after each part.
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-360}
R=$OUT/r2
mkdir -p "$R/logs"
el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$R/timeline.txt"; }
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
pack() { tar czf "$OUT/run2.tgz" --exclude=tokens.bin --exclude=ref_dumps --exclude='*.bin' -C "$OUT" r2; }
[ -d .gpu/cand ] && cd .gpu/cand
el "tree: $(pwd) $(cat COMMIT 2>/dev/null)"
(ls /usr/local/cuda/lib64/libcublasLt.so.* 2>&1; nvidia-smi -q 2>/dev/null | grep -iE "product name|current power limit|max power limit|persistence") > "$R/logs/env_extra.txt"
el "gpu_check"
OUT=$R BUDGET_S=170 STAGES="env build test_bf16 timing kernels build_rest test_fp32 test_shapes training" \
    bash dev/gpu_check.sh > "$R/console_gc.txt" 2>&1
cat "$R/summary.md"; pack
el "dev/cuda attention"
make -C dev/cuda -j16 GPU_ARCH=90 attention_forward attention_backward > "$R/logs/dev_cuda_build.txt" 2>&1 || tail -20 "$R/logs/dev_cuda_build.txt"
timeout 50 ./dev/cuda/attention_forward > "$R/logs/dev_cuda_attention_forward.txt" 2>&1; echo "exit $?" >> "$R/logs/dev_cuda_attention_forward.txt"
grep -E "^  v|match|exit|FAIL|fail" "$R/logs/dev_cuda_attention_forward.txt"
timeout 30 ./dev/cuda/attention_forward T=1024 NH=6 HS=128 > "$R/logs/dev_cuda_attention_forward_hs128.txt" 2>&1; echo "exit $?" >> "$R/logs/dev_cuda_attention_forward_hs128.txt"
grep -E "^  v|match|exit|FAIL|fail" "$R/logs/dev_cuda_attention_forward_hs128.txt"
(nvcc -O2 -std=c++17 -I. -arch=sm_90 tests/cudacpu/test_mma.cu -o /tmp/test_mma && /tmp/test_mma) > "$R/logs/test_mma.txt" 2>&1; echo "test_mma exit $?"; tail -n 4 "$R/logs/test_mma.txt"
make -s data/arithmetic > /dev/null 2>&1
timeout 40 compute-sanitizer --tool racecheck --error-exitcode 99 ./train_gpt2cu -e d1c96h2 -t 144 -N siamese -b 1 -x 1 -v 0 -s 0 -H "" \
    > "$R/logs/sanitizer_racecheck_c96h2.txt" 2>&1
echo "racecheck c96h2 exit $? $(grep -m1 -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$R/logs/sanitizer_racecheck_c96h2.txt")"
pack
for r in 2 3; do
    el "-r $r at d12"
    OUT=$R/bench_r$r OURS_ARGS="-r $r" DEPTHS=d12 T=1024 STEPS=12 WARMUP=4 TORCH=0 BATCHES=64 bash dev/bench_gpu.sh > "$R/console_r$r.txt" 2>&1
    grep -E "train_gpt2cu|siamese ms|memory" "$R/console_r$r.txt" | head -8
done
el "-r 2 against -r 3, bit for bit"
for r in 2 3; do
    ./train_gpt2cu -e d12 -N siamese -b 16 -t 1024 -x 5 -v 0 -s 0 -k 0 -H "" -r $r -o "$R/ck_r$r" > "$R/logs/bits_r$r.txt" 2>&1
done
diff <(grep '^step' "$R/logs/bits_r2.txt" | sed 's/ | [0-9.]* ms |.*//') <(grep '^step' "$R/logs/bits_r3.txt" | sed 's/ | [0-9.]* ms |.*//') &&
    cmp "$R/ck_r2/model_00000005.bin" "$R/ck_r3/model_00000005.bin" && cmp "$R/ck_r2/state_00000005.bin" "$R/ck_r3/state_00000005.bin" &&
    echo "-r 3 bit-identical to -r 2" | tee "$R/logs/bits.txt" || { echo "-r 3 DIFFERS" | tee "$R/logs/bits.txt"; ls "$R/ck_r2" "$R/ck_r3"; }
rm -rf "$R/ck_r2" "$R/ck_r3"; pack
L=$(left); el "left $L s: d24 with the PyTorch peer"
if [ "$L" -gt 60 ]; then
    timeout $((L - 5)) env OUT="$R/bench_d24" DEPTHS=d24 T=1024 STEPS=8 WARMUP=3 TORCH=1 BATCHES=64 bash dev/bench_gpu.sh > "$R/console_d24.txt" 2>&1
    echo "d24 exit $?"; tail -n 22 "$R/console_d24.txt"
fi
el "done"; pack
