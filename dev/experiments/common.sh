# shellcheck shell=bash
# dev/experiments/common.sh: what the experiment scripts share (source it: it sets the variables
# below from the environment and defines functions). Each experiment is a set of runs of one
# trainer binary:
#   TRAINER   ./train_gpt2cu (default; the real runs, on a GPU) or ./train_gpt2 (CPU plumbing check)
#   SIZE      gpu (default: d6..d12, at most minutes per run on an H100) or tiny (d2, seconds per run
#             on a CPU)
#   RESULTS   where the run folders go (default out/experiments; `out*/` is ignored by git)
#   CACHE     the seeds' initial models and data copies (default out/experiments_cache): large
#             files kept apart from RESULTS, which may be the device tool's $OUT
#   SEEDING   torch (default when python3 can import torch) or offset: see `seed_init` below
#   PLOT      the plotting script (default dev/plot.py, from the arith branch)
# Every knob of a preset can be overridden from the environment (DEPTH=d12 STEPS=1000 ...).
# A run folder that already finished (run.info has its rc=, whatever it was) is skipped, so an
# experiment cut short (a 10-minute device call) continues where it stopped when started again;
# delete a run's folder to run it again.

source dev/lib.sh
TRAINER=${TRAINER:-./train_gpt2cu}
SIZE=${SIZE:-gpu}
RESULTS=${RESULTS:-out/experiments}
CACHE=${CACHE:-out/experiments_cache}
if [[ -z ${SEEDING:-} ]]; then
    if python3 -c "import torch" 2>/dev/null; then SEEDING=torch; else SEEDING=offset; fi
fi

# preset EXP: the defaults of one experiment (quality | stability | arithmetic) at SIZE
preset() {
    local exp=$1
    case "$SIZE:$exp" in
        tiny:*)
            # the arithmetic prompts and answers need a longer window than 32 tokens
            if [[ $exp == arithmetic ]]; then : "${B:=4}" "${T:=64}"; fi
            : "${DEPTH:=d2}" "${B:=2}" "${T:=32}" "${STEPS:=12}" "${VAL_EVERY:=6}" "${VAL_BATCHES:=2}"
            : "${WARMUP:=2}" "${SEEDS:=1 2}" ;;
        gpu:quality)
            # tiny shakespeare is 305k training tokens: 300 steps of 8k tokens are ~8 epochs, so
            # the minimum validation loss is the number to compare (the later ones overfit)
            : "${DEPTH:=d8}" "${B:=16}" "${T:=512}" "${STEPS:=300}" "${VAL_EVERY:=20}" "${VAL_BATCHES:=4}"
            : "${WARMUP:=30}" "${SEEDS:=1 2 3}" ;;
        gpu:stability)
            : "${DEPTH:=d12}" "${B:=16}" "${T:=512}" "${STEPS:=300}" "${VAL_EVERY:=20}" "${VAL_BATCHES:=4}"
            : "${WARMUP:=30}" "${SEEDS:=1}" ;;
        gpu:arithmetic)
            : "${DEPTH:=d6}" "${B:=64}" "${T:=256}" "${STEPS:=2000}" "${VAL_EVERY:=100}" "${VAL_BATCHES:=4}"
            : "${WARMUP:=100}" "${SEEDS:=1 2 3}" ;;
        *) echo "error: unknown SIZE=$SIZE or experiment $exp (SIZE is tiny or gpu)" >&2; exit 2 ;;
    esac
    : "${LR:=1e-3}" "${FINAL_FRAC:=0.1}" "${WD:=0.1}"
    EXP_DIR=$RESULTS/$exp
    CACHE_DIR=$CACHE/$exp
    mkdir -p "$EXP_DIR" "$CACHE_DIR"
    build_trainer "$TRAINER"
    echo "experiment $exp: SIZE=$SIZE TRAINER=$TRAINER DEPTH=$DEPTH B=$B T=$T STEPS=$STEPS VAL_EVERY=$VAL_EVERY" \
         "WARMUP=$WARMUP FINAL_FRAC=$FINAL_FRAC WD=$WD SEEDS=\"$SEEDS\" SEEDING=$SEEDING -> $EXP_DIR"
}

# seed_data SRC_DIR SEED: prints a copy of the data folder whose training shards are rotated by a
# seed-dependent offset (seed 0: the original order), made once per experiment and seed
seed_data() {
    local src=$1 seed=$2 dst
    dst="$CACHE_DIR/data/$(basename "$src")_s$seed"
    if [[ ! -f $dst/.complete ]]; then
        rm -rf "$dst"
        python3 dev/experiments/seeded.py data --seed "$seed" "$src" "$dst" >&2
        touch "$dst/.complete"
    fi
    echo "$dst"
}

# seed_init MODE SEED DATA_DIR: prints the -e of a run. The trainers have no seed flag yet (the
# seed in common/args.h is fixed at 1337), so with SEEDING=torch each seed starts from a fresh
# model written by the PyTorch reference with that seed (same recipe, other random numbers);
# with SEEDING=offset every seed starts from the trainer's own fresh DEPTH and seeds differ only
# in the data order.
seed_init() {
    local mode=$1 seed=$2 data=$3
    if [[ $SEEDING == offset ]]; then echo "$DEPTH"; return; fi
    local ckpt="$CACHE_DIR/init/${DEPTH}_${mode}_s$seed.bin"
    if [[ ! -f $ckpt ]]; then
        mkdir -p "$CACHE_DIR/init"
        python3 dev/experiments/seeded.py init --depth "$DEPTH" --mode "$mode" --seed "$seed" \
            --vocab_from "$data" -o "$ckpt" >&2
    fi
    echo "$ckpt"
}

# run_training NAME MODE SEED LR DATA_DIR TRAIN_FILE VAL_FILE: one run into $EXP_DIR/NAME
# (run.info, stdout.log, the trainer's main.log); checkpoints are deleted afterwards unless
# KEEP_CHECKPOINTS=1 (a d12 model with its AdamW state is ~2 GB)
run_training() {
    local name=$1 mode=$2 seed=$3 lr=$4 src=$5 train=$6 val=$7
    local dir="$EXP_DIR/$name" data init rc
    if [[ -f $dir/run.info ]] && grep -q '^rc=' "$dir/run.info"; then
        echo "  $name: finished earlier ($(grep '^rc=' "$dir/run.info")), skipped"
        return
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    data=$(seed_data "$src" "$seed")
    init=$(seed_init "$mode" "$seed" "$data")
    local cmd=("$TRAINER" -i "$data/$train" -j "$data/$val" -e "$init" -N "$mode" -b "$B" -t "$T"
               -l "$lr" -u "$WARMUP" -q "$FINAL_FRAC" -c "$WD" -x "$STEPS" -v "$VAL_EVERY" -m "$VAL_BATCHES"
               -s 0 -o "$dir")
    {
        echo "experiment=$(basename "$EXP_DIR")"
        echo "mode=$mode"; echo "seed=$seed"; echo "lr=$lr"; echo "depth=$DEPTH"; echo "B=$B"; echo "T=$T"
        echo "steps=$STEPS"; echo "tokens=$((B * T * STEPS))"; echo "seeding=$SEEDING"
        echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')"
        echo "command=${cmd[*]}"
    } >"$dir/run.info"
    local t0=$SECONDS
    set +e
    "${cmd[@]}" >"$dir/stdout.log" 2>&1
    rc=$?
    set -e
    echo "rc=$rc" >>"$dir/run.info"
    [[ ${KEEP_CHECKPOINTS:-0} == 1 ]] || rm -f "$dir"/model_*.bin "$dir"/state_*.bin
    echo "  $name: rc $rc, $((SECONDS - t0)) s, last val: $(grep -o 'val_loss=[^ ]*' "$dir/main.log" 2>/dev/null | tail -n 1)"
    if [[ $rc != 0 ]]; then echo "    $(last_error "$dir/stdout.log")"; fi
}

# run_grid TAG LR DATA_DIR TRAIN_FILE VAL_FILE: run_training "<mode>TAG_s<seed>" for every seed in
# SEEDS and mode in MODES
run_grid() {
    local tag=$1 lr=$2 src=$3 train=$4 val=$5 seed mode
    for seed in $SEEDS; do
        for mode in $MODES; do
            run_training "${mode}${tag}_s$seed" "$mode" "$seed" "$lr" "$src" "$train" "$val"
        done
    done
}

# finish_first_seed: finish with one plot of the runs of the first seed
finish_first_seed() {
    local first=${SEEDS%% *}
    finish "seed$first=*_s$first"
}

# finish [NAME=PATTERN...]: the summary table, and a plot NAME.png per pattern (of the run folders
# whose name matches the glob) when dev/plot.py and matplotlib are there
finish() {
    python3 dev/experiments/summarize.py "$EXP_DIR" -o "$EXP_DIR/summary.md"
    local plot=${PLOT:-dev/plot.py}
    if [[ ! -f $plot ]] || ! python3 -c "import matplotlib" 2>/dev/null; then
        echo "note: no plot (needs $plot from the arith branch and matplotlib):" \
             "python $plot label=run_dir ... -o plot.png"
        return
    fi
    local group pattern runs d
    for group in "${@:-all=*}"; do
        pattern=${group#*=}
        runs=()
        for d in "$EXP_DIR"/$pattern/; do [[ -f $d/main.log ]] && runs+=("$(basename "$d")=$d"); done
        [[ ${#runs[@]} -gt 0 ]] || continue
        local png="$EXP_DIR/${group%%=*}.png"
        python3 "$plot" "${runs[@]}" -o "$png" && echo "plot: $png"
    done
}

# the tiny shakespeare folder, or how to make it
shakespeare_dir() {
    local dir=${DATA:-data/tinyshakespeare}
    if [[ ! -f $dir/tiny_shakespeare_train.bin ]]; then
        echo "error: $dir/tiny_shakespeare_train.bin not found; prepare it with" >&2
        echo "  python dev/data/tinyshakespeare.py --input ../shared/data/tinyshakespeare.txt --tiktoken ../shared/data/gpt2.tiktoken" >&2
        exit 1
    fi
    echo "$dir"
}
