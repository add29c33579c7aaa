# shellcheck shell=bash
# dev/experiments/common.sh: what the experiment scripts share (source it: it sets the variables
# below from the environment and defines functions). An experiment is a set of runs of one
# trainer binary, each a fresh model (-e SHAPE, e.g. d12c64h4) with a seed (-S SEED) that picks
# both its initial weights and the order of its training batches:
#   SIZE      cpu (default: deep, narrow models that finish on a 2-core CPU, with ./train_gpt2)
#             or gpu (the same experiment with bigger numbers, with ./train_gpt2cu)
#   TRAINER   default ./train_gpt2 for SIZE=cpu, ./train_gpt2cu for SIZE=gpu
#   JOBS      runs at the same time (default 2 on the CPU, each with OMP_NUM_THREADS=1: on two
#             cores two single-thread runs get more done than one two-thread run; 1 on the GPU)
#   RESULTS   where the run folders go (default out/experiments; `out*/` is ignored by git)
#   DATA      the byte-level tiny shakespeare folder (default data/shakespeare_char, made by
#             dev/data/prepare.py --bytes when missing, from ../shared/data/tinyshakespeare.txt
#             or TEXT=path)
# Every knob of a preset can be overridden from the environment (SHAPE=d24c128h4 STEPS=1000 ...).
# A run folder that already finished (run.info has its rc=) is skipped, so an experiment cut
# short continues where it stopped when started again; delete a run's folder to run it again.

source dev/lib.sh
SIZE=${SIZE:-cpu}
case $SIZE in
    cpu) TRAINER=${TRAINER:-./train_gpt2}; JOBS=${JOBS:-2}; export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} ;;
    gpu) TRAINER=${TRAINER:-./train_gpt2cu}; JOBS=${JOBS:-1} ;;
    *) echo "error: SIZE=$SIZE (expected cpu or gpu)" >&2; exit 2 ;;
esac
RESULTS=${RESULTS:-out/experiments}

# begin EXP: the run folder of an experiment, the trainer built, and the settings printed
begin() {
    EXP_DIR=$RESULTS/$1
    mkdir -p "$EXP_DIR"
    build_trainer "$TRAINER"
    echo "experiment $1: SIZE=$SIZE TRAINER=$TRAINER JOBS=$JOBS SHAPE=${SHAPE:-} B=$B T=$T STEPS=$STEPS" \
         "LR=${LR:-} WARMUP=$WARMUP VAL_EVERY=$VAL_EVERY VAL_BATCHES=$VAL_BATCHES SEEDS=\"$SEEDS\" -> $EXP_DIR"
}

# run_training NAME MODE SEED LR SHAPE TRAIN_GLOB VAL_GLOB [EXTRA FLAGS...]: one run into
# $EXP_DIR/NAME (run.info with the settings, the exact command and its exit status, stdout.log,
# the trainer's main.log). Checkpoints are deleted afterwards unless KEEP_CHECKPOINTS matches NAME
# (a glob; the mechanism measurement reads the final model of some runs).
run_training() {
    local name=$1 mode=$2 seed=$3 lr=$4 shape=$5 train=$6 val=$7
    shift 7
    local dir="$EXP_DIR/$name" rc
    if [[ -f $dir/run.info ]] && grep -q '^rc=' "$dir/run.info"; then
        echo "  $name: finished earlier ($(grep '^rc=' "$dir/run.info")), skipped"
        return
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    local cmd=("$TRAINER" -i "$train" -j "$val" -e "$shape" -N "$mode" -S "$seed" -b "$B" -t "$T"
               -l "$lr" -u "$WARMUP" -q "${FINAL_FRAC:-0.1}" -c "${WD:-0.1}" -x "$STEPS" -v "$VAL_EVERY"
               -m "$VAL_BATCHES" -s 0 -o "$dir" "$@")
    {
        echo "experiment=$(basename "$EXP_DIR")"
        echo "mode=$mode"; echo "seed=$seed"; echo "lr=$lr"; echo "shape=$shape"; echo "B=$B"; echo "T=$T"
        echo "steps=$STEPS"; echo "tokens=$((B * T * STEPS))"
        echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')"
        echo "command=${cmd[*]}"
    } >"$dir/run.info"
    local t0=$SECONDS
    set +e
    "${cmd[@]}" >"$dir/stdout.log" 2>&1
    rc=$?
    set -e
    echo "rc=$rc" >>"$dir/run.info"
    echo "seconds=$((SECONDS - t0))" >>"$dir/run.info"
    # shellcheck disable=SC2053
    if [[ -z ${KEEP_CHECKPOINTS:-} || $name != $KEEP_CHECKPOINTS ]]; then rm -f "$dir"/model_*.bin "$dir"/state_*.bin; fi
    rm -f "$dir"/state_*.bin
    echo "  $name: rc $rc, $((SECONDS - t0)) s, last: $(tail -n 1 "$dir/main.log" 2>/dev/null)"
    if [[ $rc != 0 ]]; then echo "    $(last_error "$dir/stdout.log")"; fi
}

# spawn CMD...: runs CMD in the background once fewer than JOBS spawned commands are running;
# `wait` then waits for all of them
spawn() {
    while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n || true; done
    "$@" &
}

# the byte-level tiny shakespeare folder, made when missing; prints the folder
shakespeare_char_dir() {
    local dir=${DATA:-data/shakespeare_char} text=${TEXT:-../shared/data/tinyshakespeare.txt}
    if [[ ! -f $dir/shakespeare_char_train.bin ]]; then
        [[ -f $text ]] || { echo "error: $text not found (TEXT=path to tinyshakespeare.txt)" >&2; exit 1; }
        python3 dev/data/prepare.py --input "$text" --bytes --name shakespeare_char --output_dir "$dir" >&2
    fi
    echo "$dir"
}

# plot PNG TITLE LABEL=RUN_DIR...: dev/plot.py over the runs, when matplotlib is there
plot() {
    local png=$1 title=$2
    shift 2
    if ! python3 -c "import matplotlib" 2>/dev/null; then
        echo "note: no plot (needs matplotlib): python dev/plot.py $* -o $png"
        return
    fi
    python3 dev/plot.py "$@" --title "$title" -o "$png"
}
