#!/usr/bin/env bash
# dev/fuzz/run.sh [seconds per target] [target ...]
#
# Builds the libFuzzer harnesses (clang, -fsanitize=fuzzer,address,undefined, -DFUZZING) and runs
# each target for a bounded time, one after the other, on one core each (-jobs is not used).
# Targets: checkpoint state dataloader tokenizer eval (all five by default). Seeds are generated from
# valid small files by make_seeds.c; the growing corpora and any crash files live under
# $FUZZ_WORK (default /tmp/siamese_fuzz), outside the repository. A crash input is written there as
# crash-*; once fixed, copy it to tests/fuzz_regressions/<target>/ so that `make test` replays it.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER_TARGET=${1:-120}
shift || true
TARGETS=${*:-checkpoint state dataloader tokenizer eval}
WORK=${FUZZ_WORK:-/tmp/siamese_fuzz}
CLANG=${CLANG:-$(command -v clang-14 || command -v clang || true)}
if [ -z "$CLANG" ]; then echo "error: clang (with libFuzzer) not found; set CLANG=..." >&2; exit 1; fi
mkdir -p "$WORK/bin"

FLAGS="-g -O1 -DFUZZING -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Wno-unknown-pragmas -Wno-unused-function -lm"
gcc -O1 -I. -Wall -Wno-unused-function -o "$WORK/bin/make_seeds" dev/fuzz/make_seeds.c -lm
rm -rf "$WORK/seeds"
"$WORK/bin/make_seeds" "$WORK/seeds"

declare -A MAXLEN=([checkpoint]=8192 [state]=4096 [dataloader]=4096 [tokenizer]=4096 [eval]=4096)
for t in $TARGETS; do
    [ -n "${MAXLEN[$t]:-}" ] || { echo "error: unknown target $t" >&2; exit 1; }
    echo "== building fuzz_$t"
    # shellcheck disable=SC2086
    "$CLANG" $FLAGS -o "$WORK/bin/fuzz_$t" "dev/fuzz/fuzz_$t.c"
done
for t in $TARGETS; do
    mkdir -p "$WORK/corpus/$t" "$WORK/crashes/$t"
    echo "== fuzz_$t for ${SECONDS_PER_TARGET}s"
    # leaks are checked: a harness frees what a rejected input had allocated, and fuzz.h closes its files
    "$WORK/bin/fuzz_$t" "$WORK/corpus/$t" "$WORK/seeds/$t" -max_total_time="$SECONDS_PER_TARGET" \
        -max_len="${MAXLEN[$t]}" -detect_leaks=1 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$WORK/crashes/$t/" 2>&1 | tee "$WORK/fuzz_$t.log" | grep -E "^#[0-9]+ +(INITED|DONE)|stat::|ERROR|SUMMARY|Done" || true
    if ls "$WORK/crashes/$t"/* > /dev/null 2>&1; then echo "fuzz_$t: FOUND crashes in $WORK/crashes/$t"; fi
done
