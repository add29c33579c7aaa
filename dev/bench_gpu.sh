#!/usr/bin/env bash
# GPU speed and memory benchmark, meant for one H100/H200:
#   builds train_gpt2cu, writes a shard of random tokens, and for each fresh model in DEPTHS at
#   T=1024:
#   1. finds the largest micro-batch B in BATCHES (64 32 16 ...) at which train_gpt2cu siamese runs
#      (the trainer exits non-zero on out-of-memory),
#   2. runs train_gpt2cu pre at the same B, and the PyTorch reference (dev/train_gpt2.py: bf16
#      autocast, fused AdamW, SDPA flash attention, torch.compile) in pre and siamese mode at the
#      same B (a smaller one when it does not fit; the table says so),
#   3. prints ms/step (median over the steps after WARMUP), tokens/s, MFU against the GPU's bf16
#      dense peak (by our formula and by llm.c's, below), peak GPU memory (nvidia-smi polled every
#      100 ms, minus the memory in use before the run; PyTorch also reports
#      torch.cuda.max_memory_allocated), and the GPU during the timed steps: the median SM clock and
#      power draw (columns), the memory clock and the highest temperature (a line), from the polled
#      lines between the end of the last warm-up step and the end of the last step (each step line
#      is timed as it arrives; the polling is kept as logs/NAME_bB.poll.csv),
#   4. prints the speed and memory goals of the CUDA trainer as ratios:
#        siamese tok/s / compiled PyTorch siamese tok/s   >= 1.3
#        siamese ms / pre ms                               <= 1.05
#        MFU at d12 (siamese and pre)                      >= 45%
#        siamese peak memory / pre peak memory             <= 1.10
# MFU = flops_per_token * tok/s / peak, flops_per_token = 6 * parameters + 12 * L * C * T (the
# formula train_gpt2cu uses for its own "| MFU" field, which is shown next to ours for a check:
# attention's q.k^T and att.v at 4 L C T per token forward, times 3 with the backward). llm.c
# counts 6 * parameters + 6 * L * C * T, T the run's sequence length (gpt2_estimate_mfu in llm.c's
# train_gpt2.cu, github.com/karpathy/llm.c at commit f1e2ace), half our attention term; its column
# lets our MFU be set beside a figure llm.c prints.
#
# Usage: bash dev/bench_gpu.sh                 the real run (needs nvcc, a GPU, torch with CUDA)
#        bash dev/bench_gpu.sh --cpu-check      the same logic with ./train_gpt2 and PyTorch on the
#                                               CPU, a d2 model, T=64, a few steps (no GPU needed)
#        bash dev/bench_gpu.sh --self-test      the parsing helpers on canned step lines and polling
# Env: DEPTHS="d12 d24" T=1024 BATCHES="64 32 16 8 4 2 1" STEPS=20 WARMUP=5 PEAK_TFLOPS=(from the
#      GPU name) TORCH=1 (0 skips the PyTorch peer) TORCH_MODES="pre siamese" (the peer's modes: "siamese"
#      alone saves a compile) TRAINER=./train_gpt2cu OURS_ARGS= (more flags for every run of our
#      trainer, e.g. "-r 2": the LayerNorm outputs rebuilt in the backward)
# Everything is written under $OUT when that variable names a folder (else a new folder under /tmp):
# bench_gpu.md (the table) and logs/ (every run's output).
set -euo pipefail
cd "$(dirname "$0")/.."
source dev/lib.sh

# peak bf16 dense tensor-core TFLOP/s of the GPU, from its name (override with PEAK_TFLOPS)
peak_tflops_for() {
    case "$1" in
        *H200*) echo 989 ;;            # same SXM compute as H100
        *H100*PCIe*) echo 756 ;;
        *H100*) echo 989 ;;            # H100 SXM
        *A100*) echo 312 ;;
        *) echo "" ;;
    esac
}

# goal_line LABEL VALUE OP TARGET: "label: 1.234 (goal >= 1.3): met|NOT met|n/a"
goal_line() {
    local label=$1 value=$2 op=$3 target=$4 verdict=n/a
    if [[ $value != n/a && $value != *nan* && $value != *inf* ]]; then
        verdict=$(awk -v v="$value" -v t="$target" -v op="$op" 'BEGIN {
            ok = (op == ">=") ? (v >= t) : (v <= t); print ok ? "met" : "NOT met" }')
    fi
    echo "  $label: $value (goal $op $target): $verdict"
}

# GPU memory in use now (MiB), and polling of the GPU in the background into $WORK/poll: every 100
# ms one nvidia-smi line "YYYY/MM/DD HH:MM:SS.mmm, memory.used MiB, clocks.sm MHz, clocks.mem MHz,
# power.draw W, temperature C" (POLL_QUERY)
POLL_QUERY=timestamp,memory.used,clocks.sm,clocks.mem,power.draw,temperature.gpu
mem_now() { if [[ $CPU_CHECK == 1 ]]; then echo 0; else nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -n 1; fi; }
poll_start() {
    : >"$WORK/poll"
    [[ $CPU_CHECK == 1 ]] && return
    nvidia-smi --query-gpu=$POLL_QUERY --format=csv,noheader,nounits -lms 100 >"$WORK/poll" 2>/dev/null &
    POLL_PID=$!
}
# the EXIT trap: under set -e a failing command in it would make the script's exit status 1 after
# runs that went well (a poller already stopped), so nothing in it may fail
cleanup() { if [[ -n $POLL_PID ]]; then kill "$POLL_PID" 2>/dev/null || true; fi; rm -rf "$WORK"; }
# stops the poller and sets MEM to the peak memory.used minus BASE (MiB), or n/a; run it in this
# shell, not in $( ): the poller is this shell's child, to be reaped here and forgotten (POLL_PID)
poll_stop() {
    local base=$1
    if [[ -n $POLL_PID ]]; then kill "$POLL_PID" 2>/dev/null; wait "$POLL_PID" 2>/dev/null || true; POLL_PID=""; fi
    MEM=$(awk -F', *' -v base="$base" '$2 ~ /^[0-9.]+$/ && $2 + 0 > max {max = $2 + 0; n++} END {if (!n) print "n/a"; else print max - base}' "$WORK/poll")
}

# local time of day in seconds, as nvidia-smi's timestamp has it ("HH:MM:SS.ffffff")
time_of_day() { printf '%(%H:%M:%S)T.%s\n' "${EPOCHREALTIME%.*}" "${EPOCHREALTIME#*.}"; }

# stamp_steps STAMPS: stdin to stdout, and the time of day of each step line (those step_field_median
# reads) into STAMPS, after a first line with the start time
stamp_steps() {
    local line
    echo "start $(time_of_day)" >"$1"
    while IFS= read -r line; do
        printf '%s\n' "$line"
        if [[ $line =~ ^step\ [0-9]+/[0-9]+\ \|\ loss && $line != *non-finite* ]]; then echo "step $(time_of_day)" >>"$1"; fi
    done
}

# poll_medians POLL STAMPS SKIP: the GPU during the timed steps (after the first SKIP step lines,
# as step_field_median): "SM_MHZ POWER_W MEM_MHZ MAX_TEMP_C SAMPLES", medians but the temperature
# (its maximum), of the polled lines between the end of step SKIP (or the start) and the end of the
# last step; n/a with no samples
poll_medians() {
    local window col out=()
    window=$(awk -v skip="$3" 'function secs(t, a) { split(t, a, ":"); return a[1] * 3600 + a[2] * 60 + a[3] }
        $1 == "start" { start = secs($2) } $1 == "step" { n++; if (n == skip) start = secs($2); end = secs($2) }
        END { if (n > skip) print start, end }' "$2")
    [[ -n $window ]] || { echo "n/a n/a n/a n/a 0"; return; }
    # the polled lines in the window: time of day, then the fields
    awk -F', *' -v w="$window" 'BEGIN { split(w, a, " ") } { split($1, d, " "); split(d[2], t, ":")
        s = t[1] * 3600 + t[2] * 60 + t[3]; if (s >= a[1] && s <= a[2]) print }' "$1" >"$WORK/poll_window"
    for col in 3 5 4; do
        out+=("$(awk -F', *' -v c="$col" '$c ~ /^[0-9.]+$/ {print $c}' "$WORK/poll_window" | median | sed 's/^nan$/n\/a/')")
    done
    out+=("$(awk -F', *' '$6 ~ /^[0-9.]+$/ && (max == "" || $6 + 0 > max) {max = $6 + 0} END {print (max == "" ? "n/a" : max)}' "$WORK/poll_window")")
    echo "${out[*]} $(grep -c . "$WORK/poll_window")"
}

self_test() {
    local lines fails=0
    lines=$'model: siamese | L 12 | C 768 | NH 12 | V 50257 (padded 50304) | max T 1024 | 124534272 parameters\n'
    for i in 1 2 3 4 5 6 7; do
        lines+="step $i/7 | loss 10.9 | norm 1.0 | lr 3.00e-04 | $((1000 - i * 100)).00 ms | 500 tok/s | MFU $((40 + i)).5%"$'\n'
    done
    lines+=$'step 8/8 | loss nan | norm nan | non-finite: update skipped (1 in a row)\n'
    check() { if [[ "$2" == "$3" ]]; then echo "ok   $1 = $2"; else echo "FAIL $1 = $2 (expected $3)"; fails=$((fails + 1)); fi; }
    check "median ms after 2 warm-up steps" "$(step_field_median 2 ms <<<"$lines")" 500.00
    check "median MFU after 2 warm-up steps" "$(step_field_median 2 MFU <<<"$lines")" 45.5
    check "median ms with no step lines" "$(step_field_median 0 ms <<<"hello")" nan
    check "pytorch step line" "$(step_field_median 0 ms <<<'step 1/10 | loss 10.987654 | norm 1.2345 | lr 3.00e-04 | 123.45 ms | 1000 tok/s')" 123.45
    check "L" "$(model_line_field L <<<"$lines")" 12
    check "C" "$(model_line_field C <<<"$lines")" 768
    check "parameters" "$(model_line_field parameters <<<"$lines")" 124534272
    check "peak H100 SXM" "$(peak_tflops_for 'NVIDIA H100 80GB HBM3')" 989
    check "peak H200" "$(peak_tflops_for 'NVIDIA H200')" 989
    check "peak H100 PCIe" "$(peak_tflops_for 'NVIDIA H100 PCIe')" 756
    check "ratio" "$(calc 'a/b' a=130 b=100)" 1.3
    check "ratio of n/a" "$(calc 'a/b' a=n/a b=100)" n/a
    # d12 at T=1024: (6 * 124534272 + 12 * 12 * 768 * 1024) * 50000 tok/s / 989e12 = 4.350%
    check "mfu" "$(calc '100*(6*n+12*l*c*t)*s/(p*1e12)' n=124534272 l=12 c=768 t=1024 s=50000 p=989)" 4.35
    # llm.c's: (6 * 124534272 + 6 * 12 * 768 * 1024) * 50000 / 989e12 = 4.064%
    check "mfu (llm.c)" "$(calc '100*(6*n+6*l*c*t)*s/(p*1e12)' n=124534272 l=12 c=768 t=1024 s=50000 p=989)" 4.064
    check "goal met" "$(goal_line x 1.31 '>=' 1.3)" "  x: 1.31 (goal >= 1.3): met"
    check "goal not met" "$(goal_line x 1.06 '<=' 1.05)" "  x: 1.06 (goal <= 1.05): NOT met"
    check "exit status after the trap, with a poller already gone" \
        "$(bash -c "set -e; WORK=\$(mktemp -d); POLL_PID=4194303; $(declare -f cleanup); trap cleanup EXIT; true"; echo $?)" 0
    check "goal of 0/0" "$(goal_line x "$(calc 'a/b' a=0 b=0)" '<=' 1.10)" "  x: $(calc 'a/b' a=0 b=0) (goal <= 1.10): n/a"
    local tmp; tmp=$(mktemp)
    echo "error: out of GPU memory allocating 12288.0 MiB for activations" >"$tmp"
    check "oom (ours, allocation)" "$(is_oom "$tmp" && echo yes)" yes
    echo "error: CUDA: out of memory (cudaMalloc(&p, bytes) at train_gpt2.cu:979)" >"$tmp"
    check "oom (ours, CUDA call)" "$(is_oom "$tmp" && echo yes)" yes
    echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB" >"$tmp"
    check "oom (torch)" "$(is_oom "$tmp" && echo yes)" yes
    echo "error: -t 2048 exceeds the model's maximum sequence length 1024" >"$tmp"
    check "not oom" "$(is_oom "$tmp" || echo no)" no
    check "last error" "$(last_error "$tmp")" "error: -t 2048 exceeds the model's maximum sequence length 1024"
    rm -f "$tmp"
    # the GPU polling: canned nvidia-smi lines every 100 ms from 10:00:00.050 to 10:00:02.950, four
    # step lines at 0.5, 1.0, 1.5 and 2.0 s; after 2 warm-up steps the window is 1.0 to 2.0 s: ten
    # lines of SM 1600..1690 MHz, 600..609 W, up to 59 C, 5010..5019 MiB, and one of [N/A]; outside
    # it 1980 MHz, 100 W, 70 C, 1000 MiB
    local WORK POLL_PID="" i t
    WORK=$(mktemp -d)
    for i in $(seq 0 29); do
        t=$(printf '10:00:%02d.%d50' $((i / 10)) $((i % 10)))
        if ((i >= 10 && i < 20)); then
            echo "2026/11/25 $t, $((5000 + i)), $((1590 + (i - 10) * 10 + 10)), 2619, $((600 + i - 10)).00, $((50 + i - 10))"
        else
            echo "2026/11/25 $t, 1000, 1980, 2619, 100.00, 70"
        fi
        if ((i == 14)); then echo "2026/11/25 10:00:01.460, [N/A], [N/A], [N/A], [N/A], [N/A]"; fi
    done >"$WORK/poll"
    printf 'step %s/4 | loss 10.9 | 1.0 ms\nnoise\n' 1 2 3 4 | {
        stamp_steps "$WORK/stamps" >"$WORK/out"; }
    check "stamp_steps: the output passed on" "$(grep -c . "$WORK/out")" 8
    check "stamp_steps: a start and four step lines" "$(cut -d' ' -f1 "$WORK/stamps" | tr '\n' ' ')" "start step step step step "
    printf 'start 10:00:00.000000\nstep 10:00:00.500000\nstep 10:00:01.000000\nstep 10:00:01.500000\nstep 10:00:02.000000\n' >"$WORK/stamps"
    check "GPU during the timed steps (SM, W, memory MHz, max C, samples)" "$(poll_medians "$WORK/poll" "$WORK/stamps" 2)" "1645 604.5 2619 59 11"
    check "GPU from the start with no warm-up" "$(poll_medians "$WORK/poll" "$WORK/stamps" 0 | cut -d' ' -f5)" 21
    check "GPU with no timed step" "$(poll_medians "$WORK/poll" "$WORK/stamps" 4)" "n/a n/a n/a n/a 0"
    poll_stop 1000
    check "peak memory over the base" "$MEM" 4019
    : >"$WORK/poll"
    poll_stop 1000
    check "peak memory with no polling" "$MEM" n/a
    rm -rf "$WORK"
    echo "self-test: $fails failure(s)"
    [[ $fails == 0 ]]
}

CPU_CHECK=0
case "${1:-}" in
    --self-test) self_test; exit ;;
    --cpu-check) CPU_CHECK=1 ;;
    "") ;;
    *) echo "usage: $0 [--cpu-check | --self-test]" >&2; exit 2 ;;
esac

if [[ $CPU_CHECK == 1 ]]; then
    # the plumbing on the CPU: our CPU trainer stands in for train_gpt2cu; numbers mean nothing
    TRAINER=${TRAINER:-./train_gpt2}
    DEPTHS=${DEPTHS:-d2} T=${T:-64} BATCHES=${BATCHES:-"4 2"} STEPS=${STEPS:-4} WARMUP=${WARMUP:-1}
    TORCH_ARGS=(--device cpu --dtype float32 --compile 0 --threads 1)
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
    GPU_NAME="none (CPU check)"
    PEAK_TFLOPS=${PEAK_TFLOPS:-1}
else
    TRAINER=${TRAINER:-./train_gpt2cu}
    DEPTHS=${DEPTHS:-"d12 d24"} T=${T:-1024} BATCHES=${BATCHES:-"64 32 16 8 4 2 1"} STEPS=${STEPS:-20} WARMUP=${WARMUP:-5}
    TORCH_ARGS=(--device cuda --dtype bfloat16 --compile 1)
    command -v nvidia-smi >/dev/null || { echo "error: nvidia-smi not found: this benchmark needs a GPU (try --cpu-check)" >&2; exit 1; }
    GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
    PEAK_TFLOPS=${PEAK_TFLOPS:-$(peak_tflops_for "$GPU_NAME")}
    if [[ -z $PEAK_TFLOPS ]]; then
        echo "warning: unknown GPU '$GPU_NAME': MFU against 989 TFLOP/s (set PEAK_TFLOPS)" >&2
        PEAK_TFLOPS=989
    fi
fi
TORCH=${TORCH:-1}
TORCH_MODES=${TORCH_MODES:-pre siamese}
if [[ $TORCH == 1 ]] && ! python3 -c "import torch" 2>/dev/null; then
    echo "note: torch is not installed: the PyTorch peer is skipped" >&2
    TORCH=0
fi

OUTDIR=${OUT:-$(mktemp -d /tmp/bench_gpu.XXXXXX)}
LOGS=$OUTDIR/logs
mkdir -p "$LOGS"
WORK=$(mktemp -d /tmp/bench_gpu_work.XXXXXX)
POLL_PID=""
trap cleanup EXIT

build_trainer "$TRAINER"
# enough tokens that B=64, T=1024 reads a few batches before the loader wraps around
write_random_shard "$WORK/tokens.bin" 1100000

# run_one NAME B CMD...: runs one benchmark, its output in $LOGS/NAME_bB.log; sets RC, MEM, LOG and
# GPU_STATE (poll_medians over the steps after WARMUP)
run_one() {
    local name=$1 b=$2; shift 2
    local log="$LOGS/${name}_b$b.log" base
    base=$(mem_now)
    poll_start
    set +e
    "$@" 2>&1 | stamp_steps "$WORK/stamps" >"$log"
    RC=${PIPESTATUS[0]}
    set -e
    poll_stop "$base"
    GPU_STATE=$(poll_medians "$WORK/poll" "$WORK/stamps" "$WARMUP")
    cp "$WORK/poll" "$LOGS/${name}_b$b.poll.csv"
    LOG=$log
}

# ours_cmd / torch_cmd DEPTH MODE B: set CMD to the command line of one run
ours_cmd() {
    # shellcheck disable=SC2206
    CMD=("$TRAINER" -i "$WORK/tokens.bin" -j "" -e "$1" -N "$2" -b "$3" -t "$T" -x "$STEPS" -v 0 -s 0 ${OURS_ARGS:-})
}
torch_cmd() {
    CMD=(python3 dev/train_gpt2.py -i "$WORK/tokens.bin" -e "$1" -N "$2" -b "$3" -t "$T" -x "$STEPS" -v 0 "${TORCH_ARGS[@]}")
}

# search NAME CMDFN DEPTH MODE B...: tries the batches in order until a run succeeds; sets FOUND_B
# (empty when none ran) and leaves that run's RC, MEM and LOG. A failure other than out-of-memory
# ends the search (a smaller batch would not help, and a compiled PyTorch run costs a minute)
search() {
    local name=$1 cmdfn=$2 depth=$3 mode=$4; shift 4
    FOUND_B=""
    local b
    for b in "$@"; do
        "$cmdfn" "$depth" "$mode" "$b"
        run_one "$name" "$b" "${CMD[@]}"
        if [[ $RC == 0 && $(step_field_median "$WARMUP" ms <"$LOG") != nan ]]; then FOUND_B=$b; return; fi
        if ! is_oom "$LOG"; then echo "  $name B=$b: failed (rc $RC): $(last_error "$LOG")" >&2; return; fi
        echo "  $name B=$b: out of memory" >&2
    done
}

# the batches of BATCHES that are <= $1
batches_from() { local b; for b in $BATCHES; do (( b <= $1 )) && echo "$b"; done; }

TABLE="| model | run | B | ms/step | tok/s | MFU % | MFU % (llm.c's formula) | MFU % (trainer's own) | peak mem MiB (nvidia-smi) | torch max_memory_allocated MiB | SM MHz | power W |"$'\n'
TABLE+="|---|---|---|---|---|---|---|---|---|---|---|---|"$'\n'
GOALS=""
echo "GPU benchmark: $GPU_NAME, peak $PEAK_TFLOPS TFLOP/s bf16, T=$T, $STEPS steps (median after $WARMUP), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')${OURS_ARGS:+, our trainer with $OURS_ARGS}"
for depth in $DEPTHS; do
    declare -A MS=() TOKS=() MEMS=() MFUS=()
    echo "== $depth"
    # 1. the largest B for siamese (the mode with the most activations)
    # shellcheck disable=SC2086
    search "ours_${depth}_siamese" ours_cmd "$depth" siamese $BATCHES
    if [[ -z $FOUND_B ]]; then
        echo "  no batch size ran for $depth siamese; see $LOGS" >&2
        TABLE+="| $depth | ${TRAINER##*/} siamese | none ran | | | | | | | | | |"$'\n'
        continue
    fi
    B=$FOUND_B
    L=$(model_line_field L <"$LOG") C=$(model_line_field C <"$LOG") NPARAM=$(model_line_field parameters <"$LOG")
    FLOPS_TOK=$(calc '6*n+12*l*c*t' n="$NPARAM" l="$L" c="$C" t="$T")
    FLOPS_TOK_LLMC=$(calc '6*n+6*l*c*t' n="$NPARAM" l="$L" c="$C" t="$T")
    for run in "ours siamese" "ours pre" "torch pre" "torch siamese"; do
        read -r impl mode <<<"$run"
        key="$impl $mode"
        if [[ $key != "ours siamese" ]]; then
            [[ $impl == torch && ($TORCH != 1 || " $TORCH_MODES " != *" $mode "*) ]] && continue
            # shellcheck disable=SC2046
            search "${impl}_${depth}_$mode" "${impl}_cmd" "$depth" "$mode" $(batches_from "$B")
            [[ -z $FOUND_B ]] && { TABLE+="| $depth | $impl $mode | none ran | | | | | | | | | |"$'\n'; continue; }
        fi
        b=$FOUND_B
        ms=$(step_field_median "$WARMUP" ms <"$LOG")
        toks=$(calc 'b*t*1000/ms' b="$b" t="$T" ms="$ms")
        mfu=$(calc '100*f*s/(p*1e12)' f="$FLOPS_TOK" s="$toks" p="$PEAK_TFLOPS")
        mfu_llmc=$(calc '100*f*s/(p*1e12)' f="$FLOPS_TOK_LLMC" s="$toks" p="$PEAK_TFLOPS")
        own=$([[ $impl == ours ]] && step_field_median "$WARMUP" MFU <"$LOG" | sed 's/^nan$/-/' || echo "")
        tmem=$(sed -nE 's/^peak memory ([0-9.]+) MiB.*/\1/p' "$LOG" | tail -n 1)
        name=$([[ $impl == ours ]] && echo "${TRAINER##*/} $mode" || echo "pytorch $mode")
        note=$([[ $b != "$B" ]] && echo " (B=$B does not fit)" || echo "")
        read -r sm_mhz power_w mem_mhz temp_c samples <<<"$GPU_STATE"
        TABLE+="| $depth | $name | $b$note | $ms | $toks | $mfu | $mfu_llmc | $own | $MEM | $tmem | $sm_mhz | $power_w |"$'\n'
        echo "  $name B=$b: $ms ms/step, $toks tok/s, MFU $mfu% (llm.c's formula $mfu_llmc%), peak $MEM MiB"
        echo "    during the timed steps ($samples samples): SM clock $sm_mhz MHz, power $power_w W (medians), memory clock $mem_mhz MHz, temperature up to $temp_c C"
        MS[$key]=$ms TOKS[$key]=$toks MEMS[$key]=$MEM
        [[ $key == "ours siamese" || $key == "ours pre" ]] && MFUS[$key]=$mfu
    done
    GOALS+="$depth (B=$B):"$'\n'
    GOALS+="$(goal_line 'siamese tok/s / compiled PyTorch siamese tok/s' "$(calc 'a/b' a="${TOKS[ours siamese]:-}" b="${TOKS[torch siamese]:-}")" '>=' 1.3)"$'\n'
    GOALS+="$(goal_line 'siamese ms / pre ms' "$(calc 'a/b' a="${MS[ours siamese]:-}" b="${MS[ours pre]:-}")" '<=' 1.05)"$'\n'
    if [[ $depth == d12 ]]; then
        GOALS+="$(goal_line 'MFU % (siamese)' "${MFUS[ours siamese]:-n/a}" '>=' 45)"$'\n'
        GOALS+="$(goal_line 'MFU % (pre)' "${MFUS[ours pre]:-n/a}" '>=' 45)"$'\n'
    fi
    GOALS+="$(goal_line 'siamese peak memory / pre peak memory' "$(calc 'a/b' a="${MEMS[ours siamese]:-}" b="${MEMS[ours pre]:-}")" '<=' 1.10)"$'\n'
    unset MS TOKS MEMS MFUS
done

{
    echo "GPU benchmark: $GPU_NAME, peak $PEAK_TFLOPS TFLOP/s, T=$T, $STEPS steps (median after $WARMUP)"
    [[ $CPU_CHECK == 1 ]] && echo "CPU CHECK of the script's plumbing: train_gpt2 and PyTorch on the CPU; the numbers are not GPU results"
    echo
    printf '%s' "$TABLE"
    echo
    echo "goals:"
    printf '%s' "$GOALS"
} | tee "$OUTDIR/bench_gpu.md"
echo "table: $OUTDIR/bench_gpu.md, logs: $LOGS"
