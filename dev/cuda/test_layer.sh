#!/usr/bin/env bash
# dev/cuda/test_layer.sh: every dev/cuda experiment, built through the CPU execution layer
# (tests/cudacpu; `make test-dev-cuda` builds tests/bin/dev_cuda/*_cpu and runs this), checked at
# small sizes: odd row counts (partial blocks and warps), channel counts whose vectors leave lanes
# idle, vocabularies and sequences that end inside a vector or a tile. Every version of every
# program must match its CPU reference under four thread schedules (tests/cudacpu/README.md,
# "Schedules"): a reversed and a shuffled order of the threads of a block, and each warp of a block
# alone between barriers, first to last and last to first (a missing barrier between warps with
# warp operations in between shows only under these); each program's `ref` check runs too.
# The trainer's folded SiameseNorm kernels must also be bit-identical to the unfolded form
# (siamese_input_forward versions 4 and 5 against 1, siamese_input_backward 3 against 1), the
# LayerNorm backwards in blocks of rows to version 1 of them in every output but the parameter
# gradients (siamese_input_backward 4 and 5 against 1, layernorm 2 and 3 against 1), and both embedding-gradient
# versions to a CPU sum in their order (encoder_backward).
# Timing is skipped there (the programs say so): it waits for a GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=tests/bin/dev_cuda
log=$(mktemp /tmp/test_dev_cuda.XXXXXX)
trap 'rm -f "$log"' EXIT
failed=0

# run PROGRAM VERSIONS ARGS...: the run must pass and check VERSIONS versions
run() {
    local prog=$1 want=$2 schedule
    shift 2
    for schedule in reverse shuffle:1 warp warp-reverse; do
        if CUDACPU_SCHEDULE=$schedule "$BIN/${prog}_cpu" "$@" > "$log" 2>&1 &&
            grep -q '^all checked versions match the CPU reference$' "$log" &&
            [ "$(grep -c '^version ' "$log")" = "$want" ]; then
            echo "test-dev-cuda: $prog $*, schedule $schedule: $want version(s) match the CPU reference"
        else
            cat "$log"
            echo "test-dev-cuda: $prog $*, schedule $schedule: FAILED"
            failed=1
        fi
    done
}

ref() {
    if "$BIN/${1}_cpu" ref > "$log" 2>&1; then
        echo "test-dev-cuda: $1 ref: the CPU reference passes its own check"
    else
        cat "$log"
        echo "test-dev-cuda: $1 ref: FAILED"
        failed=1
    fi
}

for p in siamese_input_forward siamese_input_backward layernorm classifier attention_forward vec_kernels encoder_backward; do ref $p; done

run siamese_input_forward 5 N=37 C=264  # 33 vectors of 8: lane 0 alone holds a second one
run siamese_input_forward 5 N=9 C=72    # 9 vectors: 23 lanes hold none
run siamese_input_forward 1 1 N=5 C=50  # versions 1, 4 and 5 take any C (scalar width)
run siamese_input_forward 1 4 N=5 C=50  # the folded kernel bit-identical to version 1 at that width too
run siamese_input_forward 1 5 N=5 C=50  # and the trainer's
run siamese_input_forward 1 5 N=9 C=1032  # rows past the 1024 columns a lane's registers hold: 129 vectors
run siamese_input_forward 1 5 N=3 C=1100  # the same at the scalar width
run siamese_input_backward 5 N=37 C=264  # 2: a second, partial block of rows; 5: 7 groups of 33, 5 blocks
run siamese_input_backward 5 N=8225 C=24  # 5: 206 blocks of 40 rows, the last of 25 (rounds of 8, 8, 8, 1)
run siamese_input_backward 1 1 N=3 C=50
run siamese_input_backward 1 3 N=3 C=50
run siamese_input_backward 1 4 N=3 C=50
run siamese_input_backward 1 5 N=45 C=50  # the scalar width: 5 groups of 50 columns, 6 blocks, the last of 5 rows
run siamese_input_backward 1 5 N=9 C=1032  # rows past the held columns
run siamese_input_backward 1 5 N=5 C=2064  # 258 vectors of 8: one group, thread 0 and 1 take two each
run siamese_input_backward 1 5 N=3 C=301  # the scalar width, one group, threads 0 to 44 take two columns
run siamese_input_backward 1 4 N=9 C=1032
run layernorm 3 N=37 C=264
run layernorm 3 N=8225 C=24             # 206 blocks of 40 rows, the last of 25 (rounds of 8, 8, 8, 1)
run layernorm 1 2 N=77 C=50             # the scalar width
run layernorm 1 3 N=77 C=50             # the scalar width: 5 groups, 10 blocks, the last of 5 rows
run layernorm 1 3 N=9 C=1032            # rows past the held columns
run layernorm 1 3 N=5 C=2064            # one group, threads taking two vectors
run layernorm 1 3 N=3 C=301             # the same at the scalar width
run classifier 5 N=5 V=301 Vp=304       # the last vector holds 5 real entries and 3 of padding
run classifier 1 4 N=2 V=120001 Vp=120064  # the trainer's classifier() beyond a tile: 3 tiles, the last partial
run classifier 1 1 N=3 V=77 Vp=77
# attention: several 64-row tiles with a partial last one, several heads; the trainer's kernels
# (forward 5, backward 4) also at head sizes they pad: 40 -> 64 and 24 -> 32 (16-byte loads),
# 9 -> 16 and 20 -> 32 (element loads), 128 (32-key forward and dQ tiles, 16-query dK/dV steps,
# A operands from shared memory), the WMMA versions (forward 4, backward 3) at the element loads
# and at 128; the WMMA backward's dQ splits: its own choice (2 at 3 key tiles: a split with two
# key tiles adds into its slice), one split, and more splits than key tiles
run attention_forward 5 B=2 T=150 NH=3  # T ends inside the third tile of 64
run attention_forward 1 5 B=2 T=150 NH=3 HS=40
run attention_forward 1 5 B=1 T=70 NH=2 HS=9
run attention_forward 1 5 B=2 T=33 NH=2 HS=20
run attention_forward 1 5 B=1 T=100 NH=2 HS=128
run attention_forward 1 4 B=1 T=70 NH=2 HS=9
run attention_forward 1 4 B=1 T=100 NH=2 HS=128
run attention_backward 4 B=2 T=150 NH=3 HS=48
run attention_backward 1 3 B=2 T=150 NH=3 HS=40 S=1
run attention_backward 1 3 B=3 T=130 NH=2 HS=24 S=5
run attention_backward 1 3 B=1 T=100 NH=2 HS=128
run attention_backward 1 4 B=2 T=150 NH=3 HS=40
run attention_backward 1 4 B=1 T=200 NH=2 HS=9
run attention_backward 1 4 B=3 T=130 NH=2 HS=24
run attention_backward 1 4 B=2 T=33 NH=2 HS=20
run attention_backward 1 4 B=1 T=100 NH=3 HS=128
run column_sums 2 N=333 C=100           # 6 chunks of 56 rows, the last of 53; a last tile of 4 columns
run column_sums 2 N=2113 C=40           # 32 chunks (the most): 67 rows each, the last 36
run column_sums 1 1 N=7 C=3
run vec_kernels 2 N=37 C=264            # 1221 vectors: a partial block of 256 threads; 33 vectors per row
run vec_kernels 2 N=3 C=8
run vec_kernels 1 1 N=5 C=50
# a token at half of 300 positions: 3 chunks of 64, 64, 22 (+ its random repeats); 300 distinct of 301
run encoder_backward 2 N=300 C=50 V=301
run encoder_backward 2 N=200 C=264 V=500  # C beyond a block of 256 columns: the finish's second block partial

if [ "$failed" != 0 ]; then echo "test-dev-cuda: FAILED"; exit 1; fi
echo "test-dev-cuda: every dev/cuda version matches its CPU reference through the CPU execution layer (no timing: that waits for a GPU)"
