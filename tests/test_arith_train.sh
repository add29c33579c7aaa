#!/usr/bin/env bash
# tests/test_arith_train.sh: train_gpt2 on a small arithmetic dataset (dev/data/arithmetic) for two
# steps: a fresh model takes the vocabulary of the data's tokenizer.bin (257, padded 384), every
# validation reports the held-out accuracy on the step line and in main.log, the last one also a
# line of held-out problems with the model's answers and the first problem as the data writes it,
# and a -t that is not a multiple of the padded problems' length gets a note. Last, the estimate of
# the run's length (common/train_loop.h): said once, after the sixth step (5 timed after the first),
# with the steps and evaluations left, and a total that is what they add up to.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d /tmp/test_arith_train_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_arith_train: FAIL: $*"; exit 1; }

./dev/data/arithmetic "$tmp/data" -n 300 -m 60 > /dev/null
./train_gpt2 -i "$tmp/data/arithmetic_train.bin" -j "$tmp/data/arithmetic_val.bin" -e d1 -b 4 -t 16 -x 2 -v 1 \
    -m 1 -k 9 -s 0 -o "$tmp/out" > "$tmp/stdout" 2>&1 || { cat "$tmp/stdout"; fail "train_gpt2 failed"; }
grep -q "V 257 (padded 384)" "$tmp/stdout" || fail "the fresh model's vocabulary is not the tokenizer's 257"
grep -Eq "^val loss [0-9.]+ \| arith acc [0-9.]+ \([0-9]+/9\) \| [0-9]+\+[0-9]+=" "$tmp/stdout" \
    || fail "no accuracy next to the validation loss on the step line"
for step in 0 1 2; do
    grep -Eq "^step=$step val_loss=[0-9.]+ arith_acc=[01]\.[0-9]{4}$" "$tmp/out/main.log" \
        || fail "main.log has no 'step=$step val_loss=... arith_acc=...' line"
done
# the last evaluation shows six held-out problems, and how the data writes the first (padded-reversed)
[ "$(grep -c "^held-out problems, greedy answers: " "$tmp/stdout")" = 1 ] \
    || fail "not exactly one line of held-out problems (at the last evaluation)"
grep -Eq "^held-out problems, greedy answers: ([0-9]+\+[0-9]+=[^ ]* (ok|wrong)( \| |)){6} \(in the data: [0-9]{2}\+[0-9]{2}=[0-9]{3}, format padded-reversed\)$" \
    "$tmp/stdout" || fail "the held-out problems line is not six problems and the first as the data writes it"
grep -q "note: -t 16 is not a multiple of the problem length 10" "$tmp/stdout" \
    || fail "no note that -t 16 is not a multiple of the problem length"
./train_gpt2 -i "$tmp/data/arithmetic_train.bin" -j "$tmp/data/arithmetic_val.bin" -e d1 -b 4 -t 20 -x 1 -v 1 \
    -m 1 -k 2 -s 0 > "$tmp/stdout3" 2>&1 || { cat "$tmp/stdout3"; fail "train_gpt2 -t 20 failed"; }
if grep -q "problem length" "$tmp/stdout3"; then fail "a note about the problem length for -t 20"; fi

# GPT-2-id shards without the marker: no accuracy, and -i without -j means no validation
mkdir "$tmp/plain"
cp "$tmp/data/arithmetic_train.bin" "$tmp/plain/"
./train_gpt2 -i "$tmp/plain/arithmetic_train.bin" -e d1 -b 4 -t 16 -x 1 -v 1 -s 0 > "$tmp/stdout2" 2>&1 \
    || { cat "$tmp/stdout2"; fail "train_gpt2 without a marker failed"; }
grep -q "V 50257 (padded 50304)" "$tmp/stdout2" || fail "without a tokenizer.bin the vocabulary is not GPT-2's"
grep -q "no validation" "$tmp/stdout2" || fail "-i without -j does not say that it skips validation"
if grep -q "arith acc" "$tmp/stdout2"; then fail "accuracy reported for data without the marker"; fi
# the estimate: -x 12 -v 5 evaluates at 0, 5, 10 and 12; after step 6, 6 steps and 2 evaluations are left
./train_gpt2 -i "$tmp/data/arithmetic_train.bin" -j "$tmp/data/arithmetic_val.bin" -e d1 -b 4 -t 20 -x 12 -v 5 \
    -m 1 -k 4 -s 0 > "$tmp/stdout4" 2>&1 || { cat "$tmp/stdout4"; fail "train_gpt2 -x 12 failed"; }
[ "$(grep -c "^run will take about" "$tmp/stdout4")" = 1 ] || fail "the estimate is not said exactly once"
grep -A1 "^step 6/12 " "$tmp/stdout4" | grep -q "^run will take about" || fail "the estimate does not follow step 6"
line=$(grep "^run will take about" "$tmp/stdout4")
echo "$line" | grep -Eq "^run will take about [0-9]+ s more: 6 steps at [0-9]+ ms, 2 evaluations at [0-9.]+ s; " \
    || fail "the estimate does not count 6 steps and 2 evaluations left: $line"
awk -v l="$line" 'BEGIN { split(l, w, " "); total = w[5]; ms = w[10]; ev = w[14];  # about T s more: 6 steps at M ms, 2 evaluations at E s
    sum = 6 * ms / 1000 + 2 * ev; exit !(total >= sum - 0.6 - 0.012 && total <= sum + 0.6 + 0.012) }' \
    || fail "the estimate's total is not the steps and evaluations it counts: $line"
./train_gpt2 -i "$tmp/data/arithmetic_train.bin" -j "$tmp/data/arithmetic_val.bin" -e d1 -b 4 -t 20 -x 6 -v 0 \
    -s 0 > "$tmp/stdout5" 2>&1 || { cat "$tmp/stdout5"; fail "train_gpt2 -x 6 failed"; }
if grep -q "^run will take" "$tmp/stdout5"; then fail "an estimate in a run of 6 steps (none left to estimate)"; fi
echo "test_arith_train: all checks passed"
