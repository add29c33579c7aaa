#!/usr/bin/env bash
# device call 1: the current main on the GPU: speed first, then the PyTorch peer, then correctness
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-420}
G=$OUT/gc
mkdir -p "$G/logs"
el() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$G/timeline.txt"; }
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
gc() { local tag=$1 budget=$2; shift 2
    el "gpu_check $tag: $*"
    env OUT="$G" BUDGET_S="$budget" STAGES="$*" bash dev/gpu_check.sh > "$G/console_$tag.txt" 2>&1
    cp "$G/summary.md" "$G/summary_$tag.md"; cat "$G/summary_$tag.md"; }
gc A 170 "env build test_bf16 timing kernels"
el "attention dev/cuda"
make -C dev/cuda -j16 GPU_ARCH=90 attention_forward attention_backward > "$G/logs/dev_cuda_build_att.txt" 2>&1
timeout 60 ./dev/cuda/attention_forward > "$G/logs/dev_cuda_attention_forward.txt" 2>&1
timeout 60 ./dev/cuda/attention_backward > "$G/logs/dev_cuda_attention_backward.txt" 2>&1
tail -n 30 "$G/logs/dev_cuda_attention_forward.txt" "$G/logs/dev_cuda_attention_backward.txt"
gc B 200 "torch"
gc C 130 "build_rest test_fp32 test_shapes training cli"
L=$(left); el "left $L s"
if [ "$L" -gt 40 ]; then
    make -C dev/cuda -j16 GPU_ARCH=90 > "$G/logs/dev_cuda_build_all.txt" 2>&1
    for p in siamese_input_forward siamese_input_backward classifier layernorm column_sums vec_kernels encoder_backward; do
        L=$(left); [ "$L" -gt 30 ] || break
        el "dev/cuda $p"
        timeout $((L - 20)) "./dev/cuda/$p" > "$G/logs/dev_cuda_$p.txt" 2>&1; echo "exit $?" >> "$G/logs/dev_cuda_$p.txt"
    done
fi
L=$(left); el "left $L s"
if [ "$L" -gt 45 ]; then
    el "d24 ours"
    timeout $((L - 10)) env OUT="$G/bench_d24" DEPTHS=d24 T=1024 STEPS=10 WARMUP=3 TORCH=0 BATCHES="64 32" bash dev/bench_gpu.sh > "$G/console_d24.txt" 2>&1
    tail -n 25 "$G/console_d24.txt"
fi
el "done"
rm -f "$G"/tokens.bin; rm -rf "$G/ref_dumps"
tar czf "$OUT/run1.tgz" -C "$OUT" gc
ls -la "$OUT"
