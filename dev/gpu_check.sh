#!/usr/bin/env bash
# dev/gpu_check.sh: the first bring-up of the CUDA trainer on a GPU (H100/H200), in one command of
# at most 9 minutes, with every log and a summary table under $OUT.
#
#   bash dev/gpu_check.sh             on the GPU machine, from a checkout of the repository
#   bash dev/gpu_check.sh --layer     the stages that need no GPU, with the CUDA binaries built
#                                     through the CPU execution layer (make test runs this)
#
# The stages, in this order (each with its own time budget; a failure or a timeout is recorded and
# the next stage runs; the whole call stops starting stages when BUDGET_S is spent):
#   env         nvidia-smi, driver, nvcc --version, the git commit, which profilers are installed
#   build       make -j8 train_gpt2 test_gpt2 train_gpt2cu test_gpt2cu train_gpt2cu_fp32
#               test_gpt2cu_fp32 (GPU_ARCH from the GPU's compute capability)
#   test_bf16   ./test_gpt2cu against data/test (each result on its own row)
#   test_fp32   ./test_gpt2cu_fp32 against data/test
#   test_shapes both tests on reference dumps test_gpt2 writes at two odd shapes: "odd" (C 200,
#               NH 5, T 80) and C 63, NH 7 (4C = 252 is not a multiple of 8: the GELU kernels run)
#   training    tests/test_cu_training.sh, bf16 then fp32: 20 steps of train_gpt2cu from a
#               checkpoint against train_gpt2's from the same checkpoint, a second run and a
#               resume compared bit for bit, samples
#   cross       tests/test_cross_checkpoint.sh: checkpoints between the CPU and the GPU trainer
#   cli         tests/test_train_cu_cli.sh: -h, flag errors, a 2-step run
#   sanitizer   compute-sanitizer memcheck (--leak-check full), racecheck, initcheck and synccheck
#               on ./test_gpt2cu and on a tiny run of each mode with sampling
#   timing      dev/bench_gpu.sh at d12, T=1024: the largest micro-batch B that fits for siamese,
#               pre and siamese at that B, with cuBLASLt's fused GELU and again with the GELU kernels
#   kernels     per-kernel GPU times of 5 steps of d12 siamese (nsys, else ncu --clock-control none)
#   dev_cuda    make -C dev/cuda and each experiment there against its CPU reference
#   shakespeare 200 steps of d6 siamese on tiny shakespeare with a sample (when the data is there)
#   torch       the PyTorch peer (dev/bench_gpu.sh with TORCH=1) where torch imports with CUDA
#
# Output: $OUT/summary.md (stage | result | seconds | note), $OUT/logs/<stage>.log, and what each
# stage writes (the benchmark tables, the nsys report). OUT defaults to ./out_gpu_check (git-ignored).
# Environment: OUT, STAGES (names to run, default all), BUDGET_S (default 530), GPU_ARCH,
#   SHAKESPEARE_DIR (default data/tinyshakespeare: tiny_shakespeare_{train,val}.bin and
#   tokenizer.bin as dev/data/tinyshakespeare.py writes them; git-ignored, so copy that folder to
#   the GPU machine with the checkout).
# In --layer mode the CUDA binaries are the CPU execution layer's builds (tests/cudacpu: make
# tests/bin/train_gpt2cu_cpu ...), and only the stages that need no GPU run (training, cross, cli
# by default; the layer's own make test target runs the two tests); the others are listed as
# skipped. Everything there is slow (every kernel runs on the CPU): smaller repeats.
set -u
cd "$(dirname "$0")/.."
SELF=dev/gpu_check.sh

# ---------------------------------------------------------------------------------------------
# one stage, run in a child process of this script: `bash dev/gpu_check.sh --run-stage NAME`.
# Exit status 0 pass, 1 fail, 77 skipped; the last line starting with "note: " is the summary note.

skip() { echo "note: $*"; exit 77; }
note() { echo "note: $*"; }
has() { command -v "$1" > /dev/null 2>&1; }

stage_env() {
    echo "== commit"; git rev-parse HEAD 2>&1; git status --short 2>&1 | head -20
    echo "== nvidia-smi"; nvidia-smi 2>&1
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm --format=csv 2>&1
    echo "== nvcc"; nvcc --version 2>&1
    echo "== tools"
    local t
    for t in compute-sanitizer nsys ncu python3; do printf '%-18s %s\n' "$t" "$(command -v "$t" || echo 'not found')"; done
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" 2>&1 | tail -n 1
    local gpu
    gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
    note "${gpu:-no GPU listed} | $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p') | commit $(git rev-parse --short HEAD 2>/dev/null)"
    [ -n "$gpu" ]
}

gpu_arch() {
    if [ -n "${GPU_ARCH:-}" ]; then echo "$GPU_ARCH"; return; fi
    nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. '
}

stage_build() {
    local arch
    arch=$(gpu_arch)
    [ -n "$arch" ] || arch=90
    echo "GPU_ARCH=$arch"
    make -j8 train_gpt2 test_gpt2 tests/bin/mkshard train_gpt2cu test_gpt2cu train_gpt2cu_fp32 test_gpt2cu_fp32 \
        GPU_ARCH="$arch" || { note "make failed"; return 1; }
    note "sm_$arch, both precisions"
}

# run_test BIN [DUMPS]: a test_gpt2cu build; the note is its last line
run_test() {
    [ -x "$1" ] || { note "$1 not built"; return 1; }
    local out=$OUT/logs/$(basename "$1")_$(basename "${2:-data_test}").txt rc
    "$@" > "$out" 2>&1
    rc=$?
    cat "$out"
    grep -q '): skipped: ' "$out" && skip "$(tail -n 1 "$out")"  # no device (a missing dump folder is fine)
    note "$(tail -n 1 "$out")"
    return $rc
}
stage_test_bf16() { run_test "$TEST_BF16"; }
stage_test_fp32() { run_test "$TEST_FP32"; }

stage_test_shapes() {
    local dir=$OUT/ref_dumps failures=0 shape name
    for shape in odd 2,63,7,301,40,2; do
        name=$dir/${shape//,/_}
        rm -rf "$name"
        ./test_gpt2 --write "$name" "$shape" > /dev/null || { echo "test_gpt2 --write $shape failed"; failures=$((failures + 1)); continue; }
        (run_test "$TEST_BF16" "$name") > "$OUT/logs/shape_bf16_${shape//,/_}.txt" || failures=$((failures + 1))
        (run_test "$TEST_FP32" "$name") > "$OUT/logs/shape_fp32_${shape//,/_}.txt" || failures=$((failures + 1))
        echo "== $shape"; cat "$OUT/logs/shape_bf16_${shape//,/_}.txt" "$OUT/logs/shape_fp32_${shape//,/_}.txt"
    done
    note "$failures failed of 4 (odd, C 63; bf16 and fp32)"
    [ "$failures" -eq 0 ]
}

stage_training() {
    local rc=0 p repeat=("pre post siamese" "pre post siamese")
    # through the layer the repeat and resume checks (host code, the same for every mode and
    # precision) run once: bf16 siamese
    [ "$GPU_CHECK_MODE" = layer ] && repeat=("siamese" "")
    GPU=$TRAIN_BF16 REPEAT_MODES=${repeat[0]} bash tests/test_cu_training.sh || rc=1
    GPU=$TRAIN_FP32 REPEAT_MODES=${repeat[1]} bash tests/test_cu_training.sh || rc=1
    note "largest relative step-loss difference: $(sed -n 's/^test_cu_training: largest .*(\([a-z0-9]*\)) against train_gpt2: /\1: /p' "$OUT/logs/training.log" | tr '\n' ' ')"
    return $rc
}

# bf16 within the script's default 2e-2, fp32 within 1e-4; through the layer on the arithmetic data
# with a smaller model (every step on the CPU)
stage_cross() {
    local rc=0 data=()
    [ "$GPU_CHECK_MODE" = layer ] && data=(DATA=arith SHAPE=d2c64h4)
    env "${data[@]}" GPU_TRAIN="$TRAIN_BF16" bash tests/test_cross_checkpoint.sh || rc=1
    env "${data[@]}" GPU_TRAIN="$TRAIN_FP32" TOL=1e-4 bash tests/test_cross_checkpoint.sh || rc=1
    note "$(grep -c ' ok$' "$OUT/logs/cross.log") checks ok, $(grep -c ' FAIL$' "$OUT/logs/cross.log") failed (bf16 and fp32)"
    return $rc
}

stage_cli() {
    TRAIN=$TRAIN_BF16 bash tests/test_train_cu_cli.sh
}

# a tiny run of MODE with sampling on the default data
tiny_run() { "$TRAIN_BF16" -e d2c64h4 -N "$1" -b 2 -t 32 -x 2 -v 0 -s 2 -g 40; }

stage_sanitizer() {
    has compute-sanitizer || skip "compute-sanitizer not found"
    make -s data/arithmetic
    local tool failures=0 runs=0 target log
    for tool in memcheck racecheck initcheck synccheck; do
        local extra=()
        [ "$tool" = memcheck ] && extra=(--leak-check full)
        for target in test pre post siamese; do
            log=$OUT/logs/sanitizer_${tool}_$target.txt
            runs=$((runs + 1))
            if [ "$target" = test ]; then
                compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 99 "$TEST_BF16" > "$log" 2>&1
            else
                compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 99 "$TRAIN_BF16" -e d2c64h4 -N "$target" \
                    -b 2 -t 32 -x 2 -v 0 -s 2 -g 40 > "$log" 2>&1
            fi
            local rc=$?
            printf '%-10s %-8s exit %3d  %s\n' "$tool" "$target" "$rc" "$(grep -m1 'ERROR SUMMARY' "$log")"
            [ $rc -eq 0 ] || failures=$((failures + 1))
        done
    done
    note "$failures of $runs sanitizer runs reported errors or failed (logs/sanitizer_*.txt)"
    [ "$failures" -eq 0 ]
}

stage_timing() {
    local rc=0 b
    echo "== fused GELU (cuBLASLt epilogues)"
    OUT=$OUT/bench_fused DEPTHS=d12 T=1024 STEPS=12 WARMUP=4 TORCH=0 bash dev/bench_gpu.sh || rc=1
    b=$(sed -nE 's/^\| d12 \| train_gpt2cu siamese \| ([0-9]+) .*/\1/p' "$OUT/bench_fused/bench_gpu.md" 2>/dev/null)
    [ -n "$b" ] || { note "no batch size ran for d12 siamese"; return 1; }
    echo "$b" > "$OUT/d12_batch"
    echo "== GELU kernels (TRAIN_GPT2CU_NO_GELU_FUSION=1), B=$b"
    TRAIN_GPT2CU_NO_GELU_FUSION=1 OUT=$OUT/bench_unfused DEPTHS=d12 T=1024 STEPS=12 WARMUP=4 TORCH=0 BATCHES=$b \
        bash dev/bench_gpu.sh || rc=1
    local f u
    f=$(awk -F'|' '/train_gpt2cu siamese/ {gsub(/ /, "", $5); print $5}' "$OUT/bench_fused/bench_gpu.md" | head -n 1)
    u=$(awk -F'|' '/train_gpt2cu siamese/ {gsub(/ /, "", $5); print $5}' "$OUT/bench_unfused/bench_gpu.md" 2>/dev/null | head -n 1)
    note "d12 T=1024 B=$b siamese: $f ms/step fused, ${u:-?} ms/step GELU kernels (bench_*/bench_gpu.md)"
    return $rc
}

stage_kernels() {
    local b
    b=$(cat "$OUT/d12_batch" 2>/dev/null || echo 8)
    make -s data/arithmetic
    local run=("$TRAIN_BF16" -e d12 -N siamese -b "$b" -t 1024 -x 5 -v 0 -s 0)
    if has nsys; then
        nsys profile --force-overwrite true --stats=false -o "$OUT/kernels" "${run[@]}" || { note "nsys profile failed"; return 1; }
        nsys stats --force-export=true --report cuda_gpu_kern_sum --format csv --output "$OUT/kernels" "$OUT/kernels.nsys-rep" > /dev/null &&
            nsys stats --report cuda_gpu_kern_sum "$OUT/kernels.nsys-rep" | head -n 40
        note "nsys: kernels_cuda_gpu_kern_sum.csv, kernels.nsys-rep (5 steps of d12 siamese, B=$b)"
    elif has ncu; then
        ncu --clock-control none --launch-skip 200 --launch-count 300 --csv --metrics gpu__time_duration.sum \
            "${run[@]}" > "$OUT/kernels_ncu.csv" || { note "ncu failed"; return 1; }
        note "ncu: kernels_ncu.csv (300 launches after the first 200, d12 siamese, B=$b)"
    else
        skip "neither nsys nor ncu found"
    fi
}

stage_dev_cuda() {
    make -C dev/cuda GPU_ARCH="$(gpu_arch)" || { note "make -C dev/cuda failed"; return 1; }
    local p failures=0
    for p in $(sed -n 's/^TARGETS = //p' dev/cuda/Makefile); do
        echo "== $p"
        "./dev/cuda/$p" || failures=$((failures + 1))
    done
    note "$failures dev/cuda programs failed"
    [ "$failures" -eq 0 ]
}

stage_shakespeare() {
    local d=${SHAKESPEARE_DIR:-data/tinyshakespeare}
    [ -f "$d/tiny_shakespeare_train.bin" ] || skip "no $d/tiny_shakespeare_train.bin: run dev/data/tinyshakespeare.py where tiktoken is installed and copy $d here (see doc/cuda.md)"
    "$TRAIN_BF16" -i "$d/tiny_shakespeare_train.bin" -j "$d/tiny_shakespeare_val.bin" -e d6 -N siamese -b 16 -t 256 \
        -l 1e-3 -u 20 -x 200 -v 100 -m 8 -s 200 -g 96 -o "$OUT/shakespeare" || { note "the run failed"; return 1; }
    note "val loss $(grep '^val loss' "$OUT/logs/shakespeare.log" | tail -n 1 | awk '{print $3}') after 200 steps of d6 siamese (sample in the log)"
}

stage_torch() {
    python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2> /dev/null ||
        skip "torch with CUDA does not import here (pip cannot reach PyPI from a machine without network): the PyTorch peer is not measured"
    local b
    b=$(cat "$OUT/d12_batch" 2>/dev/null || echo "32 16 8")
    OUT=$OUT/bench_torch DEPTHS=d12 T=1024 STEPS=12 WARMUP=4 TORCH=1 BATCHES="$b" bash dev/bench_gpu.sh
    note "bench_torch/bench_gpu.md"
}

ALL_STAGES="env build test_bf16 test_fp32 training cross cli test_shapes sanitizer timing kernels dev_cuda shakespeare torch"
# each stage's time budget in seconds (less when the total budget has less left)
declare -A BUDGETS=([env]=20 [build]=240 [test_bf16]=60 [test_fp32]=60 [training]=120 [cross]=90 [cli]=45
                    [test_shapes]=60 [sanitizer]=150 [timing]=150 [kernels]=60 [dev_cuda]=60 [shakespeare]=60 [torch]=150)
LAYER_STAGES="training cross cli"

# ---------------------------------------------------------------------------------------------
# the driver

MODE=gpu
case "${1:-}" in
    --run-stage) "stage_$2"; exit ;;
    --layer) MODE=layer ;;
    "") ;;
    *) echo "usage: $0 [--layer]" >&2; exit 2 ;;
esac

OUT=${OUT:-./out_gpu_check}
# through the layer every kernel runs on the CPU, on a machine that may be shared: 4x the budgets
scale=1
[ "$MODE" = layer ] && scale=4
BUDGET_S=${BUDGET_S:-$((530 * scale))}
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
if [ "$MODE" = layer ]; then
    TRAIN_BF16=tests/bin/train_gpt2cu_cpu TRAIN_FP32=tests/bin/train_gpt2cu_fp32_cpu
    TEST_BF16=tests/bin/test_gpt2cu_cpu TEST_FP32=tests/bin/test_gpt2cu_fp32_cpu
    STAGES=${STAGES:-$LAYER_STAGES}
    make --no-print-directory train_gpt2 tests/bin/mkshard $TRAIN_BF16 $TRAIN_FP32 > "$OUT/logs/layer_build.log" 2>&1 ||
        { cat "$OUT/logs/layer_build.log"; echo "dev/gpu_check.sh --layer: the execution layer builds failed" >&2; exit 1; }
else
    TRAIN_BF16=./train_gpt2cu TRAIN_FP32=./train_gpt2cu_fp32 TEST_BF16=./test_gpt2cu TEST_FP32=./test_gpt2cu_fp32
    STAGES=${STAGES:-$ALL_STAGES}
fi
GPU_CHECK_MODE=$MODE
export GPU_CHECK_MODE OUT TRAIN_BF16 TRAIN_FP32 TEST_BF16 TEST_FP32 GPU_ARCH="${GPU_ARCH:-}" SHAKESPEARE_DIR="${SHAKESPEARE_DIR:-}"

start=$(date +%s)
summary="| stage | result | seconds | note |"$'\n'"|---|---|---|---|"$'\n'
failed=0
echo "dev/gpu_check.sh ($MODE): stages $STAGES; logs in $OUT/logs; at most $BUDGET_S s"
for s in $ALL_STAGES; do
    if [[ " $STAGES " != *" $s "* ]]; then
        [ "$MODE" = layer ] && summary+="| $s | skipped | 0 | not run in --layer mode |"$'\n'
        continue
    fi
    left=$((BUDGET_S - ($(date +%s) - start)))
    budget=$((BUDGETS[$s] * scale))
    [ "$left" -lt "$budget" ] && budget=$left
    if [ "$budget" -lt 10 ]; then
        summary+="| $s | not run | 0 | the $BUDGET_S s budget was spent |"$'\n'
        continue
    fi
    log=$OUT/logs/$s.log
    t0=$(date +%s)
    timeout -k 10 "$budget" bash "$SELF" --run-stage "$s" > "$log" 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
    note=$(grep '^note: ' "$log" | tail -n 1 | sed 's/^note: //; s/|/\//g')
    case $rc in
        0) result=PASS ;;
        77) result=skipped ;;
        124|137) result=TIMEOUT; note="over its $budget s budget; ${note}"; failed=$((failed + 1)) ;;
        *) result=FAIL; failed=$((failed + 1)) ;;
    esac
    [ -n "$note" ] || note=$(grep -v '^$' "$log" | tail -n 1 | cut -c1-150 | sed 's/|/\//g')
    printf '%-12s %-8s %4ds  %s\n' "$s" "$result" "$secs" "$note"
    summary+="| $s | $result | $secs | $note |"$'\n'
done
total=$(($(date +%s) - start))
{
    echo "# dev/gpu_check.sh ($MODE), $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null)"
    echo
    printf '%s' "$summary"
    echo
    echo "$failed stage(s) failed or timed out; $total s in all. Logs: $OUT/logs/"
} > "$OUT/summary.md"
echo
cat "$OUT/summary.md"
[ "$failed" -eq 0 ]
