#!/usr/bin/env bash
# tests/test_readme.sh: the commands of README.md, of the pages in doc/ and of dev/cuda/README.md run as written on a
# fresh copy of the project.
#
#   bash tests/test_readme.sh            (make test runs it; README_PYTHON=1 adds the Python ones)
#
# Takes every command of the code blocks of README.md, then of doc/*.md in name order, then of
# dev/cuda/README.md (```bash
# fences and 4-space indented blocks; lines ending in "\" joined), checks that
# tests/readme_commands.txt lists each one with how to treat it (and lists nothing else), then runs
# the runnable ones in that order in a copy of the tracked files (git ls-files: what a clone
# holds), so that a later command sees what an earlier one made, exactly as a reader following
# the README and then the pages would. Training commands run with a few steps only (mode `short`,
# see the list). Closes with "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
LIST=tests/readme_commands.txt
README_PYTHON=${README_PYTHON:-0}
SHORT_FLAGS="-x 3 -v 2 -m 2 -k 8 -s 2 -g 8"
[ "$README_PYTHON" = 1 ] && SHORT_FLAGS="-x 102 -v 50 -m 2 -k 8 -s 0"  # dev/plot.py --from_step 100 needs steps past 100
W=$(mktemp -d /tmp/test_readme_XXXXXX)
trap 'rm -rf "$W"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; [ -n "${2:-}" ] && tail -n 15 "$2" | sed 's/^/       | /'; return 0; }

# the commands, one per line: comments after " # " dropped, spaces squeezed
normalize() { sed -E 's/[[:space:]]+#[[:space:]].*$//; s/[[:space:]]+/ /g; s/^ //; s/ $//'; }
PAGES="README.md $(ls doc/*.md 2> /dev/null | sort) dev/cuda/README.md"
for page in $PAGES; do
awk '
    /^```/ { if (fence) { fence = 0 } else { fence = 1; bash = ($0 ~ /^```(bash|sh)[[:space:]]*$/) }; prev = ""; next }
    { line = "" }
    fence && bash { line = $0 }
    !fence && /^    [^ ]/ && (prev ~ /^[[:space:]]*$/ || indented) { line = substr($0, 5); indented = 1 }
    !fence && !/^    / { indented = 0 }
    { prev = $0 }
    line == "" { next }
    { if (joined != "") { line = joined " " line; joined = "" } }
    line ~ /\\$/ { sub(/\\$/, "", line); joined = line; next }
    line ~ /^[[:space:]]*#/ { next }
    { print line }
' "$page" | normalize > "$W/page"
cat "$W/page" >> "$W/readme"
sed "s|.*|$page|" "$W/page" >> "$W/where"    # the page of each command, line by line
done
grep -v '^#' "$LIST" | grep . | sed 's/^[^|]*| *//' | normalize > "$W/listed"
missing=$(paste -d'|' "$W/where" "$W/readme" | while IFS='|' read -r page cmd; do
    printf '%s\n' "$cmd" | grep -qxFf "$W/listed" || printf '%s: %s\n' "$page" "$cmd"; done)
stale=$(grep -vxFf "$W/readme" "$W/listed")
if [ -z "$missing" ]; then ok "every command of README.md, doc/*.md and dev/cuda/README.md ($(wc -l < "$W/readme")) is in $LIST"; else bad "commands not in $LIST:"; echo "$missing" | sed 's/^/       | /'; fi
if [ -z "$stale" ]; then ok "every command of $LIST is in README.md, a doc/ page or dev/cuda/README.md"; else bad "commands in $LIST but in no page:"; echo "$stale" | sed 's/^/       | /'; fi

# a fresh copy: the files git tracks (and new ones not yet committed), nothing built
if ! git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    echo "skip running the commands: not a git checkout (git ls-files tells what a clone holds)"
    echo "test_readme: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]; exit
fi
mkdir "$W/clone"
git ls-files -z -co --exclude-standard | xargs -0 cp --parents -t "$W/clone" 2> /dev/null
i=0
while IFS='|' read -r page cmd; do
    i=$((i + 1))
    mode=$(grep -v '^#' "$LIST" | while IFS= read -r l; do
        [ "$(printf '%s' "${l#*|}" | normalize)" = "$cmd" ] && { printf '%s' "${l%%|*}" | sed 's/ *$//'; break; }
    done)
    case $mode in
        run) run_cmd=$cmd ;;
        short) run_cmd=${cmd//.\/train_gpt2 /.\/train_gpt2 $SHORT_FLAGS }; run_cmd=${run_cmd%./train_gpt2}
               [[ "$cmd" == *"./train_gpt2" ]] && run_cmd="$run_cmd./train_gpt2 $SHORT_FLAGS" ;;
        python) if [ "$README_PYTHON" != 1 ]; then echo "skip $page: $cmd (Python: README_PYTHON=1 runs it)"; continue; fi
                run_cmd=$cmd ;;
        mpi) if ! command -v mpirun > /dev/null 2>&1 || ! command -v mpicc > /dev/null 2>&1; then
                 echo "skip $page: $cmd (needs Open MPI: bash dev/install_mpi.sh)"; continue
             fi
             # as root (CI), Open MPI runs only with its permission, which these variables give
             run_cmd="export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; $cmd" ;;
        skip*) echo "skip $page: $cmd (${mode#skip: })"; continue ;;
        *) continue ;;  # not listed: reported above
    esac
    # stdin from /dev/null: a command that reads it (mpirun does) must not eat the list of commands
    if (cd "$W/clone" && bash -c "set -e; $run_cmd") < /dev/null > "$W/out_$i" 2>&1; then
        ok "$page: $cmd"
    else
        bad "$page: $cmd  (ran: $run_cmd)" "$W/out_$i"
    fi
done < <(paste -d'|' "$W/where" "$W/readme")
echo "test_readme: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
