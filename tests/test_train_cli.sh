#!/usr/bin/env bash
# tests/test_train_cli.sh: end-to-end tests of the CPU trainer's robustness.
#
#   bash tests/test_train_cli.sh            (make test runs it; TRAIN=... picks another binary)
#
# Every run uses a tiny model: the 3-layer, C=32, V=200, maxT=64 siamese checkpoint of
# data/test/siamese/model.bin (one run also starts a fresh -e d1), and token shards written by
# tests/bin/mkshard, so the whole file takes a few seconds. It checks
#   a. exact resume: 2K steps straight == K steps, stop, resume -y 1 for K more (step losses,
#      val losses, final model and state files byte for byte), with gradient accumulation, a val
#      loader, sampling, two shards and a wrap-around of the data; and after a SIGKILL mid-run;
#      1 and 2 threads give identical losses and models (the tiny model, and a fresh d2)
#   b. bad input of every class ends with exactly one "error: ..." line on stderr and exit status 1
#      (checkpoints, state files, data, flags, output folders); a missing state file
#   c. a full disk (ulimit -f, SIGXFSZ ignored) while checkpointing: error, exit 1, no .tmp left,
#      the previous pair intact and resumable; and while writing main.log
#   d. the non-finite guard (TRAIN_GPT2_NAN_STEPS, which only the test build $HOOKS reads)
#   e. -nk keeps exactly the newest N pairs; the newest of more than 4096 pairs is found
#   f. one run per output folder (a lock naming the holder's pid, gone with a SIGKILL); -o creates
#      its parents; the start-up notes (-N with a checkpoint, -u > -x, a resume with another -x,
#      -w without -K wsd, -q with -K constant, -n and -nk without -o); -m above the val data: one pass
#      -y 1 on a folder with a log but no checkpoint; NaN/Inf weights and moments; .tmp debris
# KEEP=1 keeps the work folder (in /dev/shm, else /tmp) for a look.
# and closes with "N passed, N failed" (exit status 1 when anything failed).
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-./train_gpt2}
HOOKS=${HOOKS:-tests/bin/train_gpt2_hooks}  # the same trainer built with -DTEST_HOOKS (common/test_hooks.h)
MKSHARD=${MKSHARD:-tests/bin/mkshard}
MODEL=data/test/siamese/model.bin
# one thread (tiny model), except the exact-resume runs: two, so that they also check that the
# OpenMP reductions give the same bits from run to run, and the same bits as one thread
export OMP_NUM_THREADS=1
unset TRAIN_GPT2_NAN_STEPS
source tests/cli_lib.sh  # the work folder $W and the helpers (ok, bad, run, expect_error, check, ...)

[ -x "$TRAIN" ] || { echo "error: $TRAIN not built" >&2; exit 1; }
[ -x "$HOOKS" ] || { echo "error: $HOOKS not built" >&2; exit 1; }
[ -x "$MKSHARD" ] || { echo "error: $MKSHARD not built" >&2; exit 1; }
mkdir -p "$W/data"
"$MKSHARD" "$W/data/train_000.bin" 120 200 1
"$MKSHARD" "$W/data/train_001.bin" 90 200 2
"$MKSHARD" "$W/data/val_000.bin" 100 200 3
TRAIN_GLOB="$W/data/train_*.bin"
# B 2, T 8, 32 tokens per step = 2 micro-batches; the two shards hold 7 + 5 micro-batches
FLAGS=(-e "$MODEL" -i "$TRAIN_GLOB" -j "$W/data/val_000.bin" -b 2 -t 8 -d 32 -v 2 -m 2 -s 2 -g 4
       -l 1e-3 -u 4 -q 0.1 -c 0.1)  # warmup covers the first half: its -x does not change the lr

echo "== a. exact resume"
expect_success straight env OMP_NUM_THREADS=2 "$TRAIN" "${FLAGS[@]}" -x 8 -n 4 -o "$W/straight"
expect_success first_half env OMP_NUM_THREADS=2 "$TRAIN" "${FLAGS[@]}" -x 4 -o "$W/resumed"
expect_success second_half env OMP_NUM_THREADS=2 "$TRAIN" "${FLAGS[@]}" -x 8 -n 4 -o "$W/resumed" -y 1
check "resume: the resumed run says so" grep -q "resumed from $W/resumed/model_00000004.bin at step 4" "$W/second_half.out"
check "resume: 8 train lines" test "$(train_lines "$W/resumed/main.log" | wc -l)" -eq 8
if diff <(train_lines "$W/straight/main.log") <(train_lines "$W/resumed/main.log") > "$W/diff_train"; then
    ok "resume: identical train loss, norm and lr at every step"
else
    bad "resume: train lines differ" "$W/diff_train"
fi
missing=0
while read -r line; do grep -qxF "$line" "$W/resumed/main.log" || missing=1; done < <(grep val_loss "$W/straight/main.log")
check "resume: every val loss of the straight run (steps 0,2,4,6,8) in the resumed log" test "$missing" -eq 0
for f in model_00000004.bin model_00000008.bin state_00000008.bin; do
    check "resume: $f byte-identical" cmp -s "$W/straight/$f" "$W/resumed/$f"
done
# state 4 of the straight run records its plan, -x 8 (header int 16); the first half planned -x 4
check "resume: state_00000004.bin byte-identical but for the planned -x" \
    cmp -s <(head -c 64 "$W/straight/state_00000004.bin"; tail -c +69 "$W/straight/state_00000004.bin") \
           <(head -c 64 "$W/resumed/state_00000004.bin"; tail -c +69 "$W/resumed/state_00000004.bin")
check "resume: the planned -x in the state files: 8 and 4" \
    test "$(od -A n -t d4 -j 64 -N 4 "$W/straight/state_00000004.bin") $(od -A n -t d4 -j 64 -N 4 "$W/resumed/state_00000004.bin")" = "           8            4"
# the samples after the resume come from the restored sampling random state
check "resume: identical samples after the resume" \
    diff <(sed -n '/step 5\//,$p' "$W/straight.out" | grep -v -e '^step' -e '^wrote' -e ms) \
         <(sed -n '/step 5\//,$p' "$W/second_half.out" | grep -v -e '^step' -e '^wrote' -e ms)
expect_success "resume: an already complete run does nothing" "$TRAIN" "${FLAGS[@]}" -x 8 -o "$W/resumed" -y 1
check "resume: ... and says so" grep -q "already complete" "$W/resume:_an_already_complete_run_does_nothing.out"
# a fresh d1 (V 50257, C 64) model and its resume
expect_success "fresh d1: 2 steps" "$TRAIN" -e d1 -N pre -i "$TRAIN_GLOB" -j "" -b 1 -t 8 -x 2 -s 0 -o "$W/d1"
expect_success "fresh d1: resume to 3" "$TRAIN" -e d1 -N pre -i "$TRAIN_GLOB" -j "" -b 1 -t 8 -x 3 -s 0 -o "$W/d1" -y 1
check "fresh d1: pairs 2 and 3" test -f "$W/d1/model_00000003.bin" -a -f "$W/d1/state_00000002.bin"

# 1 and 2 threads give the same bits: the tiny model's straight run again on one thread, and a
# fresh d2 (C 128, V 50257: matmuls split into several tasks, attention and the classifier wide)
expect_success "threads: the straight run on one thread" env OMP_NUM_THREADS=1 "$TRAIN" "${FLAGS[@]}" -x 8 -n 4 \
    -o "$W/one_thread"
check "threads: 1 and 2 threads, identical train loss, norm and lr at every step" \
    diff <(train_lines "$W/straight/main.log") <(train_lines "$W/one_thread/main.log")
check "threads: 1 and 2 threads, model_00000008.bin byte-identical" \
    cmp -s "$W/straight/model_00000008.bin" "$W/one_thread/model_00000008.bin"
for threads in 1 2; do
    expect_success "threads: fresh d2 on $threads" env OMP_NUM_THREADS=$threads "$TRAIN" -e d2 -N siamese \
        -i "$TRAIN_GLOB" -j "" -b 2 -t 24 -x 3 -s 0 -o "$W/d2_$threads"
done
check "threads: fresh d2, 1 and 2 threads: model_00000003.bin byte-identical" \
    cmp -s "$W/d2_1/model_00000003.bin" "$W/d2_2/model_00000003.bin"
check "threads: fresh d2, 1 and 2 threads: identical train lines" diff <(train_lines "$W/d2_1/main.log") <(train_lines "$W/d2_2/main.log")

# killed (SIGKILL) mid-run, soon after its first checkpoint, then resumed: the same final files as
# a run never killed
expect_success "kill: an uninterrupted run" "$TRAIN" "${FLAGS[@]}" -s 0 -v 50 -x 300 -n 5 -o "$W/unkilled"
"$TRAIN" "${FLAGS[@]}" -s 0 -v 50 -x 300 -n 5 -o "$W/killed" > /dev/null 2>&1 &
pid=$!
for _ in $(seq 6000); do [ -f "$W/killed/model_00000005.bin" ] && break; sleep 0.01; done
kill -9 $pid 2> /dev/null
wait $pid 2> /dev/null
check "kill: killed mid-run (newest checkpoint: $(ls "$W/killed" | grep '^model_' | tail -n 1))" test ! -f "$W/killed/model_00000300.bin"
expect_success "kill: resume after SIGKILL" "$TRAIN" "${FLAGS[@]}" -s 0 -v 50 -x 300 -n 5 -o "$W/killed" -y 1
check "kill: final model identical" cmp -s "$W/unkilled/model_00000300.bin" "$W/killed/model_00000300.bin"
check "kill: final state identical" cmp -s "$W/unkilled/state_00000300.bin" "$W/killed/state_00000300.bin"
check "kill: no .tmp left" test -z "$(ls "$W/killed" | grep tmp)"

# resumed inside the decay of -K wsd: steps 5..8 of -x 8 decay (-w 0.5); the pair of step 6 of a
# straight run, alone in another folder, resumed to 8: the same last two steps and final files
WSD=("${FLAGS[@]}" -s 0 -K wsd -w 0.5 -u 2 -x 8 -n 3)
expect_success "wsd resume: a straight run" "$TRAIN" "${WSD[@]}" -o "$W/wsd_straight"
mkdir -p "$W/wsd_resumed"
cp "$W/wsd_straight/model_00000006.bin" "$W/wsd_straight/state_00000006.bin" "$W/wsd_resumed/"
expect_success "wsd resume: resumed at step 6, inside the decay" "$TRAIN" "${WSD[@]}" -o "$W/wsd_resumed" -y 1
check "wsd resume: the lr falls over steps 5..8" test "$(grep -c ' train_loss=.* lr=' "$W/wsd_straight/main.log")" -eq 8 -a \
    "$(sed -n 's/^step=4 .* lr=\([^ ]*\) .*/\1/p' "$W/wsd_straight/main.log")" = 1.0000e-03 -a \
    "$(sed -n 's/^step=6 .* lr=\([^ ]*\) .*/\1/p' "$W/wsd_straight/main.log")" != 1.0000e-03
if diff <(train_lines "$W/wsd_straight/main.log" | tail -n 2) <(train_lines "$W/wsd_resumed/main.log") > "$W/diff_wsd"; then
    ok "wsd resume: identical loss, norm and lr at steps 7 and 8"
else
    bad "wsd resume: train lines differ" "$W/diff_wsd"
fi
for f in model_00000008.bin state_00000008.bin; do
    check "wsd resume: $f byte-identical" cmp -s "$W/wsd_straight/$f" "$W/wsd_resumed/$f"
done

echo "== b. bad input"
T=(-i "$TRAIN_GLOB" -j "" -b 2 -t 8 -x 2 -s 0)
# checkpoints
cp "$MODEL" "$W/good.bin"
SIZE=$(stat -c %s "$MODEL")
bad_model() { cp "$MODEL" "$W/$1.bin"; }
expect_error "checkpoint missing" "cannot open $W/none.bin" "$TRAIN" -e "$W/none.bin" "${T[@]}"
bad_model trunc; truncate -s $((SIZE - 4)) "$W/trunc.bin"
expect_error "checkpoint truncated (body)" "has $((SIZE - 4)) bytes but its header describes $SIZE" "$TRAIN" -e "$W/trunc.bin" "${T[@]}"
bad_model trunc_header; truncate -s 100 "$W/trunc_header.bin"
expect_error "checkpoint truncated (header)" "smaller than the header" "$TRAIN" -e "$W/trunc_header.bin" "${T[@]}"
: > "$W/empty.bin"
expect_error "checkpoint empty" "truncated" "$TRAIN" -e "$W/empty.bin" "${T[@]}"
bad_model longer; printf 'xxxx' >> "$W/longer.bin"
expect_error "checkpoint with trailing bytes" "has $((SIZE + 4)) bytes" "$TRAIN" -e "$W/longer.bin" "${T[@]}"
bad_model magic; put_int "$W/magic.bin" 0 12345
expect_error "checkpoint wrong magic" "not a model checkpoint (bad magic 12345)" "$TRAIN" -e "$W/magic.bin" "${T[@]}"
bad_model version; put_int "$W/version.bin" 1 2
expect_error "checkpoint wrong version" "unsupported checkpoint version 2" "$TRAIN" -e "$W/version.bin" "${T[@]}"
bad_model norm; put_int "$W/norm.bin" 8 7
expect_error "checkpoint unknown norm mode" "unknown norm mode 7" "$TRAIN" -e "$W/norm.bin" "${T[@]}"
bad_model negnorm; put_int "$W/negnorm.bin" 8 -1
expect_error "checkpoint negative norm mode" "unknown norm mode -1" "$TRAIN" -e "$W/negnorm.bin" "${T[@]}"
bad_model premode; put_int "$W/premode.bin" 8 0
expect_error "checkpoint header sizes disagree with the file (siamese file says pre)" "header describes" "$TRAIN" -e "$W/premode.bin" "${T[@]}"
bad_model layers; put_int "$W/layers.bin" 4 4
expect_error "checkpoint header sizes disagree with the file (L 4)" "header describes" "$TRAIN" -e "$W/layers.bin" "${T[@]}"
for spec in "2 0 maxT" "2 -5 maxT" "2 2000000000 maxT" "3 0 V" "3 -1 V" "4 0 L" "4 100000 L" "5 0 NH" "5 -2 NH" "5 3 NH" \
            "6 0 C" "6 -32 C" "6 2147483647 C" "7 0 Vp" "7 200 Vp" "7 384 Vp" "7 -128 Vp"; do
    set -- $spec
    bad_model "absurd_$3_$2"; put_int "$W/absurd_$3_$2.bin" "$1" "$2"
    expect_error "checkpoint absurd header value $3=$2" "inconsistent model sizes in header" "$TRAIN" -e "$W/absurd_$3_$2.bin" "${T[@]}"
done
mkdir -p "$W/adir.bin"
expect_error "checkpoint is a folder" "cannot open $W/adir.bin: it is a folder" "$TRAIN" -e "$W/adir.bin" "${T[@]}"

# state files: a good pair to spoil, one spoiled copy per case
expect_success "state: a run to spoil" "$TRAIN" -e "$MODEL" "${T[@]}" -o "$W/good_run"
(cd "$W/good_run" && md5sum * > "$W/good_run.md5")
STATE_SIZE=$(stat -c %s "$W/good_run/state_00000002.bin")
# bad_state NAME: a copy of the good run in $W/NAME, whose state file is $S
bad_state() { rm -rf "$W/$1"; cp -r "$W/good_run" "$W/$1"; S="$W/$1/state_00000002.bin"; }
# resume_of NAME: sets R to the command that resumes the run in $W/NAME up to step 4
resume_of() { R=("$TRAIN" -e "$MODEL" "${T[@]}" -x 4 -o "$W/$1" -y 1); }
bad_state st_trunc; truncate -s $((STATE_SIZE - 8)) "$S"
resume_of st_trunc
expect_error "state truncated (body)" "has $((STATE_SIZE - 8)) bytes but its header describes $STATE_SIZE" "${R[@]}"
bad_state st_trunc_header; truncate -s 1000 "$S"
resume_of st_trunc_header
expect_error "state truncated (header)" "smaller than the header" "${R[@]}"
bad_state st_longer; printf 'abcd' >> "$S"
resume_of st_longer
expect_error "state with trailing bytes" "has $((STATE_SIZE + 4)) bytes" "${R[@]}"
bad_state st_magic; put_int "$S" 0 20260208
resume_of st_magic
expect_error "state wrong magic" "is not a training state file (bad magic 20260208)" "${R[@]}"
bad_state st_version; put_int "$S" 1 9
resume_of st_version
expect_error "state wrong version" "unsupported state version 9" "${R[@]}"
bad_state st_params; put_int "$S" 5 1234
resume_of st_params
expect_error "state parameter count disagrees with the model" "holds optimizer state for 1234 parameters, but the model has" "${R[@]}"
bad_state st_params_neg; put_int "$S" 6 -1
resume_of st_params_neg
expect_error "state parameter count negative (high word)" "parameters, but the model has" "${R[@]}"
for spec in "2 -1 step" "3 -1 updates" "3 99 updates" "4 -3 nonfinite" "7 0 B" "8 -8 T" "9 0 total_batch" "11 -1 shard_index" "12 -5 shard_offset" "16 -1 max_steps"; do
    set -- $spec
    bad_state "st_absurd_$3"; put_int "$S" "$1" "$2"
    resume_of "st_absurd_$3"
    expect_error "state absurd header value $3=$2" "state_00000002.bin: inconsistent values in header" "${R[@]}"
done
bad_state st_step; put_int "$S" 2 1; put_int "$S" 3 1
resume_of st_step
expect_error "state step disagrees with its name" "says step 1, its name says 2" "${R[@]}"
bad_state st_shard; put_int "$S" 11 5
resume_of st_shard
expect_error "state data position outside the data (shard 5)" "shard index 5 to resume from is not in 0..1" "${R[@]}"
bad_state st_offset; put_int "$S" 12 1000
resume_of st_offset
expect_error "state data position outside the data (offset 1000)" "offset 1000 to resume from" "${R[@]}"
bad_state st_other_model
cp data/test/pre/model.bin "$W/st_other_model/model_00000002.bin"
resume_of st_other_model
expect_error "state of another model (a pre-norm model beside it)" "but the model has" "${R[@]}"
# a missing state file: that model is not a checkpoint; the resume falls back to the newest complete pair
expect_success "state missing: a run with pairs 1 and 2" "$TRAIN" -e "$MODEL" "${T[@]}" -n 1 -o "$W/st_missing"
rm "$W/st_missing/state_00000002.bin"
resume_of st_missing
expect_success "state missing: resume" "${R[@]}"
check "state missing: ... from pair 1" grep -q "resumed from $W/st_missing/model_00000001.bin at step 1" "$W/state_missing:_resume.out"
bad_state st_model_trunc; truncate -s 2000 "$W/st_model_trunc/model_00000002.bin"
resume_of st_model_trunc
expect_error "resume from a truncated model file" "model_00000002.bin: file has 2000 bytes" "${R[@]}"
# the state remembers B, T and -d: a resume with others is refused (the data position and the
# accumulation would not continue the run exactly); the same values resume fine
expect_error "resume with another -b" "written with -b 2 -t 8 -d 16" "$TRAIN" -e "$MODEL" "${T[@]}" -b 1 -x 4 -o "$W/good_run" -y 1
expect_error "resume with another -t" "written with -b 2 -t 8 -d 16" "$TRAIN" -e "$MODEL" "${T[@]}" -t 4 -x 4 -o "$W/good_run" -y 1
expect_error "resume with another -d" "written with -b 2 -t 8 -d 16" "$TRAIN" -e "$MODEL" "${T[@]}" -d 32 -x 4 -o "$W/good_run" -y 1

# dataset problems (the loader has its own unit tests; here one of each kind through the trainer)
"$MKSHARD" "$W/data/oov.bin" 100 300 4
expect_error "data: token id out of the model's vocabulary" "outside the vocabulary of 200 tokens" "$TRAIN" -e "$MODEL" "${T[@]}" -i "$W/data/oov.bin"
mkdir -p "$W/data/dir_000.bin"
expect_error "data: a folder among the shards" "cannot open $W/data/dir_000.bin: it is a folder" "$TRAIN" -e "$MODEL" "${T[@]}" -i "$W/data/dir_*.bin"
expect_error "data: no shard matches" "no file matches" "$TRAIN" -e "$MODEL" "${T[@]}" -i "$W/data/nothing_*.bin"
"$MKSHARD" "$W/data/small.bin" 10 200 5
expect_error "data: shard smaller than a batch" "only 10 tokens" "$TRAIN" -e "$MODEL" "${T[@]}" -i "$W/data/small.bin"
cp "$W/data/val_000.bin" "$W/data/cut.bin"; truncate -s 1100 "$W/data/cut.bin"
expect_error "data: truncated val shard" "truncated shard" "$TRAIN" -e "$MODEL" "${T[@]}" -j "$W/data/cut.bin" -v 1
# -m above the batches the validation data holds (val_000.bin: 100 tokens, 6 windows of 2*8 + 1):
# one pass over them, as -m 6 (the loader went round again, and the loss averaged repeats)
expect_success "val: -m 6, the 6 batches of val_000.bin" "$TRAIN" -e "$MODEL" "${T[@]}" -j "$W/data/val_000.bin" -v 2 -m 6
expect_success "val: -m 50" "$TRAIN" -e "$MODEL" "${T[@]}" -j "$W/data/val_000.bin" -v 2 -m 50
check "val: -m 50 gives the val losses of -m 6 (steps 0 and 2)" diff <(grep "^val loss" "$W/val:_-m_6,_the_6_batches_of_val_000.bin.out") \
    <(grep "^val loss" "$W/val:_-m_50.out")
check "val: -m 50: ... and says so" grep -qx "note: -m 50 is more than the validation data holds: 6 batches of B\*T = 16 tokens, each once" \
    "$W/val:_-m_50.out"
check "val: -m 6: ... says nothing" test -z "$(grep -e "-m 6" "$W/val:_-m_6,_the_6_batches_of_val_000.bin.out")"

mkdir -p "$W/tokdata"; cp "$W/data/train_000.bin" "$W/tokdata/"; printf 'not a tokenizer' > "$W/tokdata/tokenizer.bin"
expect_error "data: a corrupted tokenizer.bin beside the shards" "tokenizer.bin: truncated tokenizer file" "$TRAIN" -e "$MODEL" "${T[@]}" -i "$W/tokdata/train_000.bin"

# flags (tests/cli_flags.sh: the same checks run against train_gpt2cu in tests/test_train_cu_cli.sh)
source tests/cli_flags.sh
# -r: train_gpt2 recomputes up to level 2 (train_gpt2cu up to 3: tests/test_train_cu_cli.sh), as its -h says
expect_error "flag: -r 3 (train_gpt2's levels end at 2)" "-r 3 is out of range [0, 2]" "$TRAIN" -e "$MODEL" "${T[@]}" -r 3
check "flag: -h states -r <0..2>" grep -q -- "^  -r <0\.\.2> " <("$TRAIN" -h)
# an absurd thread count: libgomp failed to start the threads (50000) or crashed (100000)
expect_error "OMP_NUM_THREADS=100000" "OMP_NUM_THREADS asks for 100000 threads" env OMP_NUM_THREADS=100000 "$TRAIN" -e "$MODEL" "${T[@]}"
# output folders. Tests run as root in CI, and root ignores permission bits, so the unwritable
# folders here are ones that no permission lets anyone write: below a regular file, and /proc.
: > "$W/plainfile"
expect_error "output: parent is a regular file" "cannot create output folder $W/plainfile/out" "$TRAIN" -e "$MODEL" "${T[@]}" -o "$W/plainfile/out"
expect_error "output: -o is a regular file" "exists and is not a folder" "$TRAIN" -e "$MODEL" "${T[@]}" -o "$W/plainfile"
if [ -d /proc/self ]; then
    expect_error "output: /proc/self (no file can be created there, even by root)" "/proc/self" "$TRAIN" -e "$MODEL" "${T[@]}" -o /proc/self
fi
if [ "$(id -u)" -ne 0 ]; then
    mkdir -p "$W/ro"; chmod 555 "$W/ro"
    expect_error "output: chmod 555 folder" "is not writable" "$TRAIN" -e "$MODEL" "${T[@]}" -o "$W/ro"
else
    echo "skip output: chmod 555 folder (running as root, which ignores permissions)"
fi
# a folder path of 1024 characters: main.log went, cut to 1023 characters, to a file beside the
# folder, and the first checkpoint failed only after the training steps ("output path too long")
LONG="$W/long"
while [ ${#LONG} -lt 900 ]; do LONG="$LONG/$(printf '%0100d' 0)"; done
mkdir -p "$LONG"
LONG="$LONG/$(printf 'b%.0s' $(seq $((1024 - ${#LONG} - 1))))"
expect_error "output: a path too long for its file names" "output folder -o is too long (1024 characters, at most 1000)" "$TRAIN" -e "$MODEL" "${T[@]}" -o "$LONG"
check "output: ... and nothing was written" test -z "$(ls "$(dirname "$LONG")")"
expect_error "output: -o holds a run, no -y" "already holds a run" "$TRAIN" -e "$MODEL" "${T[@]}" -o "$W/good_run"
mkdir -p "$W/logonly"; echo "step=1 train_loss=1" > "$W/logonly/main.log"
expect_error "output: -o holds only a main.log, no -y" "already holds a run" "$TRAIN" -e "$MODEL" "${T[@]}" -o "$W/logonly"
check "output: the refused runs left that run alone" bash -c "cd '$W/good_run' && md5sum -c --quiet '$W/good_run.md5'"

echo "== c. full disk while checkpointing"
# a complete pair at step 2, then a resume whose step-4 checkpoint cannot be written
cp -r "$W/good_run" "$W/full"
cp "$W/full/model_00000002.bin" "$W/model2.copy"; cp "$W/full/state_00000002.bin" "$W/state2.copy"
LIMIT_KB=$(( (STATE_SIZE / 1024) / 2 ))
resume_of full
run full_disk bash -c "trap '' XFSZ; ulimit -f $LIMIT_KB; exec ${R[*]@Q}"
lines=$(wc -l < "$W/full_disk.err")
if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && grep -q "^error: writing $W/full/state_00000004.bin.tmp failed (File too large); $W/full/state_00000004.bin was not written$" "$W/full_disk.err"; then
    ok "full disk (state file): $(cat "$W/full_disk.err")"
else
    echo "       exit status $rc"; bad "full disk (state file): one error line, exit 1" "$W/full_disk.err"
fi
check "full disk: no .tmp file left" test -z "$(ls "$W/full" | grep tmp)"
check "full disk: no file of step 4" test -z "$(ls "$W/full" | grep 00000004)"
check "full disk: pair 2 intact" cmp -s "$W/full/model_00000002.bin" "$W/model2.copy"
check "full disk: state 2 intact" cmp -s "$W/full/state_00000002.bin" "$W/state2.copy"
# the model file fails after its state was written: a folder squats on the temporary name
mkdir "$W/full/model_00000004.bin.tmp"
expect_error "model file cannot be written after the state" "cannot write $W/full/model_00000004.bin.tmp" "${R[@]}"
rmdir "$W/full/model_00000004.bin.tmp"
check "half-written pair: state 4 alone is not a checkpoint" test -f "$W/full/state_00000004.bin" -a ! -f "$W/full/model_00000004.bin"
# the disk is full again while that lone state 4 is being rewritten: it stays as it was
cp "$W/full/state_00000004.bin" "$W/state4.copy"
run full_disk2 bash -c "trap '' XFSZ; ulimit -f $LIMIT_KB; exec ${R[*]@Q}"
check "full disk over an existing file: exit 1, 'the previous ... is intact'" \
    grep -qx "error: writing $W/full/state_00000004.bin.tmp failed (File too large); the previous $W/full/state_00000004.bin is intact" "$W/full_disk2.err"
check "full disk over an existing file: it is" cmp -s "$W/full/state_00000004.bin" "$W/state4.copy"
expect_success "full disk: resume after the failures" "${R[@]}"
check "full disk: ... resumed from pair 2" grep -q "resumed from $W/full/model_00000002.bin at step 2" "$W/full_disk:_resume_after_the_failures.out"
expect_success "full disk: the same 4 steps without failures" "$TRAIN" -e "$MODEL" "${T[@]}" -x 4 -o "$W/nofull"
check "full disk: the resumed run equals an uninterrupted one" cmp -s "$W/full/model_00000004.bin" "$W/nofull/model_00000004.bin"
# the full disk hits main.log instead (at 1 KiB; stdout goes to /dev/null and stderr through a pipe,
# which the limit does not apply to): one error line, and no half-written line in the log
cp "$W/full/main.log" "$W/log.copy"
run full_log bash -c "{ trap '' XFSZ; ulimit -f 1; exec ${R[*]@Q} -x 40; } 2>&1 > /dev/null | cat >&2; exit \${PIPESTATUS[0]}"
if [ "$rc" -eq 1 ] && [ "$(wc -l < "$W/full_log.err")" -eq 1 ] && grep -q "^error: writing the log failed" "$W/full_log.err"; then
    ok "full disk on main.log: $(cat "$W/full_log.err")"
else
    echo "       exit status $rc"; bad "full disk on main.log: exit 1 and one error line" "$W/full_log.err"
fi
check "full disk on main.log: the earlier lines are intact" cmp -s "$W/log.copy" <(head -c "$(stat -c %s "$W/log.copy")" "$W/full/main.log")
check "full disk on main.log: it ends with a whole line" test "$(tail -c 1 "$W/full/main.log" | od -A n -c | tr -d ' ')" = '\n'


echo "== d. non-finite guard"
expect_error "nan: bad TRAIN_GPT2_NAN_STEPS" "TRAIN_GPT2_NAN_STEPS" env TRAIN_GPT2_NAN_STEPS=x "$HOOKS" -e "$MODEL" "${T[@]}"
expect_success "nan: the trainer itself has no hooks" env TRAIN_GPT2_NAN_STEPS=2 "$TRAIN" -e "$MODEL" "${T[@]}" -x 4
check "nan: ... its step 2 is not skipped" grep -q "^step 2/4 | loss" "$W/nan:_the_trainer_itself_has_no_hooks.out"
expect_success "nan: one non-finite step" env TRAIN_GPT2_NAN_STEPS=2 "$HOOKS" -e "$MODEL" "${T[@]}" -x 4 -o "$W/nan1"
check "nan: the step is reported as skipped" grep -q "step 2/4 .*non-finite: update skipped (1 in a row)" "$W/nan:_one_non-finite_step.out"
check "nan: training went on to step 4" grep -q "^step 4/4 | loss" "$W/nan:_one_non-finite_step.out"
check "nan: the log marks it" grep -q "^step=2 .*skipped=1" "$W/nan1/main.log"
updates=$(od -A n -t d4 -j 12 -N 4 "$W/nan1/state_00000004.bin" | tr -d ' ')
check "nan: 3 AdamW updates in 4 steps (state header)" test "$updates" = 3
run nan_stop env TRAIN_GPT2_NAN_STEPS=3-20 "$HOOKS" -e "$MODEL" "${T[@]}" -x 10 -n 2 -o "$W/nan5"
if [ "$rc" -eq 1 ] && [ "$(wc -l < "$W/nan_stop.err")" -eq 1 ] &&
   grep -q "^error: 5 non-finite steps in a row, stopping at step 7; last good checkpoint: $W/nan5/model_00000006.bin$" "$W/nan_stop.err"; then
    ok "nan: 5 in a row stop the run: $(cat "$W/nan_stop.err")"
else
    bad "nan: 5 in a row stop the run naming the last good checkpoint" "$W/nan_stop.err"
fi
check "nan: the skipped steps did not touch the weights (model 6 == model 2)" cmp -s "$W/nan5/model_00000002.bin" "$W/nan5/model_00000006.bin"
expect_success "nan: the named checkpoint resumes" "$TRAIN" -e "$MODEL" "${T[@]}" -x 8 -o "$W/nan5" -y 1
check "nan: ... and trains on" grep -q "^step 8/8 | loss" "$W/nan:_the_named_checkpoint_resumes.out"

echo "== e. keep the last N checkpoints"
expect_success "-nk 2" "$TRAIN" -e "$MODEL" "${T[@]}" -x 5 -n 1 -nk 2 -o "$W/keep"
check "-nk 2: exactly pairs 4 and 5 (and main.log)" test "$(cd "$W/keep" && echo *)" = "main.log model_00000004.bin model_00000005.bin state_00000004.bin state_00000005.bin"
expect_success "-nk 2 on resume" "$TRAIN" -e "$MODEL" "${T[@]}" -x 7 -n 1 -nk 2 -o "$W/keep" -y 1
check "-nk 2 on resume: exactly pairs 6 and 7" test "$(cd "$W/keep" && echo *)" = "main.log model_00000006.bin model_00000007.bin state_00000006.bin state_00000007.bin"
expect_success "-nk 0 keeps all" "$TRAIN" -e "$MODEL" "${T[@]}" -x 3 -n 1 -o "$W/keepall"
check "-nk 0: pairs 1, 2, 3" test "$(cd "$W/keepall" && ls model_* | wc -l)" -eq 3

# more pairs than list_checkpoints holds (4096): the newest must still be found. A real pair renamed
# to step 5000 (its state header says so), and 4100 pairs of empty files before it; readdir lists
# them in any order, and list_checkpoints used to keep the first 4096 it saw
cp -r "$W/good_run" "$W/many"
mv "$W/many/model_00000002.bin" "$W/many/model_00005000.bin"
mv "$W/many/state_00000002.bin" "$W/many/state_00005000.bin"
put_int "$W/many/state_00005000.bin" 2 5000
(cd "$W/many" && seq -f '%08g' 1 4100 | sed 's/.*/model_&.bin state_&.bin/' | xargs touch)
expect_success "4100 older pairs: resume" "$TRAIN" -e "$MODEL" "${T[@]}" -x 5001 -o "$W/many" -y 1
check "4100 older pairs: ... from the newest, 5000" grep -q "resumed from $W/many/model_00005000.bin at step 5000" "$W/4100_older_pairs:_resume.out"

echo "== f. one run per output folder; surprises said out loud"
# a run holds its -o folder: a second run there, fresh or -y 1, is refused naming the holder's pid;
# the lock dies with the process, so after a SIGKILL the resume works
"$TRAIN" "${T[@]}" -e "$MODEL" -x 100000 -n 5 -nk 2 -o "$W/locked" > /dev/null 2>&1 &
holder=$!
# (-nk 2 removes model_00000005.bin soon after step 15: wait for any checkpoint)
for _ in $(seq 6000); do compgen -G "$W/locked/model_*.bin" > /dev/null && break; sleep 0.01; done
expect_error "lock: a second run on a folder in use" "output folder $W/locked is in use by another run (pid $holder)" \
    "$TRAIN" "${T[@]}" -e "$MODEL" -x 10 -o "$W/locked"
expect_error "lock: a second -y 1 on a folder in use" "output folder $W/locked is in use by another run (pid $holder)" \
    "$TRAIN" "${T[@]}" -e "$MODEL" -x 10 -o "$W/locked" -y 1
kill -9 $holder 2> /dev/null
wait $holder 2> /dev/null
# the newest whole pair (a kill during a write leaves model_N.bin.tmp, which the resume removes)
reached=$(cd "$W/locked" && ls model_*.bin | tail -n 1 | tr -dc 0-9 | sed 's/^0*//')
expect_success "lock: after a SIGKILL of the holder, -y 1 resumes" "$TRAIN" "${T[@]}" -e "$MODEL" -x $((reached + 2)) -n 5 -nk 2 -o "$W/locked" -y 1
check "lock: ... from step $reached" grep -q "resumed from $W/locked/model_$(printf %08d "$reached").bin" "$W/lock:_after_a_SIGKILL_of_the_holder,_-y_1_resumes.out"
check "lock: ... and the resume was told that its -x differs from the plan" grep -q "^note: the run was planned with -x 100000; with -x $((reached + 2)) the learning rate at step $((reached + 1)) is" \
    "$W/lock:_after_a_SIGKILL_of_the_holder,_-y_1_resumes.out"
check "lock: the holder's pid is in the lock file" test "$(cat "$W/locked/.lock")" -gt 0
# -o creates missing parent folders
expect_success "output: -o with missing parents" "$TRAIN" "${T[@]}" -e "$MODEL" -o "$W/deep/er/out"
check "output: ... created with its checkpoint" test -f "$W/deep/er/out/model_00000002.bin"
# notes on start-up (stdout, one line each)
expect_success "note: -N with a checkpoint" "$TRAIN" "${T[@]}" -e "$MODEL" -N pre
check "note: ... says -N is ignored" grep -qx "note: -N pre is ignored: the model comes from a checkpoint, which carries its own norm mode" "$W/note:_-N_with_a_checkpoint.out"
expect_success "note: -N with a fresh model" "$TRAIN" "${T[@]}" -e d1 -N pre
check "note: ... says nothing about -N" test -z "$(grep -e '-N' "$W/note:_-N_with_a_fresh_model.out")"
expect_success "note: -u larger than -x" "$TRAIN" "${T[@]}" -e "$MODEL" -l 1e-3 -u 8 -x 2
check "note: ... says the lr never reaches -l" grep -qx "note: warmup -u 8 is longer than the run -x 2: the learning rate ends at 0.00025, not at -l 0.001" "$W/note:_-u_larger_than_-x.out"
expect_success "note: -u equal to -x" "$TRAIN" "${T[@]}" -e "$MODEL" -u 2 -x 2
check "note: ... says nothing" test -z "$(grep warmup "$W/note:_-u_equal_to_-x.out")"
# flags that another flag makes useless: -w without -K wsd, -q with -K constant, -n and -nk without -o
for spec in "-w 0.5:note: -w 0.5 is ignored: it sets the decay of -K wsd, and the schedule is -K cosine" \
            "-K linear -w 0.3:note: -w 0.3 is ignored: it sets the decay of -K wsd, and the schedule is -K linear" \
            "-K constant -q 0.5:note: -q 0.5 is ignored: -K constant does not decay" \
            "-n 1:note: -n 1 is ignored: without an output folder -o no checkpoint is written" \
            "-nk 2:note: -nk 2 is ignored: without an output folder -o no checkpoint is written"; do
    name="note: ${spec%%:*}"
    expect_success "$name" "$TRAIN" "${T[@]}" -e "$MODEL" ${spec%%:*}
    check "$name: ... says it is ignored" grep -qxF "${spec#*:}" "$W/${name//[\/ ]/_}.out"
done
for spec in "-K wsd -w 0.3" "-K cosine -q 0.5" "-n 1 -nk 2 -o $W/notes_n"; do
    name="note: $spec"
    expect_success "$name" "$TRAIN" "${T[@]}" -e "$MODEL" $spec
    check "$name: ... says nothing is ignored" test -z "$(grep ignored "$W/${name//[\/ ]/_}.out")"
done
# good_run was planned with -x 2 (warmup 100): resumed to -x 4 the schedule changes
cp -r "$W/good_run" "$W/longer"
expect_success "note: resume with a larger -x" "$TRAIN" "${T[@]}" -e "$MODEL" -l 1e-3 -x 4 -u 1 -o "$W/longer" -y 1
check "note: ... names both learning rates" grep -qx "note: the run was planned with -x 2; with -x 4 the learning rate at step 3 is 7.750e-04, not 1.000e-04" "$W/note:_resume_with_a_larger_-x.out"
expect_success "note: a run of 4 steps, pairs 2 and 4" "$TRAIN" "${T[@]}" -e "$MODEL" -x 4 -n 2 -o "$W/plan"
rm "$W/plan/model_00000004.bin" "$W/plan/state_00000004.bin"
expect_success "note: resume with the planned -x" "$TRAIN" "${T[@]}" -e "$MODEL" -x 4 -n 2 -o "$W/plan" -y 1
check "note: ... says nothing of the plan" test -z "$(grep planned "$W/note:_resume_with_the_planned_-x.out")"
# -y 1 on a folder with files of a run but no complete pair: refused (it would start from zero
# and append to the old log); an empty or new folder starts fresh
mkdir -p "$W/logonly_resume"; echo "step=1 train_loss=1" > "$W/logonly_resume/main.log"
expect_error "-y 1 on a folder with only main.log" "holds files of a run (main.log, model_ or state_ files) but no complete checkpoint pair" \
    "$TRAIN" "${T[@]}" -e "$MODEL" -o "$W/logonly_resume" -y 1
mkdir -p "$W/modelonly"; cp "$W/good_run/model_00000002.bin" "$W/modelonly/"
expect_error "-y 1 on a folder with a model file but no state" "but no complete checkpoint pair" "$TRAIN" "${T[@]}" -e "$MODEL" -o "$W/modelonly" -y 1
expect_success "-y 1 on a new folder" "$TRAIN" "${T[@]}" -e "$MODEL" -o "$W/newfolder" -y 1
check "-y 1 on a new folder: ... starts fresh and says so" grep -q "^note: no checkpoint in $W/newfolder to resume from; starting fresh" "$W/-y_1_on_a_new_folder.out"
# non-finite weights or optimizer moments are refused on load, naming the tensor
cp "$MODEL" "$W/nan.bin"; put_int "$W/nan.bin" $((256 + 5)) 2143289344   # 0x7fc00000: NaN in wte[5]
expect_error "checkpoint with a NaN weight" "$W/nan.bin: parameter tensor wte holds NaN at element 5 of 8192" "$TRAIN" -e "$W/nan.bin" "${T[@]}"
cp "$MODEL" "$W/inf.bin"; put_int "$W/inf.bin" $((SIZE / 4 - 1)) -8388608   # 0xff800000: -Inf, the last lnfb
expect_error "checkpoint with an Inf weight" "$W/inf.bin: parameter tensor lnfb holds Inf at element 31 of 32" "$TRAIN" -e "$W/inf.bin" "${T[@]}"
bad_state st_nan; put_int "$S" $((256 + 3)) 2143289344
resume_of st_nan
expect_error "state with a NaN AdamW moment" "state_00000002.bin: the AdamW m of parameter 3 is NaN" "${R[@]}"
# the temporary file of an interrupted checkpoint write is removed and named; a folder of that
# name is left alone
cp -r "$W/good_run" "$W/tmpleft"; head -c 100 "$MODEL" > "$W/tmpleft/model_00000004.bin.tmp"; : > "$W/tmpleft/state_00000003.bin.tmp"
expect_success "a .tmp left by an interrupted write" "$TRAIN" "${T[@]}" -e "$MODEL" -x 3 -o "$W/tmpleft" -y 1
check "... is removed and named" grep -qx "note: removed $W/tmpleft/model_00000004.bin.tmp, left by an interrupted checkpoint write" "$W/a_.tmp_left_by_an_interrupted_write.out"
check "... both of them" test -z "$(ls "$W/tmpleft" | grep tmp)"

# samples are escaped: a tokenizer.bin of 200 one-byte tokens (bytes 0..198, <|endoftext|> = 199)
# beside the shards makes the tiny model sample control bytes and invalid UTF-8
mkdir -p "$W/bytedata"; cp "$W/data/train_000.bin" "$W/bytedata/"
head -c 1024 /dev/zero > "$W/bytedata/tokenizer.bin"
put_int "$W/bytedata/tokenizer.bin" 0 20240328; put_int "$W/bytedata/tokenizer.bin" 1 2
put_int "$W/bytedata/tokenizer.bin" 2 200; put_int "$W/bytedata/tokenizer.bin" 3 199
{ for i in $(seq 0 198); do printf "\\001\\$(printf %03o "$i")"; done; printf '\015<|endoftext|>'; } >> "$W/bytedata/tokenizer.bin"
expect_success "samples of a byte-level model" "$TRAIN" "${T[@]}" -e "$MODEL" -i "$W/bytedata/train_000.bin" -s 1 -g 64 -x 1
sed -n '/^---$/,/^---$/p' "$W/samples_of_a_byte-level_model.out" > "$W/samples.txt"
check "... are printed escaped (\\xNN)" grep -q '\\x[0-9a-f][0-9a-f]' "$W/samples.txt"
check "... with no raw control byte but newline" test -z "$(tr -d '\n\t' < "$W/samples.txt" | LC_ALL=C tr -d '\040-\176' | LC_ALL=C tr -d '\200-\377' | od -A n -c)"
check "... and valid UTF-8" iconv -f UTF-8 -t UTF-8 "$W/samples.txt" -o /dev/null

echo "== g. seeds (-S) and fresh shapes (-e dNcChH)"
F=(-i "$TRAIN_GLOB" -j "" -b 2 -t 8 -x 6 -s 0 -u 2)
expect_success "shape d2c16h2" "$TRAIN" -e d2c16h2 -N siamese -S 7 "${F[@]}" -o "$W/s7a"
check "shape d2c16h2: the model line" grep -q "^model: siamese | L 2 | C 16 | NH 2 | V 50257" "$W/shape_d2c16h2.out"
header=$(od -A n -t d4 -j 16 -N 12 "$W/s7a/model_00000006.bin" | tr -s ' ')
check "shape d2c16h2: the checkpoint header records L 2, NH 2, C 16 (got$header)" test "$header" = " 2 2 16"
expect_success "shape d1c48: heads default to max(1, C/64)" "$TRAIN" -e d1c48 -N pre "${F[@]}" -x 1
check "shape d1c48: ... = 1" grep -q "^model: pre | L 1 | C 48 | NH 1 " "$W/shape_d1c48:_heads_default_to_max(1,_C_64).out"
expect_success "seed 7 again" "$TRAIN" -e d2c16h2 -N siamese -S 7 "${F[@]}" -o "$W/s7b"
if diff <(train_lines "$W/s7a/main.log") <(train_lines "$W/s7b/main.log") > "$W/diff_s7"; then
    ok "seed: the same seed gives the same losses, norms and lr at every step"
else
    bad "seed: the same seed gave other train lines" "$W/diff_s7"
fi
check "seed: ... and the same final model, byte for byte" cmp -s "$W/s7a/model_00000006.bin" "$W/s7b/model_00000006.bin"
expect_success "seed 8" "$TRAIN" -e d2c16h2 -N siamese -S 8 "${F[@]}" -o "$W/s8"
check "seed: another seed gives other losses" test "$(train_lines "$W/s7a/main.log" | head -n 1)" != "$(train_lines "$W/s8/main.log" | head -n 1)"
check "seed: ... and another model" bash -c "! cmp -s '$W/s7a/model_00000006.bin' '$W/s8/model_00000006.bin'"
# with -l 0 the final model is the initial one: -S picks the initial weights, and without -S they
# are the ones seed 1337 gives, as before -S existed
for s in 7 8 1337 none; do
    if [ "$s" = none ]; then seed=(); else seed=(-S "$s"); fi
    expect_success "init: -l 0, seed $s" "$TRAIN" -e d2c16h2 -N pre "${seed[@]}" "${F[@]}" -x 1 -l 0 -o "$W/init_$s"
done
check "init: seeds 7 and 8 give other initial weights" bash -c "! cmp -s '$W/init_7/model_00000001.bin' '$W/init_8/model_00000001.bin'"
check "init: without -S the initial weights are seed 1337's" cmp -s "$W/init_1337/model_00000001.bin" "$W/init_none/model_00000001.bin"
# from the same checkpoint only the data order can differ: -S must change it, and a run without
# -S reads the data from its start, as it always did. One shard, so that only the token offset
# the seed picks can make the difference.
F1=("${F[@]}" -i "$W/data/train_000.bin")
expect_success "data order: seed 1 from a checkpoint" "$TRAIN" -e "$MODEL" -S 1 "${F1[@]}" -o "$W/d1s1"
expect_success "data order: seed 2 from the same checkpoint" "$TRAIN" -e "$MODEL" -S 2 "${F1[@]}" -o "$W/d1s2"
expect_success "data order: no seed" "$TRAIN" -e "$MODEL" "${F1[@]}" -o "$W/d1none"
start_of() { sed -n 's/^data order: seed [0-9]*, //p' "$W/$1.out"; }
check "data order: seeds 1 and 2 start at other positions ($(start_of data_order:_seed_1_from_a_checkpoint); $(start_of data_order:_seed_2_from_the_same_checkpoint))" \
    test "$(start_of data_order:_seed_1_from_a_checkpoint)" != "$(start_of data_order:_seed_2_from_the_same_checkpoint)"
check "data order: ... and give other losses" test "$(train_lines "$W/d1s1/main.log" | head -n 1)" != "$(train_lines "$W/d1s2/main.log" | head -n 1)"
check "data order: without -S no seeded start is printed" bash -c "! grep -q '^data order' '$W/data_order:_no_seed.out'"
expect_success "data order: the unseeded run again" "$TRAIN" -e "$MODEL" "${F1[@]}" -o "$W/d1none2"
check "data order: unseeded runs are identical" diff <(train_lines "$W/d1none/main.log") <(train_lines "$W/d1none2/main.log")
# a seeded run resumes exactly: its data position is in the state file
expect_success "seed: 3 steps" "$TRAIN" -e d2c16h2 -N siamese -S 7 "${F[@]}" -x 3 -o "$W/s7r"
expect_success "seed: resumed to 6" "$TRAIN" -e d2c16h2 -N siamese -S 7 "${F[@]}" -o "$W/s7r" -y 1
check "seed: the resumed run equals the straight one" cmp -s "$W/s7a/model_00000006.bin" "$W/s7r/model_00000006.bin"

echo "== h. learning-rate schedules (-K)"
# each schedule's lr at every step of a 12-step run against its closed form (tests/cli_lib.sh), and
# drawn by dev/plot.py from the run's log (its --values: the points it plots, without matplotlib)
K_FLAGS=(-l 1e-3 -u 3 -q 0.1 -w 0.4 -x 12)
for k in cosine linear constant wsd; do
    expect_success "-K $k: 12 steps" "$TRAIN" -e "$MODEL" "${T[@]}" -K "$k" "${K_FLAGS[@]}" -o "$W/lr_$k"
    check_lr_schedule "-K $k: the lr of every step is the closed form" "$W/lr_$k/main.log" "$k" 1e-3 3 0.1 0.4 12
done
check "-K: the schedules differ (step 10: cosine, linear, constant, wsd)" test "$(for k in cosine linear constant wsd; do
    sed -n 's/^step=10 .* lr=\([^ ]*\) .*/\1/p' "$W/lr_$k/main.log"; done | sort -u | wc -l)" -eq 4
expect_error "-K: an unknown schedule" "unknown learning-rate schedule 'cosin'" "$TRAIN" -e "$MODEL" "${T[@]}" -K cosin
expect_error "-w: above 1" "-w 1.5 is out of range" "$TRAIN" -e "$MODEL" "${T[@]}" -w 1.5
if command -v python3 > /dev/null 2>&1; then
    runs=(); for k in cosine linear constant wsd; do runs+=("$k=$W/lr_$k"); done
    run plot_values python3 dev/plot.py "${runs[@]}" --values
    check "plot.py --values: exit 0" test "$rc" -eq 0
    for k in cosine linear constant wsd; do
        check "plot.py: the lr panel of -K $k holds the log's 12 learning rates" diff \
            <(awk -F '\t' -v k="$k" '$1 == k && $2 == "lr" { printf "%d %.4e\n", $3, $4 }' "$W/plot_values.out") \
            <(sed -n 's/^step=\([0-9]*\) .* lr=\([^ ]*\) .*/\1 \2/p' "$W/lr_$k/main.log")
    done
    if python3 -c "import matplotlib" 2> /dev/null; then
        run plot_png python3 dev/plot.py "${runs[@]}" -o "$W/lr.png"
        check "plot.py: the four schedules in one PNG" test "$rc" -eq 0 -a -s "$W/lr.png"
    else
        echo "skip plot.py PNG of the schedules: matplotlib is not installed"
    fi
else
    echo "skip plot.py on the schedules: python3 not found"
fi
cli_summary test_train_cli
