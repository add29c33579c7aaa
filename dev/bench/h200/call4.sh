#!/usr/bin/env bash
# device call 4: the candidate tree (.gpu/cand, a git archive, or this checkout): the trainer's correctness in both
# precisions and at the odd shapes, 20 training steps against train_gpt2, d12 timing and the per-kernel profile, the
# dev/cuda experiments of the changed kernels (every version against its CPU reference, timed), racecheck on the
# attention kernels, then d12 against compiled PyTorch (siamese) in the same call. Everything under $OUT/r4.
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-330}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
R=$OUT/r4
mkdir -p "$R/logs"
el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$R/timeline.txt"; }
pack() { tar czf "$OUT/run4.tgz" --exclude='*.bin' --exclude=ref_dumps -C "$OUT" r4; }
[ -d .gpu/cand ] && cd .gpu/cand
el "tree: $(pwd) $(cat COMMIT 2>/dev/null)"
el "gpu_check"
OUT=$R BUDGET_S=170 STAGES="env build test_bf16 timing kernels build_rest test_fp32 test_shapes training" \
    bash dev/gpu_check.sh > "$R/console_gc.txt" 2>&1
cat "$R/summary.md"; pack
el "dev/cuda"
make -C dev/cuda -j16 GPU_ARCH=90 attention_forward attention_backward siamese_input_backward siamese_input_forward \
    layernorm > "$R/logs/dev_cuda_build.txt" 2>&1 || tail -20 "$R/logs/dev_cuda_build.txt"
for job in "attention_backward" "attention_backward T=1024 NH=6 HS=128" "siamese_input_backward" \
        "siamese_input_backward 4 N=65536" "siamese_input_backward 5 N=65536" "layernorm" "layernorm 2 N=65536" \
        "layernorm 3 N=65536" "attention_forward 5"; do
    f="$R/logs/dev_cuda_$(echo $job | tr ' =' '__').txt"
    timeout 40 ./dev/cuda/$job > "$f" 2>&1; echo "== $job: exit $?" | tee -a "$f"
    grep -E "^  v|match|FAIL|fail|skipped" "$f" | head -24
done
python3 dev/cuda/attention_sdpa.py > "$R/logs/attention_sdpa.txt" 2>&1; echo "sdpa exit $?"; tail -n 3 "$R/logs/attention_sdpa.txt"
pack
el "racecheck"
make -s data/arithmetic > /dev/null 2>&1
timeout 40 compute-sanitizer --tool racecheck --error-exitcode 99 ./train_gpt2cu -e d1c96h2 -t 144 -N siamese -b 1 -x 1 \
    -v 0 -s 0 -H "" > "$R/logs/sanitizer_racecheck_c96h2.txt" 2>&1
echo "racecheck c96h2 exit $? $(grep -m1 -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$R/logs/sanitizer_racecheck_c96h2.txt")"
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 99 ./train_gpt2cu -e d1c96h2 -t 144 -N siamese -b 2 -x 1 \
    -v 0 -s 0 -H "" > "$R/logs/sanitizer_memcheck_c96h2.txt" 2>&1
echo "memcheck c96h2 exit $? $(grep -m1 -E 'ERROR SUMMARY' "$R/logs/sanitizer_memcheck_c96h2.txt")"
pack
L=$(left); el "left $L s: d12 with compiled PyTorch (siamese)"
[ "$L" -gt 110 ] && timeout $((L - 5)) env OUT=$R/bench_torch DEPTHS=d12 T=1024 STEPS=12 WARMUP=4 TORCH=1 TORCH_MODES=siamese BATCHES=64 bash dev/bench_gpu.sh \
    > "$R/console_torch.txt" 2>&1
tail -n 14 "$R/console_torch.txt"
el "done"; pack
