#!/usr/bin/env bash
# dev/gpu_check.sh: the first bring-up of the CUDA trainer on a GPU (H100/H200), in one command of
# at most 9 minutes, with every log and a summary table under $OUT. GPU time is scarce, so it
# times first: speed, the kernel versions and the per-kernel profile against the written cost
# model (dev/roofline.py) come before the correctness stages, sanitizers and the PyTorch peer.
#
#   bash dev/gpu_check.sh             on the GPU machine, from a checkout of the repository
#   bash dev/gpu_check.sh --layer     the stages that need no GPU, with the CUDA binaries built
#                                     through the CPU execution layer (make test runs this)
#
# The stages, in this order (each with its own time budget; a failure or a timeout is recorded and
# the next stage runs; the whole call stops starting stages when BUDGET_S is spent):
#   env         nvidia-smi, driver, nvcc --version, the git commit, which profilers are installed
#   selftest    this script's parsing on canned output, before it parses real output: dev/roofline.py
#               --self-test, the profile joins (an nsys summary, an ncu profile of whole steps) and
#               the dev/cuda summary below, dev/bench_gpu.sh --self-test (step lines, GPU polling);
#               in --layer mode also the model's launch order against the trainer's (dev/roofline.py
#               --launches on a CUDACPU_LAUNCH_LOG of a step in each mode, two in siamese), and that
#               each of the trainer's NVTX ranges "step" holds exactly one modelled step (--step-ranges
#               on tests/cudacpu/nvtx_ranges.c's log of the two-step run)
#   build       only what the timing needs: make -j16 train_gpt2cu test_gpt2cu tests/bin/mkshard
#               (bf16; GPU_ARCH from the GPU's compute capability)
#   test_bf16   ./test_gpt2cu against data/test (each result on its own row)
#   timing      dev/bench_gpu.sh at d12, T=1024 on random tokens of GPT-2's 50257: the largest
#               micro-batch B that fits for siamese, then pre at that B: ms/step, tokens/s, MFU by
#               our formula and by llm.c's, beside dev/roofline.py's lower bound for that B, and the
#               median SM clock and power during the timed steps (nvidia-smi polled every 100 ms)
#   dev_cuda    make -C dev/cuda; each experiment at its real sizes; one line per timed job: every
#               version's time, the trainer's marked, and the trainer's over the fastest other's
#   kernels     per-kernel GPU times of whole steps of the timing's d12 siamese run: ncu on the
#               trainer's NVTX range "step" for 3 steps (nsys: 5 steps), joined with
#               dev/roofline.py's model: measured launches and ms per step of every kernel (steps 2
#               and 3, checked to launch the same kernels as step 1) against predicted, cuBLASLt's
#               time by matmul call, and the kernels' sum against the timing's wall-clock step
#               (kernels_vs_model.md)
#   build_rest  make -j16 train_gpt2 test_gpt2 train_gpt2cu_fp32 test_gpt2cu_fp32
#   test_fp32   ./test_gpt2cu_fp32 against data/test
#   test_shapes both tests on reference dumps test_gpt2 writes at two odd shapes: "odd" (C 200,
#               NH 5, T 80) and C 63, NH 7 (4C = 252 is not a multiple of 8: the GELU kernels run)
#   training    tests/test_cu_training.sh, bf16 then fp32: 20 steps of train_gpt2cu from a
#               checkpoint against train_gpt2's from the same checkpoint, a second run and a
#               resume compared bit for bit, samples
#   cross       tests/test_cross_checkpoint.sh: checkpoints between the CPU and the GPU trainer
#   cli         tests/test_train_cu_cli.sh: -h, flag errors, a 2-step run
#   sanitizer   compute-sanitizer: memcheck (--leak-check full) on ./test_gpt2cu and a tiny run of each
#               mode with sampling; racecheck and synccheck on those runs and on one with three key
#               tiles of attention; initcheck on the FP32 build's runs (stage_sanitizer says why)
#   shakespeare 200 steps of d6 siamese on tiny shakespeare with a sample (when the data is there)
#   torch       where torch imports with CUDA: dev/cuda/attention_sdpa.py (SDPA flash attention at
#               dev/cuda's attention shapes, against the trainer's kernels' times from dev_cuda),
#               then the PyTorch peer (dev/bench_gpu.sh with TORCH=1)
# Timing starts about a minute into the call: nvcc -O3 builds train_gpt2cu in 12 s of CPU (26 s wall
# on a loaded 2-core machine), test_gpt2cu about as long, the two in parallel at -j16; test_bf16
# takes seconds on a GPU. At the default budget the stages after kernels may not all start: run
# them in a second call, e.g. STAGES="build_rest test_fp32 test_shapes training cross cli sanitizer".
#
# Output: $OUT/summary.md (stage | result | seconds | note), $OUT/logs/<stage>.log, and what each
# stage writes (the benchmark tables, kernels_vs_model.md, the profile: kernels_ncu.csv or the nsys
# report). OUT defaults to ./out_gpu_check (git-ignored).
# Environment: OUT, STAGES (names to run, default all), BUDGET_S (default 530), GPU_ARCH,
#   SHAKESPEARE_DIR (default data/tinyshakespeare: tiny_shakespeare_{train,val}.bin and
#   tokenizer.bin as dev/data/tinyshakespeare.py writes them; git-ignored, so copy that folder to
#   the GPU machine with the checkout).
# In --layer mode the CUDA binaries are the CPU execution layer's builds (tests/cudacpu: make
# tests/bin/train_gpt2cu_cpu ...), and only the stages that need no GPU run (training, cross, cli
# and selftest by default; the layer's own make test target runs the two tests); the others are
# listed as skipped. Everything there is slow (every kernel runs on the CPU): smaller repeats.
set -u
cd "$(dirname "$0")/.."
SELF=dev/gpu_check.sh
source dev/lib.sh  # calc

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

build_arch() {
    local arch
    arch=$(gpu_arch)
    echo "${arch:-90}"
}

# what the timing needs, first; the rest (the CPU trainer and tests, the fp32 builds) in build_rest
stage_build() {
    local arch
    arch=$(build_arch)
    echo "GPU_ARCH=$arch"
    make -j16 train_gpt2cu test_gpt2cu tests/bin/mkshard GPU_ARCH="$arch" || { note "make failed"; return 1; }
    note "sm_$arch, bf16: train_gpt2cu, test_gpt2cu"
}

stage_build_rest() {
    local arch
    arch=$(build_arch)
    make -j16 train_gpt2 test_gpt2 train_gpt2cu_fp32 test_gpt2cu_fp32 GPU_ARCH="$arch" || { note "make failed"; return 1; }
    note "sm_$arch: train_gpt2, test_gpt2, the fp32 builds"
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

# sanitize TOOL NAME BINARY ARGS...: one compute-sanitizer run, logged as sanitizer_TOOL_NAME.txt;
# returns the run's exit status (99: the tool reported errors)
sanitize() {
    local tool=$1 name=$2 log=$OUT/logs/sanitizer_$1_$2.txt extra=()
    shift 2
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 99 "$@" > "$log" 2>&1
    local rc=$?
    printf '%-10s %-13s exit %3d  %s\n' "$tool" "$name" "$rc" "$(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log")"
    return $rc
}

# The tiny runs (d2c64h4, B 2, T 32, two steps) sample 40 tokens, so every sequence length 1..32
# runs; "tiles" is one step at HS 48 (padded to 64) and T 144, three key tiles of the attention
# kernels, for racecheck and synccheck. memcheck also runs ./test_gpt2cu (racecheck on it takes
# minutes on an H100). initcheck runs the FP32 build: on an H100 it flags reads of what cuBLASLt's
# bf16 kernels wrote (dev/cuda/initcheck_probe.cu: a bf16 product that holds the right values is
# reported uninitialized, the fp32 one is not), so the bf16 build's initcheck is reported per kernel
# beside the probe's verdict and counts only when the probe is clean.
stage_sanitizer() {
    has compute-sanitizer || skip "compute-sanitizer not found"
    make -s data/arithmetic
    [ -x "$TRAIN_FP32" ] || make -j16 train_gpt2cu_fp32 GPU_ARCH="$(build_arch)" > /dev/null || { note "train_gpt2cu_fp32 did not build"; return 1; }
    local failures=0 runs=0 mode tool
    local tiny=(-e d2c64h4 -b 2 -t 32 -x 2 -v 0 -s 2 -g 40 -H "") tiles=(-e d1c96h2 -N siamese -b 1 -t 144 -x 1 -v 0 -s 0 -H "")
    count() { runs=$((runs + 1)); "$@" || failures=$((failures + 1)); }
    count sanitize memcheck test "$TEST_BF16"
    for mode in pre post siamese; do count sanitize memcheck "$mode" "$TRAIN_BF16" -N "$mode" "${tiny[@]}"; done
    for tool in racecheck synccheck; do
        for mode in pre post siamese; do count sanitize "$tool" "$mode" "$TRAIN_BF16" -N "$mode" "${tiny[@]}"; done
        count sanitize "$tool" tiles "$TRAIN_BF16" "${tiles[@]}"
    done
    for mode in pre post siamese; do count sanitize initcheck "fp32_$mode" "$TRAIN_FP32" -N "$mode" "${tiny[@]}"; done
    # the bf16 build under initcheck, after the probe
    local probe=$OUT/initcheck_probe probe_clean=0
    nvcc -O2 -arch="sm_$(build_arch)" dev/cuda/initcheck_probe.cu -o "$probe" -lcublasLt || { note "the probe did not build"; return 1; }
    sanitize initcheck probe_bf16 "$probe" && probe_clean=1
    sanitize initcheck bf16_siamese "$TRAIN_BF16" -N siamese "${tiny[@]}"
    local rc=$?
    echo "initcheck bf16_siamese, flagged reads by kernel:"
    grep -A1 '^========= Uninit' "$OUT/logs/sanitizer_initcheck_bf16_siamese.txt" | sed -nE 's/^=========     at (void )?([A-Za-z_:]+).*/\2/p' | sort | uniq -c | sort -rn
    if [ "$probe_clean" = 1 ]; then
        runs=$((runs + 1))
        [ $rc -eq 0 ] || failures=$((failures + 1))
    else
        echo "the probe's cuBLASLt bf16 output is flagged too: the bf16 initcheck is not counted"
    fi
    note "$failures of $runs sanitizer runs reported errors or failed (logs/sanitizer_*.txt)"
    [ "$failures" -eq 0 ]
}

# the d12 run the timing and the profile share: T 1024 on random tokens of GPT-2's vocabulary (on
# the 257-token arithmetic data the classifier and the embedding gradient would all but vanish)
D12_T=1024
d12_batch() { cat "$OUT/d12_batch" 2>/dev/null || echo 8; }

# predicted MODE B: dev/roofline.py's lower bound of one d12 step (ms), "?" without python3
predicted() {
    has python3 || { echo "?"; return; }
    python3 dev/roofline.py -e d12 -N "$1" -b "$2" -t "$D12_T" | sed -nE 's/^Predicted step time \(the sum\): \*\*([0-9.]+) ms.*/\1/p'
}

# bench_field MD RUN FIELD: a field of RUN's row ("train_gpt2cu siamese") in a bench_gpu.md table:
# 4 B, 5 ms/step, 6 tok/s, 7 MFU % (ours), 8 MFU % (llm.c's formula), 12 SM clock MHz and 13 power W
# (medians during the timed steps)
bench_field() {
    awk -F'|' -v run="$2" -v f="$3" '$3 ~ run {gsub(/ /, "", $f); print $f; exit}' "$1" 2>/dev/null
}

stage_timing() {
    local rc=0 b mode md=$OUT/bench/bench_gpu.md
    OUT=$OUT/bench DEPTHS=d12 T=$D12_T STEPS=12 WARMUP=4 TORCH=0 bash dev/bench_gpu.sh || rc=1
    b=$(bench_field "$md" "train_gpt2cu siamese" 4)
    [[ $b =~ ^[0-9]+$ ]] || { note "no batch size ran for d12 siamese"; return 1; }
    echo "$b" > "$OUT/d12_batch"
    local line="d12 T=$D12_T B=$b:"
    echo
    echo "measured against dev/roofline.py's lower bound (H100 SXM: 3.35 TB/s, 989 TFLOP/s):"
    for mode in siamese pre; do
        local ms pred
        ms=$(bench_field "$md" "train_gpt2cu $mode" 5)
        pred=$(predicted "$mode" "$b")
        local gpu
        gpu="SM $(bench_field "$md" "train_gpt2cu $mode" 12) MHz, $(bench_field "$md" "train_gpt2cu $mode" 13) W"
        printf '  %-8s %9s ms/step, lower bound %s ms (%s x), %s tok/s, MFU %s%% (llm.c formula %s%%), %s\n' "$mode" "$ms" \
            "$pred" "$(calc 'a/b' a="$ms" b="$pred")" "$(bench_field "$md" "train_gpt2cu $mode" 6)" \
            "$(bench_field "$md" "train_gpt2cu $mode" 7)" "$(bench_field "$md" "train_gpt2cu $mode" 8)" "$gpu"
        line+=" $mode ${ms:-?} ms (bound ${pred}), MFU $(bench_field "$md" "train_gpt2cu $mode" 7)% / llm.c $(bench_field "$md" "train_gpt2cu $mode" 8)%, $gpu;"
    done
    note "$line bench/bench_gpu.md"
    return $rc
}

# kernels_join CSV MODE B STEPS [WALL_MS]: the profile (nsys kern_sum or ncu CSV) against
# dev/roofline.py's model of the d12 step, into $OUT/kernels_vs_model.md; STEPS 0 for a sample of
# launches; WALL_MS, the step's wall-clock time, is set against the kernels' sum
kernels_join() {
    has python3 || { echo "python3 not found: the profile is not joined with the model"; return 1; }
    python3 dev/roofline.py --join "$1" -e d12 -N "$2" -b "$3" -t "$D12_T" --steps "$4" --wall-ms "${5:-0}" > "$OUT/kernels_vs_model.md" || return 1
    cat "$OUT/kernels_vs_model.md"
}

# cuBLASLt's kernels by matmul call, from a profile of every launch in order (appended to the join)
kernels_by_call() {
    { echo; python3 dev/roofline.py --join-trace "$1" -e d12 -N siamese -b "$2" -t "$D12_T"; } | tee -a "$OUT/kernels_vs_model.md"
}

# Whole steps of the timing's d12 siamese run. ncu (the GPU machine has no nsys): exactly the
# launches of the trainer's NVTX range "step" (gpu_zero_grad to gpu_sync in train_gpt2.cu) of 3
# steps, each kernel's GPU time, the GPU's clocks as they are (--clock-control none) and the caches
# as the step leaves them (--cache-control none: no flush before each kernel); the join checks that
# the launches split into 3 steps of the same kernels and counts steps 2 and 3. nsys: the kernel
# summary and the trace of a 5-step run. Both set the kernels' sum per step against the timing's
# wall-clock ms/step.
stage_kernels() {
    local b csv wall steps
    b=$(d12_batch)
    wall=$(bench_field "$OUT/bench/bench_gpu.md" "train_gpt2cu siamese" 5)
    [[ $wall =~ ^[0-9]+(\.[0-9]+)?$ ]] || wall=0
    tests/bin/mkshard "$OUT/tokens.bin" 1100000 50257 || { note "mkshard failed"; return 1; }
    local run=("$TRAIN_BF16" -i "$OUT/tokens.bin" -j "" -e d12 -N siamese -b "$b" -t "$D12_T" -v 0 -s 0)
    if has ncu; then
        steps=3
        csv=$OUT/kernels_ncu.csv
        local ncu=(ncu --clock-control none --cache-control none --csv --metrics gpu__time_duration.sum)
        "${ncu[@]}" --nvtx --nvtx-include "step/" "${run[@]}" -x "$steps" > "$csv" || { note "ncu failed"; return 1; }
        # no kernel in the range (an ncu that filters NVTX otherwise): the whole run, whose start-up
        # kernels before the first step's encoder_forward_kernel the join leaves out
        if ! grep -q gpu__time_duration "$csv"; then
            echo "ncu profiled no kernel in the NVTX range \"step\": profiling the whole run"
            "${ncu[@]}" "${run[@]}" -x "$steps" > "$csv" || { note "ncu failed"; return 1; }
        fi
    elif has nsys; then
        steps=5
        nsys profile --force-overwrite true --stats=false -o "$OUT/kernels" "${run[@]}" -x "$steps" || { note "nsys profile failed"; return 1; }
        # the report is gpukernsum in nsys before 2023; the CSV is named <output>_<report>.csv
        rm -f "$OUT"/kernels_*.csv
        nsys stats --force-export=true --report cuda_gpu_kern_sum --format csv --output "$OUT/kernels" "$OUT/kernels.nsys-rep" ||
            nsys stats --force-export=true --report gpukernsum --format csv --output "$OUT/kernels" "$OUT/kernels.nsys-rep" ||
            { note "nsys stats failed"; return 1; }
        csv=$(ls "$OUT"/kernels_*.csv 2> /dev/null | head -n 1)
        [ -n "$csv" ] || { note "nsys stats wrote no CSV"; return 1; }
    else
        skip "neither nsys nor ncu found"
    fi
    kernels_join "$csv" siamese "$b" "$steps" "$wall" || { note "the join with dev/roofline.py failed ($csv kept)"; return 1; }
    if has ncu; then
        kernels_by_call "$csv" "$b"
    else
        nsys stats --force-export=true --report cuda_gpu_trace --format csv --output "$OUT/trace" "$OUT/kernels.nsys-rep" > /dev/null ||
            nsys stats --force-export=true --report gputrace --format csv --output "$OUT/trace" "$OUT/kernels.nsys-rep" > /dev/null
        local trace
        trace=$(ls "$OUT"/trace_*.csv 2> /dev/null | head -n 1)
        if [ -n "$trace" ]; then
            kernels_by_call "$trace" "$b"
        else
            echo "nsys wrote no trace CSV: the matmuls are not split by call" | tee -a "$OUT/kernels_vs_model.md"
        fi
    fi
    note "$(kernels_note "$OUT/kernels_vs_model.md"); kernels_vs_model.md"
}

# kernels_note MD: the summary of a join: launches and ms per step measured, the model's, the wall clock
kernels_note() {
    local per_step wall
    per_step=$(sed -nE 's/^profiled: .* launches, ([0-9]+) per step.*/\1 launches\/step, /p' "$1")
    wall=$(sed -nE 's/^wall clock: ([0-9.]+) ms per step, the kernels [0-9.]+ ms \(([0-9.]+)%\).*/; wall clock \1 ms\/step (kernels \2%)/p' "$1")
    grep '^| all kernels' "$1" | awk -F'|' -v pre="$per_step" -v post="$wall" '{gsub(/ /, "", $7); gsub(/ /, "", $8); gsub(/ /, "", $9)
        print "all kernels: " pre $9 " ms/step measured, " $8 " predicted (" $7 "x)" post}'
}

# the trainer's version in each dev/cuda program (dev/cuda/README.md, "The experiments")
declare -A TRAINER_VERSION=([siamese_input_forward]=5 [siamese_input_backward]=4 [layernorm]=2 [classifier]=4
                            [attention_forward]=5 [attention_backward]=4 [column_sums]=2 [vec_kernels]=2 [encoder_backward]=2)

# dev_cuda_summary PROGRAM < its output: one line per timed job ("attention forward", "loss +
# dlogits", ...): every version's mean ms, the trainer's in brackets, and the trainer's time over
# the fastest other version's (above 1: another version is faster)
dev_cuda_summary() {
    sed -nE 's/^  v([0-9]+) (.*[^ ]) +([0-9]+\.[0-9]+) ms .*/\1|\2|\3/p' | awk -F'|' -v prog="$1" -v tv="${TRAINER_VERSION[$1]:-0}" '
        !($2 in seen) { seen[$2] = 1; order[++n] = $2 }
        { times[$2] = times[$2] sprintf(", %s%s%s %s", $1 == tv ? "[" : "", "v" $1, $1 == tv ? "]" : "", $3)
          if ($1 == tv) { mine[$2] = $3 } else if (!($2 in best) || $3 + 0 < best[$2] + 0) { best[$2] = $3; bestv[$2] = $1 } }
        END { for (i = 1; i <= n; i++) { j = order[i]
                  r = (j in mine && j in best && best[j] > 0) ? sprintf("; trainer / fastest other (v%s): %.2f", bestv[j], mine[j] / best[j]) : ""
                  printf "%s, %s: %s ms%s\n", prog, j, substr(times[j], 3), r } }'
}

stage_dev_cuda() {
    make -C dev/cuda -j16 GPU_ARCH="$(build_arch)" || { note "make -C dev/cuda failed"; return 1; }
    local p failures=0
    : > "$OUT/dev_cuda_summary.txt"
    for p in $(sed -n 's/^TARGETS = //p' dev/cuda/Makefile); do
        echo "== $p"
        stdbuf -oL "./dev/cuda/$p" > "$OUT/logs/dev_cuda_$p.txt" 2>&1 || failures=$((failures + 1))
        cat "$OUT/logs/dev_cuda_$p.txt"
        dev_cuda_summary "$p" < "$OUT/logs/dev_cuda_$p.txt" >> "$OUT/dev_cuda_summary.txt"
    done
    echo
    echo "== one line per timed job ([trainer's version]; mean ms, L2 flushed before each repetition)"
    cat "$OUT/dev_cuda_summary.txt"
    note "$failures dev/cuda programs failed; dev_cuda_summary.txt"
    [ "$failures" -eq 0 ]
}

stage_shakespeare() {
    local d=${SHAKESPEARE_DIR:-data/tinyshakespeare}
    [ -f "$d/tiny_shakespeare_train.bin" ] || skip "no $d/tiny_shakespeare_train.bin: run dev/data/tinyshakespeare.py where tiktoken is installed and copy $d here (see doc/cuda.md)"
    "$TRAIN_BF16" -i "$d/tiny_shakespeare_train.bin" -j "$d/tiny_shakespeare_val.bin" -e d6 -N siamese -b 16 -t 256 \
        -l 1e-3 -u 20 -x 200 -v 100 -m 8 -s 200 -g 96 -o "$OUT/shakespeare" || { note "the run failed"; return 1; }
    note "val loss $(grep '^val loss' "$OUT/logs/shakespeare.log" | tail -n 1 | awk '{print $3}') after 200 steps of d6 siamese (sample in the log)"
}

# job_ms LOG VERSION JOB: the mean ms of VERSION's JOB in a dev/cuda program's output
job_ms() { sed -nE "s/^  v$2 $3 +([0-9]+\.[0-9]+) ms .*/\1/p" "$1" 2>/dev/null | head -n 1; }

stage_torch() {
    python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2> /dev/null ||
        skip "torch with CUDA does not import here (pip cannot reach PyPI from a machine without network): the PyTorch peer is not measured"
    local rc=0 sdpa=$OUT/logs/attention_sdpa.txt dir
    python3 dev/cuda/attention_sdpa.py > "$sdpa" 2>&1 || { echo "attention_sdpa.py: exit status $?"; rc=1; }
    cat "$sdpa"
    local line=""
    for dir in forward backward; do
        local ours theirs v
        v=$([ $dir = forward ] && echo "${TRAINER_VERSION[attention_forward]}" || echo "${TRAINER_VERSION[attention_backward]}")
        ours=$(job_ms "$OUT/logs/dev_cuda_attention_$dir.txt" "$v" "attention $dir")
        theirs=$(sed -nE "s/^sdpa $dir +([0-9.]+) ms.*/\1/p" "$sdpa")
        printf 'attention %-8s ours (v%s) %s ms, SDPA flash %s ms: %s x (goal <= 1.3)\n' "$dir" "$v" "${ours:-?}" "${theirs:-?}" \
            "$(calc 'a/b' a="$ours" b="$theirs")"
        line+="attention $dir $(calc 'a/b' a="$ours" b="$theirs")x SDPA; "
    done
    local b
    b=$(cat "$OUT/d12_batch" 2>/dev/null || echo "32 16 8")
    OUT=$OUT/bench_torch DEPTHS=d12 T=$D12_T STEPS=12 WARMUP=4 TORCH=1 BATCHES="$b" bash dev/bench_gpu.sh ||
        { echo "dev/bench_gpu.sh: exit status $?"; rc=1; }
    note "${line}bench_torch/bench_gpu.md"
    return $rc
}

# the parsing of this script and of dev/roofline.py on canned output (no GPU, no build needed)
stage_selftest() {
    has python3 || skip "python3 not found"
    local fails=0 tmp=$OUT/selftest
    mkdir -p "$tmp"
    python3 dev/roofline.py --self-test > "$tmp/roofline.txt" || { cat "$tmp/roofline.txt"; fails=$((fails + 1)); }
    tail -n 1 "$tmp/roofline.txt"
    bash dev/bench_gpu.sh --self-test > "$tmp/bench.txt" || { cat "$tmp/bench.txt"; fails=$((fails + 1)); }
    tail -n 1 "$tmp/bench.txt"
    # the join as stage_kernels runs it, on a canned nsys summary of 5 d12 siamese steps at B 64:
    # classifier_kernel 5 launches of 5 ms against its 3.937 ms bound
    cat > "$tmp/kern_sum.csv" << 'CSV'
Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
60.0,"25,000,000",5,5000000.0,5000000.0,5000000,5000000,0.0,"void classifier_kernel<(bool)1>(__nv_bfloat16 *, float *, const int *, float, int, int)"
40.0,"16,000,000",60,266666.7,266666.7,266666,266667,0.0,"void flash_forward_kernel<64>(__nv_bfloat16 *, float *, const __nv_bfloat16 *, int, int, int, float, bool)"
10.0,"4,000,000",400,10000.0,10000.0,10000,10000,0.0,nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN
CSV
    local out row
    out=$(OUT=$tmp kernels_join "$tmp/kern_sum.csv" siamese 64 5)
    row=$(grep '^| `classifier_kernel`' <<< "$out")
    check_row() {  # check_row WHAT FIELD WANT
        local got
        got=$(awk -F'|' -v f="$2" '{gsub(/ /, "", $f); print $f}' <<< "$row")
        if [ "$got" = "$3" ]; then echo "ok   join: $1 = $got"; else echo "FAIL join: $1 = $got, want $3"; fails=$((fails + 1)); fi
    }
    check_row "classifier launches per step, predicted" 3 1
    check_row "classifier launches per step, measured" 4 1.0
    check_row "classifier ratio measured / predicted (5 / 3.937 ms)" 7 1.27
    row=$(grep '^| `cuBLASLt matmuls' <<< "$out")
    check_row "cuBLASLt launches per step, measured (400 over 5 steps)" 4 80.0
    row=$(grep '^| `flash_forward_kernel`' <<< "$out")
    check_row "flash forward ms per step, measured (16 ms over 5 steps)" 9 3.200
    # the join of an ncu profile of whole steps, as stage_kernels runs it: 2 steps of d12 siamese at B
    # 64 in the model's launch order (dev/roofline.py's launch_sequence), each launch 100 us, every
    # matmul one kernel but the logits' forward (two), against a 188 ms wall-clock step
    python3 - "$tmp/kern_ncu.csv" << 'PY' || fails=$((fails + 1))
import sys
sys.path.insert(0, "dev")
import roofline as r
step = r.model_step(r.Config("d12", "siamese"), 64, 1024)
mm = set(step.matmuls.values())
rows = ['"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"']
for _ in range(2):
    for n in r.launch_sequence(r.Config("d12", "siamese"), step):
        names = [n] if n not in mm else ["nvjet_gemm", "splitKreduce_kernel"] if n == step.matmuls["fwd logits"] else ["nvjet_gemm"]
        rows += [f'"{len(rows) - 1}","{k}","gpu__time_duration.sum","usecond","100.00"' for k in names]
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PY
    out=$(OUT=$tmp kernels_join "$tmp/kern_ncu.csv" siamese 64 2 188)
    row=$(grep '^| `classifier_kernel`' <<< "$out")
    check_row "ncu steps: classifier launches per step, measured" 4 1.0
    check_row "ncu steps: classifier ms per step, measured" 9 0.100
    row=$(grep '^| `cuBLASLt matmuls' <<< "$out")
    check_row "ncu steps: cuBLASLt launches per step (147 calls, the logits' split in two)" 4 148.0
    local n_launch
    n_launch=$(grep -c . "$tmp/kern_ncu.csv")
    n_launch=$(((n_launch - 1) / 2))
    sum=$(OUT=$tmp kernels_note "$tmp/kernels_vs_model.md")
    want="all kernels: $n_launch launches/step, $(awk -v n="$n_launch" 'BEGIN { printf "%.3f", n * 0.1 }') ms/step measured, "
    if [[ $sum == "$want"*"; wall clock 188.000 ms/step (kernels "* ]]; then echo "ok   kernels note: $sum"
    else echo "FAIL kernels note: '$sum', want '$want... wall clock 188.000 ms/step (kernels ...'"; fails=$((fails + 1)); fi
    # the dev/cuda summary on canned program output: the trainer's version 5 against the fastest other (v3)
    local sum want
    sum=$(dev_cuda_summary attention_forward << 'LOG'
version 1
    out      max abs err 1.0e-03, max rel err 2.0e-03
  v1 attention forward                   2.0000 ms     50.0 TFLOP/s (causal work)
version 3
  v3 attention forward                   0.8000 ms    125.0 TFLOP/s (causal work)
version 5
  v5 attention forward                   0.6000 ms    166.7 TFLOP/s (causal work)
  v5 attention forward timing skipped: CPU execution layer (timing waits for a GPU)
LOG
)
    want="attention_forward, attention forward: v1 2.0000, v3 0.8000, [v5] 0.6000 ms; trainer / fastest other (v3): 0.75"
    if [ "$sum" = "$want" ]; then echo "ok   dev_cuda summary: $sum"; else echo "FAIL dev_cuda summary: '$sum', want '$want'"; fails=$((fails + 1)); fi
    sum=$(printf '  v1 loss + dlogits                    1.0000 ms   100.0 GB/s  (1.0 MB moved)\n  v1 loss only                       0.5000 ms   100.0 GB/s  (1.0 MB moved)\n  v4 loss + dlogits                    1.5000 ms   100.0 GB/s  (1.0 MB moved)\n' |
        dev_cuda_summary classifier)
    want=$'classifier, loss + dlogits: v1 1.0000, [v4] 1.5000 ms; trainer / fastest other (v1): 1.50\nclassifier, loss only: v1 0.5000 ms'
    if [ "$sum" = "$want" ]; then echo "ok   dev_cuda summary, two jobs"; else echo "FAIL dev_cuda summary: '$sum', want '$want'"; fails=$((fails + 1)); fi
    # through the layer: the model's launch order against the trainer's, a step of a small model in
    # every mode (two in siamese: the next step repeats it) on random tokens of GPT-2's vocabulary
    # (CUDACPU_LAUNCH_LOG, tests/cudacpu)
    # an empty GPU_ARCH in the environment builds for the default architecture (it once reached nvcc
    # as "compute_")
    if GPU_ARCH= make -n --no-print-directory -B train_gpt2cu 2> /dev/null | grep -q 'arch=compute_90,code=sm_90'; then
        echo "ok   make with GPU_ARCH= builds for sm_90"
    else
        echo "FAIL make with GPU_ARCH= does not build for sm_90"; fails=$((fails + 1))
    fi
    local what="dev/roofline.py --self-test, the profile join, the dev/cuda summary, dev/bench_gpu.sh --self-test, GPU_ARCH=" mode
    if [ "$GPU_CHECK_MODE" = layer ]; then
        tests/bin/mkshard "$tmp/tokens.bin" 10000 50257 || fails=$((fails + 1))
        # MODE:RECOMPUTE[:MODEL]: the default (-r 1) in every mode, and -r 0, 2 and 3 (the backward's
        # rebuilds; -r 3's of stream Y: at d2c64h4 one boundary, at d7c32h2 two segments of four)
        # the two-step run also logs the trainer's NVTX ranges (tests/cudacpu/nvtx_ranges.c): each
        # "step" range, which the kernels stage profiles on a GPU, must hold exactly one modelled step
        local ranges=() r shape
        for run in siamese:1 pre:1 post:1 siamese:2 pre:2 post:2 siamese:0 siamese:3 pre:3 siamese:3:d7c32h2; do
            IFS=: read -r mode r shape <<< "$run"
            shape=${shape:-d2c64h4} ranges=()
            [ "$run" = siamese:1 ] && ranges=(--step-ranges "$tmp/ranges_$mode$r$shape.txt")
            CUDACPU_LAUNCH_LOG=$tmp/launches_$mode$r$shape.txt NVTX_INJECTION64_PATH=$PWD/tests/bin/nvtx_ranges.so NVTX_RANGE_LOG=$tmp/ranges_$mode$r$shape.txt \
                "$TRAIN_BF16" -i "$tmp/tokens.bin" -j "" -H "" -e "$shape" -N "$mode" -r "$r" \
                -b 2 -t 64 -x "$([ "$run" = siamese:1 ] && echo 2 || echo 1)" -v 0 -s 0 > "$tmp/run_$mode$r$shape.txt" 2>&1 || { cat "$tmp/run_$mode$r$shape.txt"; fails=$((fails + 1)); }
            python3 dev/roofline.py --launches "$tmp/launches_$mode$r$shape.txt" "${ranges[@]}" -e "$shape" -N "$mode" -r "$r" -b 2 -t 64 || fails=$((fails + 1))
        done
        what+=", the model's launch order against the trainer's (three modes, -r 0 to 3), the NVTX step ranges"
    fi
    note "$fails failure(s): $what"
    [ "$fails" -eq 0 ]
}

ALL_STAGES="env selftest build test_bf16 timing dev_cuda kernels build_rest test_fp32 test_shapes training cross cli sanitizer shakespeare torch"
# each stage's time budget in seconds (less when the total budget has less left)
declare -A BUDGETS=([env]=20 [build]=120 [test_bf16]=60 [timing]=120 [dev_cuda]=200 [kernels]=120 [build_rest]=120
                    [test_fp32]=60 [test_shapes]=60 [training]=120 [cross]=120 [cli]=45 [sanitizer]=200
                    [shakespeare]=60 [torch]=240 [selftest]=30)
LAYER_STAGES="training cross cli selftest"

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
# through the layer every kernel runs on the CPU, on a machine that may be shared and loaded: the
# budgets there only catch a hang (10x), they time nothing
scale=1
[ "$MODE" = layer ] && scale=10
BUDGET_S=${BUDGET_S:-$((530 * scale))}
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
if [ "$MODE" = layer ]; then
    TRAIN_BF16=tests/bin/train_gpt2cu_cpu TRAIN_FP32=tests/bin/train_gpt2cu_fp32_cpu
    TEST_BF16=tests/bin/test_gpt2cu_cpu TEST_FP32=tests/bin/test_gpt2cu_fp32_cpu
    STAGES=${STAGES:-$LAYER_STAGES}
    make --no-print-directory train_gpt2 tests/bin/mkshard tests/bin/nvtx_ranges.so $TRAIN_BF16 $TRAIN_FP32 > "$OUT/logs/layer_build.log" 2>&1 ||
        { cat "$OUT/logs/layer_build.log"; echo "dev/gpu_check.sh --layer: the execution layer builds failed" >&2; exit 1; }
else
    TRAIN_BF16=./train_gpt2cu TRAIN_FP32=./train_gpt2cu_fp32 TEST_BF16=./test_gpt2cu TEST_FP32=./test_gpt2cu_fp32
    STAGES=${STAGES:-$ALL_STAGES}
fi
GPU_CHECK_MODE=$MODE
# every make below (dev/bench_gpu.sh's too) builds for the GPU at hand
[ "$MODE" = gpu ] && GPU_ARCH=$(build_arch)
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
