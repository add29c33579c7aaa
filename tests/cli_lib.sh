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

# check_lr_schedule NAME LOG K LR U Q W X: every step 1..X of main.log LOG has its lr= (5 digits)
# within 1e-4 relative of the closed form of schedule -K K with -l LR -u U -q Q -w W -x X, computed
# here in double (the formulas: learning_rate_at in common/train_loop.h)
check_lr_schedule() {
    local name=$1 log=$2
    shift 2
    awk -v k="$1" -v lr="$2" -v u="$3" -v f="$4" -v w="$5" -v n="$6" '
        function expect(s,   d, p, left) {  # the lr of 0-based step s
            if (s < u) return lr * (s + 1) / u
            d = k == "wsd" ? n - int(w * n + 0.5) : u
            if (d < u) d = u
            if (k == "constant" || s < d) return lr
            p = (s - d) / (n - d)
            if (k == "cosine") left = (1 + cos(3.141592653589793 * p)) / 2
            else if (k == "linear") left = 1 - p
            else left = 1 - sqrt(p)
            return lr * (f + (1 - f) * left)
        }
        / train_loss=/ {
            step = lr_got = ""
            for (i = 1; i <= NF; i++) {
                if ($i ~ /^step=/) step = substr($i, 6) + 0
                if ($i ~ /^lr=/) lr_got = substr($i, 4) + 0
            }
            e = expect(step - 1)
            r = (lr_got - e) / e
            if (r < 0) r = -r
            if (r > 1e-4) { printf "step %d: lr %s, expected %.6e\n", step, lr_got, e; wrong++ }
            seen[step] = 1
        }
        END { for (s = 1; s <= n; s++) if (!(s in seen)) { printf "step %d: no train line\n", s; wrong++ }
              exit wrong > 0 }' "$log" > "$W/lr_check.txt"
    if [ $? -eq 0 ]; then ok "$name"; else bad "$name" "$W/lr_check.txt"; fi
}


# prints "NAME: N passed, N failed"; exit status 1 when anything failed
cli_summary() {
    echo "$1: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
