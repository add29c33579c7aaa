# shellcheck shell=bash
# dev/lib.sh: shell helpers shared by dev/bench_gpu.sh and dev/experiments/*.sh (source it).
# Only functions; nothing runs when it is sourced.

# write_random_shard PATH NTOKENS: a token shard (llm.c format) of random GPT-2 token ids; the
# content does not matter for speed
write_random_shard() {
    python3 - "$1" "$2" <<'EOF'
import random, struct, sys
random.seed(0)
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *(random.randrange(50257) for _ in range(n))))
EOF
}

# median of the numbers on stdin, one a line; "nan" when there are none
median() {
    sort -g | awk '{a[NR]=$1} END {if (NR == 0) {print "nan"} else if (NR % 2) {print a[(NR+1)/2]} else {print (a[NR/2]+a[NR/2+1])/2}}'
}

# step_field_median SKIP FIELD < trainer stdout: median over the step lines after the first SKIP of
# the field written "| 123.45 ms |" (FIELD=ms) or "| MFU 41.2%" (FIELD=MFU)
step_field_median() {
    local skip=$1 field=$2
    grep -E '^step [0-9]+/[0-9]+ \| loss' | grep -v 'non-finite' | sed -n "$((skip + 1)),\$p" |
        if [[ $field == ms ]]; then sed -nE 's/.*\| ([0-9.]+) ms \|.*/\1/p'; else sed -nE 's/.*\| MFU ([0-9.]+)%.*/\1/p'; fi |
        median
}

# calc EXPR [VAR=VALUE ...]: awk arithmetic, printed with %.4g; "n/a" when a value is not a number
calc() {
    local expr=$1; shift
    local args=() kv
    for kv in "$@"; do
        [[ ${kv#*=} =~ ^-?[0-9.]+([eE][-+]?[0-9]+)?$ ]] || { echo "n/a"; return; }
        args+=(-v "$kv")
    done
    awk "${args[@]}" "BEGIN {printf \"%.4g\", $expr}"
}

# model_line_field NAME < trainer stdout: a number from the "model: ... | L 12 | C 768 | ... |
# 124475904 parameters" line (NAME = L, C, NH or parameters)
model_line_field() {
    local name=$1
    grep -m1 '^model:' | if [[ $name == parameters ]]; then sed -nE 's/.*\| ([0-9]+) parameters.*/\1/p'
    else sed -nE "s/.*\\| $name ([0-9]+) .*/\\1/p"; fi
}

# is_oom FILE: the log of a failed run says the GPU ran out of memory: train_gpt2cu's "out of GPU
# memory allocating ...", a CUDA "out of memory" error, cuBLAS's ALLOC_FAILED or PyTorch's
# OutOfMemoryError
is_oom() {
    grep -qiE 'out of (GPU )?memory|OutOfMemoryError|cudaErrorMemoryAllocation|ALLOC_FAILED' "$1"
}

# last_error FILE: the line that best says why a run failed
last_error() {
    { grep -iE 'error|fatal|out of memory' "$1" || tail -n 1 "$1"; } | tail -n 1 | cut -c1-200
}

# build_trainer TRAINER: builds it with make when it is one of ours (./train_gpt2cu, ./train_gpt2);
# any other command that takes our flags is used as it is
build_trainer() {
    case "$1" in ./train_gpt2cu|./train_gpt2) make -s "${1#./}" ;; esac
}
