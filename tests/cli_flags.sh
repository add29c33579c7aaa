# tests/cli_flags.sh: flag errors, each one "error: ..." line on stderr and exit status 1. Sourced
# after tests/cli_lib.sh with $TRAIN (the trainer), $MODEL (a checkpoint with max T 64) and T (the
# flags of a short run on tiny shards) set: by tests/test_train_cli.sh (train_gpt2) and by
# tests/test_train_cu_cli.sh (train_gpt2cu, which must find these before it looks for a GPU).
expect_error "flag: T above the model maximum" "sequence length -t 65 exceeds the model's maximum sequence length 64" "$TRAIN" -e "$MODEL" "${T[@]}" -t 65
expect_error "flag: B*T does not divide -d" "must be a positive multiple of B*T" "$TRAIN" -e "$MODEL" "${T[@]}" -d 24
for f in "-b 0" "-b -2" "-t 0" "-t 2000000" "-x 0" "-x -1" "-x 100000000" "-d -7" "-m 0" "-nk -1" "-y 2" "-l -1" "-g -1"; do
    set -- $f
    expect_error "flag: $f" "out of range" "$TRAIN" -e "$MODEL" "${T[@]}" "$1" "$2"
done
expect_error "flag: -d 0" "must be a positive multiple" "$TRAIN" -e "$MODEL" "${T[@]}" -d 0
# 2^40 tokens = 2^36 micro-batches of 16: the int count of micro-batches wrapped to 0 (a silent run of
# zero steps) before args.h capped it
expect_error "flag: -d with too many micro-batches" "needs 68719476736 micro-batches" "$TRAIN" -e "$MODEL" "${T[@]}" -d 1099511627776
for f in "-b two" "-t 8x" "-x ''" "-l nan" "-l inf" "-q 0.5.1" "-b 99999999999999999999" "-n 0x10"; do
    set -- $f
    [ "$2" = "''" ] && set -- "$1" ""
    expect_error "flag: $f" "expects" "$TRAIN" -e "$MODEL" "${T[@]}" "$1" "$2"
done
expect_error "flag: unknown flag" "unknown flag -Z" "$TRAIN" -e "$MODEL" "${T[@]}" -Z 1
expect_error "flag: unknown long flag" "unknown flag -bb" "$TRAIN" -e "$MODEL" "${T[@]}" -bb 1
expect_error "flag: stray argument" "unexpected argument 'extra'" "$TRAIN" -e "$MODEL" "${T[@]}" extra 1
expect_error "flag: missing value" "flag -x needs a value" "$TRAIN" -e "$MODEL" "${T[@]}" -x
expect_error "flag: -i empty" "-i is empty" "$TRAIN" -e "$MODEL" "${T[@]}" -i ""
expect_error "flag: -e empty" "-e is empty" "$TRAIN" "${T[@]}" -e ""
expect_error "flag: -i with a trailing space, quoted" "no file matches '${T[1]} '" "$TRAIN" -e "$MODEL" "${T[@]}" -i "${T[1]} "
expect_error "flag: unknown norm mode" "unknown norm mode 'sandwich'" "$TRAIN" -e d1 -N sandwich "${T[@]}"
expect_error "flag: model depth d0" "out of range" "$TRAIN" -e d0 "${T[@]}"
expect_error "flag: model depth d999" "out of range" "$TRAIN" -e d999 "${T[@]}"
expect_error "flag: -y 1 without -o" "-y 1 needs an output folder" "$TRAIN" -e "$MODEL" "${T[@]}" -y 1
# the shape of a fresh model (-e dNcChH) and the seed
for spec in "d4c30h4:30 channels do not split into 4 heads" "d2c0:0 channels is out of range" \
            "d0c32:0 layers is out of range" "d2c64h0:0 heads is out of range" "d2c20000:20000 channels is out of range" \
            "d2c64h65:65 heads is out of range" "d200c64h4:200 layers is out of range" \
            "d2c99999999999:1000000000 channels is out of range"; do
    expect_error "shape: -e ${spec%%:*}" "${spec#*:}" "$TRAIN" -e "${spec%%:*}" "${T[@]}"
done
expect_error "seed: -S -1" "out of range" "$TRAIN" -e d1 "${T[@]}" -S -1
expect_error "seed: -S 0" "out of range" "$TRAIN" -e d1 "${T[@]}" -S 0
expect_error "seed: -S 1e3" "expects an integer" "$TRAIN" -e d1 "${T[@]}" -S 1e3
# the multiple-choice eval file (-H): refused before the run starts (tests/test_eval.sh has the rest)
expect_error "eval: missing -H file" "cannot open $W/no_eval.bin" "$TRAIN" -e "$MODEL" "${T[@]}" -H "$W/no_eval.bin"
head -c 1024 /dev/zero > "$W/zero_eval.bin"
expect_error "eval: -H file of zeros" "bad magic 0 (expected 20240522)" "$TRAIN" -e "$MODEL" "${T[@]}" -H "$W/zero_eval.bin"
