#!/usr/bin/env bash
# device call 5 (commit 73a168c): the LayerNorm backwards' shared-memory fix re-checked (test_gpt2cu in both precisions
# and at the odd shapes, 20 training steps against train_gpt2), then d12 and d24 against compiled PyTorch (siamese),
# each in this call. Everything under $OUT/r5, packed after each part.
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-440}
R=$OUT/r5
mkdir -p "$R/logs"
el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$R/timeline.txt"; }
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
pack() { tar czf "$OUT/run5.tgz" --exclude='*.bin' --exclude=ref_dumps -C "$OUT" r5; }
el "gpu_check"
OUT=$R BUDGET_S=150 STAGES="env build test_bf16 build_rest test_fp32 test_shapes training" bash dev/gpu_check.sh \
    > "$R/console_gc.txt" 2>&1
cat "$R/summary.md"; pack
el "d12 with compiled PyTorch (siamese)"
OUT=$R/bench_d12 DEPTHS=d12 T=1024 STEPS=12 WARMUP=4 TORCH=1 TORCH_MODES=siamese BATCHES=64 bash dev/bench_gpu.sh \
    > "$R/console_d12.txt" 2>&1
tail -n 12 "$R/console_d12.txt"; pack
L=$(left); el "left $L s: d24 with compiled PyTorch (siamese)"
if [ "$L" -gt 100 ]; then
    timeout $((L - 5)) env OUT="$R/bench_d24" DEPTHS=d24 T=1024 STEPS=8 WARMUP=3 TORCH=1 TORCH_MODES=siamese BATCHES=64 \
        bash dev/bench_gpu.sh > "$R/console_d24.txt" 2>&1
    echo "d24 exit $?"; tail -n 14 "$R/console_d24.txt"
fi
el "done"; pack
