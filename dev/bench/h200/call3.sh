#!/usr/bin/env bash
# device call 3 (commit 20c6040 as it stands): re-check and re-time the trainer (two kernels compiled differently from
# what call 2 ran), d12 at -r 3, then ncu's full sections of one launch of each of the three heaviest row/attention
# kernels of d12 siamese at B 64, to see what bounds them. Everything under $OUT/r3, packed after each part.
set -u
T0=$(date +%s)
R=$OUT/r3
mkdir -p "$R/logs"
el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$R/timeline.txt"; }
pack() { tar czf "$OUT/run3.tgz" --exclude='*.bin' --exclude=ref_dumps -C "$OUT" r3; }
el "gpu_check"
OUT=$R BUDGET_S=110 STAGES="env build test_bf16 timing kernels" bash dev/gpu_check.sh > "$R/console_gc.txt" 2>&1
cat "$R/summary.md"; pack
el "-r 3 at d12"
OUT=$R/bench_r3 OURS_ARGS="-r 3" DEPTHS=d12 T=1024 STEPS=12 WARMUP=4 TORCH=0 BATCHES=64 bash dev/bench_gpu.sh > "$R/console_r3.txt" 2>&1
grep -E "train_gpt2cu|siamese ms|memory" "$R/console_r3.txt" | head -8; pack
RUN=(./train_gpt2cu -i "$R/tokens.bin" -j "" -e d12 -N siamese -b 64 -t 1024 -v 0 -s 0 -x 2)
for k in siamese_input_backward_kernel flash_backward_kv_kernel siamese_input_forward_kernel layernorm_backward_kernel; do
    el "ncu $k"
    if [ $k = layernorm_backward_kernel ]; then RUNK=("${RUN[@]}" -N pre); else RUNK=("${RUN[@]}"); fi
    timeout 45 ncu --set full -k "regex:^$k" -s 3 -c 1 "${RUNK[@]}" > "$R/logs/ncu_$k.txt" 2>&1
    echo "ncu $k exit $?"; grep -E "Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Compute \(SM\) Throughput" "$R/logs/ncu_$k.txt" | head -8
    pack
done
el "done"; pack
