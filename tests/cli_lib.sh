# tests/cli_lib.sh: what the end-to-end trainer tests share (sourced by tests/test_train_cli.sh,
# tests/test_train_cu_cli.sh and tests/test_dist.sh, from the repository root): a work folder $W,
# removed at exit unless KEEP=1, the pass/fail counters and the helpers below. The sourcing script
# ends with cli_summary.
KEEP=${KEEP:-0}  # KEEP=1 keeps the work folder
# in /dev/shm where there is one: the checkpoints' fsync calls cost nothing there
TMP_ROOT=/tmp
[ -d /dev/shm ] && [ -w /dev/shm ] && TMP_ROOT=/dev/shm
W=$(mktemp -d "$TMP_ROOT/${CLI_TEST_NAME:-test_train_cli}_XXXXXX")
trap '[ "$KEEP" = 1 ] && echo "kept $W" || rm -rf "$W"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/       | /' "$2" | head -20; return 0; }

# run NAME CMD...: runs CMD with stdout/stderr in $W/NAME.out/.err, sets $rc
run() {
    local name=${1//[\/ ]/_}
    shift
    "$@" > "$W/$name.out" 2> "$W/$name.err"
    rc=$?
}

# expect_error NAME NEEDLE CMD...: exit status 1 and exactly one stderr line "error: ..." containing NEEDLE
expect_error() {
    local title=$1 name=${1//[\/ ]/_} needle=$2
    shift 2
    run "$name" "$@"
    local lines first
    lines=$(wc -l < "$W/$name.err")
    first=$(head -n 1 "$W/$name.err")
    if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && [[ "$first" == "error: "* ]] && [[ "$first" == *"$needle"* ]]; then
        ok "$title: $first"
    else
        echo "       exit status $rc, $lines stderr lines, expected one 'error: ...$needle...'"
        bad "$title" "$W/$name.err"
    fi
}

expect_success() {
    local title=$1 name=${1//[\/ ]/_}
    shift
    run "$name" "$@"
    if [ "$rc" -eq 0 ] && [ ! -s "$W/$name.err" ]; then ok "$title"; else echo "       exit status $rc"; bad "$title" "$W/$name.err"; fi
}

# put_int FILE INDEX VALUE: overwrite the int32 number INDEX of FILE (little-endian)
put_int() {
    local v=$3
    printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $((v & 255)) $(((v >> 8) & 255)) $(((v >> 16) & 255)) $(((v >> 24) & 255)))" |
        dd of="$1" bs=4 seek="$2" conv=notrunc status=none
}

# check NAME COMMAND...: a plain condition
check() {
    local name=$1
    shift
    if "$@"; then ok "$name"; else bad "$name"; fi
}

# the train lines of a main.log without the timings, and its val lines
train_lines() { grep train_loss "$1" | sed 's/ ms=.*//'; }


# prints "NAME: N passed, N failed"; exit status 1 when anything failed
cli_summary() {
    echo "$1: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
