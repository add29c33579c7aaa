#!/usr/bin/env bash
# tests/test_dist.sh: data-parallel training on several processes (common/dist.h) with the CPU
# trainer, on a tiny fresh model (2 layers, C 32) and the default arithmetic data, one thread per
# rank. make test runs it (`make test-dist`); it skips, saying why, without mpirun or an MPI build.
#   a. 2 ranks against 1 process with the same total batch -d (4 micro-batches: 2 per rank):
#      20 steps' losses and the validation losses agree to 1e-6 relative, the final weights to 1e-5
#      of the largest weight; the same with a seeded data order (-S, two seeds, 8 steps), one of
#      them starting near the end of the data so that it wraps around within a step
#   b. two 2-rank runs are bit-identical (losses, norms, checkpoint files); so are -z 0 and -z 1
#   c. a 2-rank run stopped at step 10 and resumed gives the same files as the run straight through;
#      resumed with 1 rank from the 2-rank checkpoint (and with 2 from the 1-process one) it
#      continues the same loss curve (1e-6 relative)
#   d. a total batch that does not split over the ranks, a damaged shard: one error line, exit 1
#   e. a killed rank ends the job with an error in under 10 s; the output folder's lock holds
#      while the job runs and is gone after it; the checkpoints written before are resumable
#   f. the CUDA trainer (FP32) through the CPU execution layer (tests/cudacpu), where its gradients
#      and weights go through host memory as on a GPU build without NCCL: 2 ranks against 1
#      process (6 steps; with -S, two seeds, 4 steps), -z 0 and -z 1 bit-identical, a resume from
#      step 3 with 2 ranks exact;
#      the BF16 build (whose ranks gather bf16 working weights with -z 1): -z 0 and -z 1 identical
#   g. a parameter count that divides by neither 2 nor 3 (d9c25h5: 107575 parameters; shards of
#      ceil(n / N), the last rank's shorter; the shard boundaries fall in weights that get gradients,
#      not in the rows of wpe that T 32 leaves untouched): 2 and 3 ranks against 1 process (1e-6
#      relative), 3 ranks -z 0 and -z 1 bit-identical, a 3-rank resume from step 3 exact, 1 process
#      resumed from the 3-rank checkpoint on the same loss curve
#   h. common/dist.h's NCCL path in the BF16 CUDA trainer through the CPU execution layer, NCCL
#      played by tests/fake_nccl/nccl.h, which checks every call (one ncclReduceScatter and one
#      ncclAllGather a step, in place, equal counts of ceil(n / N), inside the device allocations,
#      the padding zero before and after) and adds in rank order: on the model of g with 2 and 3
#      ranks, -z 1 and -z 0, 2 steps: the same checkpoint files as the host path's, the expected calls
# KEEP=1 keeps the work folder. Closes with "N passed, N failed" (exit 1 when anything failed).
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-./train_gpt2}
TRAIN_CU=${TRAIN_CU:-tests/bin/train_gpt2cu_fp32_cpu}  # section f, where they are built
TRAIN_CU_BF16=${TRAIN_CU_BF16:-tests/bin/train_gpt2cu_cpu}
TRAIN_CU_NCCL=${TRAIN_CU_NCCL:-tests/bin/train_gpt2cu_fakenccl_cpu}  # section h
CKPT_DIFF=${CKPT_DIFF:-tests/bin/ckpt_diff}
MKSHARD=${MKSHARD:-tests/bin/mkshard}
if ! command -v mpirun > /dev/null 2>&1; then
    echo "test-dist: skipped: mpirun not found (bash dev/install_mpi.sh installs Open MPI from Debian's packages)"
    exit 0
fi
if ! ldd "$TRAIN" 2>/dev/null | grep -q libmpi; then
    echo "test-dist: skipped: $TRAIN was built without MPI (install Open MPI, then make clean && make train_gpt2)"
    exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # CI runs as root
export OMP_NUM_THREADS=1
unset TRAIN_GPT2_NAN_STEPS
# -q: no banner of mpirun's own; two ranks may share a core on a busy machine
MPIRUN=(mpirun -q --oversubscribe --bind-to none -np)
CLI_TEST_NAME=test_dist
# shortcuts shared with the other end-to-end tests: $W, ok, bad, check, expect_error, cli_summary
source tests/cli_lib.sh

# train NAME RANKS FLAGS...: a run of $BIN (default $TRAIN) with -o $W/NAME (RANKS 0: without
# mpirun); sets $rc
train() {
    local name=$1 ranks=$2 bin=${BIN:-$TRAIN}
    shift 2
    if [ "$ranks" = 0 ]; then
        "$bin" "$@" -o "$W/$name" > "$W/$name.out" 2> "$W/$name.err"
    else
        "${MPIRUN[@]}" "$ranks" "$bin" "$@" -o "$W/$name" > "$W/$name.out" 2> "$W/$name.err"
    fi
    rc=$?
    [ "$rc" = 0 ] || bad "$name: exit status $rc" "$W/$name.err"
}
# losses NAME [FIRST]: "step loss norm" of every step from FIRST on, then "val step loss acc"
losses() {
    awk -v first="${2:-1}" '{ s = ""; for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
        /train_loss=/ && v["step"] >= first { print v["step"], v["train_loss"], v["norm"] }
        /val_loss=/ && v["step"] >= first { print "val", v["step"], v["val_loss"], v["arith_acc"] }' "$W/$1/main.log"
}
# agree TITLE A B [MIN]: the loss columns of two `losses` listings (of at least MIN values, 10 by
# default) agree to 1e-6 relative (same steps)
agree() {
    local report
    report=$(paste -d' ' "$2" "$3" | awk -v min="${4:-10}" '
        { n++; if ($1 == "val") { a = $3; b = $7; k = "val " $2 } else { a = $2; b = $5; k = "step " $1 }
          r = (a > b ? a - b : b - a) / (a > 0 ? a : -a); if (r > worst) { worst = r; at = k }
          if ($1 != $4 && !($1 == "val" && $5 == "val")) bad = 1 }
        END { if (n < min || bad) { print "mismatched listings"; exit 1 }
              printf "%d values, worst relative difference %.2e (%s)\n", n, worst, at; exit worst > 1e-6 }')
    if [ $? = 0 ]; then ok "$1: $report"; else bad "$1: $report"; fi
}
# ranks_vs_one TITLE ONE TWO MIN FLAGS...: runs $BIN with FLAGS as one process (-o $W/ONE) and as
# 2 ranks (-o $W/TWO); every step's loss and the validation losses agree to 1e-6 relative (at least
# MIN values), the final checkpoints' weights to 1e-5 of the largest weight; with -S, both runs
# print the same seeded start of the data
ranks_vs_one() {
    local title=$1 one=$2 two=$3 min=$4 last diff_line
    shift 4
    train "$one" 0 "$@"
    train "$two" 2 "$@"
    losses "$one" > "$W/$one.txt"
    losses "$two" > "$W/$two.txt"
    agree "$title" "$W/$one.txt" "$W/$two.txt" "$min"
    last=$(ls "$W/$one" | grep '^model_.*\.bin$' | tail -n 1)
    diff_line=$("$CKPT_DIFF" "$W/$one/$last" "$W/$two/$last" 2>&1)
    if awk '{ exit !($6 < 1e-5) }' <<< "$diff_line"; then ok "$title: final weights ($last): $diff_line"
    else bad "$title: final weights ($last): $diff_line"; fi
    grep -H "^data order:" "$W/$one.out" "$W/$two.out" > "$W/$two.order"
    if [ -s "$W/$two.order" ]; then
        [ "$(wc -l < "$W/$two.order")" = 2 ] && [ "$(cut -d: -f2- "$W/$two.order" | uniq | wc -l)" = 1 ] \
            && ok "$title: the same start, $(grep "^data order:" "$W/$one.out")" \
            || bad "$title: another start of the data on 2 ranks" "$W/$two.order"
    fi
}
# near_end NAME WINDOWS: the run NAME's seeded start lies at most WINDOWS windows of B*T = 128
# tokens before the end of the (single) training shard of the arithmetic data, so that the data
# wraps around to its start within the run (the seeds are picked for that; a change of the data or
# of the seeded start needs other seeds)
near_end() {
    local start tokens
    start=$(sed -n 's/^data order: .* token \([0-9]*\)$/\1/p' "$W/$1.out")
    tokens=$((($(stat -c %s data/arithmetic/arithmetic_train.bin) - 1024) / 2))
    if [ -n "$start" ] && [ $(((tokens - start - 1) / 128)) -le "$2" ]; then
        ok "$1: the data starts $(((tokens - start - 1) / 128)) windows of 128 tokens before the end of the shard"
    else
        bad "$1: the seeded start ${start:-?} is not within $2 windows of the end of the $tokens tokens: pick another seed"
    fi
}
same_files() {  # same_files TITLE DIR_A DIR_B STEP: the checkpoint pair of STEP byte for byte
    local s
    s=$(printf %08d "$4")
    if cmp -s "$2/model_$s.bin" "$3/model_$s.bin" && cmp -s "$2/state_$s.bin" "$3/state_$s.bin"; then
        ok "$1: model_$s.bin and state_$s.bin identical"
    else
        bad "$1: model_$s.bin or state_$s.bin differ"
    fi
}

make -s data/arithmetic > /dev/null || { echo "test-dist: cannot make data/arithmetic"; exit 1; }
# 20 steps of 4 micro-batches of 4 x 32 tokens (one process) = 2 per rank (two ranks)
F=(-e d2c32h2 -b 4 -t 32 -d 512 -x 20 -u 5 -v 10 -m 4 -k 16 -s 0 -n 10)

# a. 2 ranks against 1 process; then with a seeded data order (-S), 8 steps: seed 1 starts inside
# the shard, seed 3706 seven windows of B*T before its end, so the data wraps around to the start of
# the shard in the middle of step 2 (between micro-batches that one rank reads)
ranks_vs_one "2 ranks vs 1 process, 20 steps and 2 validations" one two 10 "${F[@]}"
for seed in 1 3706; do
    ranks_vs_one "-S $seed: 2 ranks vs 1 process, 8 steps" "one_s$seed" "two_s$seed" 8 "${F[@]}" -x 8 -S "$seed"
done
near_end one_s3706 7
grep -q "2 ranks (AdamW state sharded, ZeRO-1)" "$W/two.out" && grep -q "this rank's shard" "$W/two.out" \
    && ok "the batch and memory lines name the ranks and the shard" || bad "batch/memory lines" "$W/two.out"
if [ "$(grep -c '^step 20/20' "$W/two.out")" = 1 ] && [ ! -s "$W/two.err" ]; then
    ok "rank 0 alone prints (one step 20 line, nothing on stderr)"
else
    bad "rank 0 alone prints" "$W/two.out"
fi

# b. repeatability
train two_again 2 "${F[@]}"
losses two_again > "$W/two_again.txt"
cmp -s "$W/two.txt" "$W/two_again.txt" && ok "two 2-rank runs: same losses, norms and validations (bits)" \
    || bad "two 2-rank runs differ" "$W/two_again.txt"
same_files "two 2-rank runs" "$W/two" "$W/two_again" 20
train two_z0 2 "${F[@]}" -z 0
losses two_z0 > "$W/two_z0.txt"
cmp -s "$W/two.txt" "$W/two_z0.txt" && ok "-z 0 (AdamW state on every rank) and -z 1 (sharded): same losses (bits)" \
    || bad "-z 0 and -z 1 differ" "$W/two_z0.txt"
same_files "-z 0 and -z 1" "$W/two" "$W/two_z0" 20

# c. resume: 2 ranks from step 10 exactly; 1 rank from the 2-rank checkpoint; 2 ranks from 1 process's
for run in resume_two:two:2 resume_one:two:0 resume_two_from_one:one:2; do
    IFS=: read -r name from ranks <<< "$run"
    mkdir -p "$W/$name"
    cp "$W/$from/model_00000010.bin" "$W/$from/state_00000010.bin" "$W/$name/"
    train "$name" "$ranks" "${F[@]}" -y 1
    losses "$name" 11 > "$W/$name.txt"
done
losses two 11 > "$W/two_tail.txt"
losses one 11 > "$W/one_tail.txt"
cmp -s "$W/two_tail.txt" "$W/resume_two.txt" && ok "2 ranks: steps 11-20 after a resume from step 10 identical" \
    || bad "2 ranks: resume differs" "$W/resume_two.txt"
same_files "2 ranks: resumed vs straight" "$W/two" "$W/resume_two" 20
agree "1 rank resumed from the 2-rank checkpoint of step 10 vs 2 ranks straight" "$W/two_tail.txt" "$W/resume_one.txt"
agree "2 ranks resumed from the 1-process checkpoint of step 10 vs 1 process straight" "$W/one_tail.txt" \
    "$W/resume_two_from_one.txt"

# d. errors every rank meets: reported once
expect_error "a total batch that does not split over 2 ranks" "does not split over 2 ranks" \
    "${MPIRUN[@]}" 2 "$TRAIN" -e d2c32h2 -b 4 -t 32 -d 384 -x 2
"$MKSHARD" "$W/bad_000.bin" 5000 300 > /dev/null  # ids up to 299: outside the vocabulary of 200
expect_error "a shard with token ids outside the vocabulary, 2 ranks" "outside the vocabulary" \
    "${MPIRUN[@]}" 2 "$TRAIN" -e data/test/siamese/model.bin -i "$W/bad_*.bin" -j "" -b 2 -t 16 -x 2 -s 0

# e. a killed rank; the lock
"${MPIRUN[@]}" 2 "$TRAIN" "${F[@]}" -x 1000000 -n 5 -o "$W/kill" > "$W/kill.out" 2> "$W/kill.err" &
job=$!
for _ in $(seq 1 600); do [ -e "$W/kill/model_00000005.bin" ] && break; sleep 0.1; done
"$TRAIN" "${F[@]}" -o "$W/kill" > "$W/lock.out" 2> "$W/lock.err"
grep -q "is in use by another run (pid" "$W/lock.err" && ok "the running 2-rank job holds the output folder: $(cat "$W/lock.err")" \
    || bad "lock while the job runs" "$W/lock.err"
rank1=""
for p in $(pgrep -P "$job"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && rank1=$p
done
if [ -z "$rank1" ]; then
    bad "kill: rank 1 of the job not found" "$W/kill.err"
    kill "$job" 2>/dev/null
else
    t0=$(date +%s.%N)
    kill -9 "$rank1"
    for _ in $(seq 1 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.05; done
    t1=$(date +%s.%N)
    kill -0 "$job" 2>/dev/null && { kill -9 "$job"; bad "kill: the job still runs 15 s after rank 1 was killed"; }
    wait "$job"
    jrc=$?
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    # Open MPI's shared-memory transport may print a line of its own when its peer vanishes in the
    # middle of a copy ("[host:pid] Read -1, expected N, errno = 3"); such lines, which carry
    # Open MPI's "[host:pid]" prefix, are not the trainer's, so they are set aside; of the rest,
    # the trainer's, there must be exactly one: its error line.
    grep -v '^\[[^]]*:[0-9]*\] ' "$W/kill.err" > "$W/kill.ours"
    if [ "$jrc" != 0 ] && awk -v s="$secs" 'BEGIN { exit !(s < 10) }' && [ "$(wc -l < "$W/kill.ours")" = 1 ] \
        && grep -q "^error: rank 0: the job was ended by mpirun: another rank died" "$W/kill.ours"; then
        ok "rank 1 killed (SIGKILL): the job ended in $secs s with exit status $jrc and one line: $(cat "$W/kill.ours")$(
            [ -s "$W/kill.err" ] && n=$(($(wc -l < "$W/kill.err") - 1)) && [ "$n" -gt 0 ] && echo " (and $n of Open MPI's own)")"
    else
        bad "rank 1 killed: exit status $jrc after $secs s" "$W/kill.err"
    fi
    ls "$W/kill" | grep -q '\.tmp$' && bad "kill: .tmp files left behind" || true
    newest=$(ls "$W/kill" | sed -n 's/^state_\([0-9]*\)\.bin$/\1/p' | sort | tail -n 1)
    "${MPIRUN[@]}" 2 "$TRAIN" "${F[@]}" -x $((10#$newest + 1)) -n 5 -o "$W/kill" -y 1 > "$W/kill_resume.out" 2>&1 \
        && grep -q "resumed from" "$W/kill_resume.out" \
        && ok "after the kill: lock gone, resumed from step $((10#$newest)) with 2 ranks" \
        || bad "after the kill: no resume" "$W/kill_resume.out"
fi

# f. the CUDA trainer through the CPU execution layer (about 1 s a step)
if [ -x "$TRAIN_CU" ] && ldd "$TRAIN_CU" 2>/dev/null | grep -q libmpi; then
    # (-H "": the multiple-choice eval through the layer costs more than the steps; tests/test_eval.sh has it)
    G=(-e d2c32h2 -b 4 -t 32 -d 256 -x 6 -u 5 -v 3 -m 2 -k 4 -s 0 -n 3 -H "")
    CU_LABEL="CUDA trainer ($(basename "$TRAIN_CU"))"
    BIN=$TRAIN_CU ranks_vs_one "$CU_LABEL: 2 ranks vs 1 process, 6 steps and 2 validations" cu_one cu_two 8 "${G[@]}"
    # seeded (4 steps of 2 micro-batches): seed 3706 wraps around to the start in step 4, between
    # the micro-batch of rank 0 and that of rank 1
    for seed in 1 3706; do
        BIN=$TRAIN_CU ranks_vs_one "$CU_LABEL: -S $seed: 2 ranks vs 1 process, 4 steps" "cu_one_s$seed" "cu_two_s$seed" 4 \
            "${G[@]}" -x 4 -v 4 -n 0 -S "$seed"
    done
    BIN=$TRAIN_CU train cu_two_z0 2 "${G[@]}" -z 0
    mkdir -p "$W/cu_resume"
    cp "$W/cu_two/model_00000003.bin" "$W/cu_two/state_00000003.bin" "$W/cu_resume/"
    BIN=$TRAIN_CU train cu_resume 2 "${G[@]}" -y 1
    losses cu_two_z0 > "$W/cu_two_z0.txt"
    cmp -s "$W/cu_two.txt" "$W/cu_two_z0.txt" && ok "$CU_LABEL: -z 0 and -z 1, same losses (bits)" \
        || bad "$CU_LABEL: -z 0 and -z 1 differ" "$W/cu_two_z0.txt"
    same_files "$CU_LABEL: -z 0 and -z 1" "$W/cu_two" "$W/cu_two_z0" 6
    same_files "$CU_LABEL: 2 ranks resumed from step 3 vs straight" "$W/cu_two" "$W/cu_resume" 6
    grep -q "master weights and AdamW: this rank's shard" "$W/cu_two.out" \
        && ok "$CU_LABEL: the memory line names the shard" || bad "$CU_LABEL: memory line" "$W/cu_two.out"
else
    echo "skip f. the CUDA trainer through the CPU execution layer: $TRAIN_CU not built with MPI"
fi
if [ -x "$TRAIN_CU_BF16" ] && ldd "$TRAIN_CU_BF16" 2>/dev/null | grep -q libmpi; then
    H=(-e d2c32h2 -b 4 -t 32 -d 256 -x 4 -u 5 -v 2 -m 2 -k 4 -s 0 -H "")
    CU_LABEL="CUDA trainer ($(basename "$TRAIN_CU_BF16"))"
    BIN=$TRAIN_CU_BF16 train bf16_two 2 "${H[@]}"
    BIN=$TRAIN_CU_BF16 train bf16_two_z0 2 "${H[@]}" -z 0
    same_files "$CU_LABEL: -z 0 and -z 1 (bf16 working weights gathered)" "$W/bf16_two" "$W/bf16_two_z0" 4
else
    echo "skip f. the BF16 CUDA trainer through the CPU execution layer: $TRAIN_CU_BF16 not built with MPI"
fi

# g. a parameter count that 2 and 3 do not divide: the last rank's shard is shorter
O=(-e d9c25h5 -b 4 -t 32 -d 768 -x 6 -u 5 -v 3 -m 2 -k 4 -s 0 -n 3)  # 6 micro-batches a step: 3, 2 per rank
train odd_one 0 "${O[@]}"
train odd_two 2 "${O[@]}"
train odd_three 3 "${O[@]}"
train odd_three_z0 3 "${O[@]}" -z 0
odd_n=$(sed -n 's/^model: .* \([0-9]*\) parameters$/\1/p' "$W/odd_one.out")
if [ -n "$odd_n" ] && [ $((odd_n % 2)) != 0 ] && [ $((odd_n % 3)) != 0 ]; then
    ok "d9c25h5: $odd_n parameters: the last of 2 ranks holds $((odd_n - (odd_n + 1) / 2)), of 3 ranks $((odd_n - 2 * ((odd_n + 2) / 3))) (shards of $(((odd_n + 1) / 2)) and $(((odd_n + 2) / 3)))"
else
    bad "d9c25h5: a parameter count that divides by neither 2 nor 3 expected, not '$odd_n'" "$W/odd_one.out"
fi
for name in odd_one odd_two odd_three odd_three_z0; do losses "$name" > "$W/$name.txt"; done
agree "odd model: 2 ranks vs 1 process, 6 steps and 2 validations" "$W/odd_one.txt" "$W/odd_two.txt" 8
agree "odd model: 3 ranks vs 1 process, 6 steps and 2 validations" "$W/odd_one.txt" "$W/odd_three.txt" 8
cmp -s "$W/odd_three.txt" "$W/odd_three_z0.txt" && ok "odd model, 3 ranks: -z 0 and -z 1, same losses (bits)" \
    || bad "odd model, 3 ranks: -z 0 and -z 1 differ" "$W/odd_three_z0.txt"
same_files "odd model, 3 ranks: -z 0 and -z 1" "$W/odd_three" "$W/odd_three_z0" 6
for run in odd_resume_three:3 odd_resume_one:0; do
    IFS=: read -r name ranks <<< "$run"
    mkdir -p "$W/$name"
    cp "$W/odd_three/model_00000003.bin" "$W/odd_three/state_00000003.bin" "$W/$name/"
    train "$name" "$ranks" "${O[@]}" -y 1
    losses "$name" 4 > "$W/$name.txt"
done
same_files "odd model, 3 ranks: resumed from step 3 vs straight" "$W/odd_three" "$W/odd_resume_three" 6
losses odd_three 4 > "$W/odd_three_tail.txt"
agree "odd model: 1 process resumed from the 3-rank checkpoint of step 3 vs 3 ranks straight" \
    "$W/odd_three_tail.txt" "$W/odd_resume_one.txt" 4

# h. the NCCL path, NCCL played by tests/fake_nccl/nccl.h, against the host path (BF16 CUDA trainer)
if [ -n "$odd_n" ] && [ -x "$TRAIN_CU_NCCL" ] && [ -x "$TRAIN_CU_BF16" ] && ldd "$TRAIN_CU_BF16" 2>/dev/null | grep -q libmpi; then
    P=(-e d9c25h5 -b 2 -t 16 -d 192 -x 2 -u 5 -v 0 -k 2 -s 0)
    for ranks in 2 3; do
        BIN=$TRAIN_CU_BF16 train "host_odd_$ranks" "$ranks" "${P[@]}"
        for z in 1 0; do
            BIN=$TRAIN_CU_NCCL CUDACPU_DEVICES=$ranks FAKE_NCCL_PARAMETERS=$odd_n train "nccl_odd_${ranks}_z$z" "$ranks" \
                "${P[@]}" -z "$z"
            same_files "NCCL path (fake NCCL), $ranks ranks, -z $z vs the host path" "$W/host_odd_$ranks" \
                "$W/nccl_odd_${ranks}_z$z" 2
            shard=$(((odd_n + ranks - 1) / ranks))
            elem=$([ "$z" = 1 ] && echo 2 || echo 4)  # -z 1 gathers the bf16 weights, -z 0 the fp32 gradients
            want="fake NCCL: rank 0 of $ranks: 2 ncclReduceScatter of $shard floats, 2 ncclAllGather of $((shard * elem)) bytes"
            if grep -qx "$want" "$W/nccl_odd_${ranks}_z$z.err" && [ "$(grep -c '^fake NCCL: rank' "$W/nccl_odd_${ranks}_z$z.err")" = "$ranks" ]; then
                ok "NCCL path, $ranks ranks, -z $z: every rank's calls checked; $want"
            else
                bad "NCCL path, $ranks ranks, -z $z: expected '$want' from each of $ranks ranks" "$W/nccl_odd_${ranks}_z$z.err"
            fi
        done
    done
else
    echo "skip h. the NCCL path with the fake NCCL: $TRAIN_CU_NCCL or $TRAIN_CU_BF16 not built with MPI"
fi

cli_summary test-dist
