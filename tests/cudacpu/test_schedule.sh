#!/usr/bin/env bash
# tests/cudacpu/test_schedule.sh: what the CPU execution layer's thread schedules do
# (tests/cudacpu/test_schedule.cu; README.md "Schedules"):
# - under `warp` and `warp-reverse`, each warp of a block runs alone from one block barrier to the
#   next (its lanes still meeting at every warp operation), the warps in increasing or decreasing
#   order, the blocks likewise; under the other schedules the warps of a block run interleaved;
# - a write-after-read race between warps (a missing barrier before a shared tile is reloaded,
#   warp shuffles after the reads) gives a wrong result under `warp` and `warp-reverse`, a
#   read-after-write race (a missing barrier between warp 0's store and warp 1's read) under
#   `warp-reverse`; with the barrier, every schedule gives the right result. The lines for the
#   other schedules show what they miss (the write-after-read race passes under all of them).
# Needs tests/bin/test_schedule_cpu (make test-cudacpu builds it).
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=tests/bin/test_schedule_cpu
failed=0

# order SCHEDULE ALONE BLOCKS: the `order` case prints ALONE for each of the 2 x 3 stretches
# between barriers, and the blocks in the order BLOCKS
order() {
    local schedule=$1 alone=$2 blocks=$3 out want
    out=$(CUDACPU_SCHEDULE=$schedule "$bin" order 2>&1)
    want=$(for b in 0 1; do for s in 1 2 3; do echo "block $b, stretch $s: each warp alone: $alone"; done; done
        echo "the lanes of each warp meet at each warp operation: yes"
        echo "blocks in order: $blocks")
    if [ "$out" = "$want" ]; then
        echo "test-schedule: $schedule: each warp alone between barriers: $alone; blocks in order $blocks"
    else
        echo "test-schedule: $schedule: order: FAILED; expected:"
        printf '%s\n' "$want"
        echo "got:"
        printf '%s\n' "$out"
        failed=1
    fi
}
order forward no "0 1"
order reverse no "1 0"
order warp "yes, warps in order 0 1 2" "0 1"
order warp-reverse "yes, warps in order 2 1 0" "1 0"

# race SCHEDULE CASE right|WRONG|any: the case's result under SCHEDULE must be as given (any: printed)
race() {
    local schedule=$1 case=$2 want=$3 out
    out=$(CUDACPU_SCHEDULE=$schedule "$bin" "$case" 2>&1)
    if printf '%s\n' "$out" | grep -q ": $want\$" || { [ "$want" = any ] && printf '%s\n' "$out" | grep -q -E ': (right|WRONG)$'; }; then
        echo "test-schedule: $schedule: $out"
    else
        echo "test-schedule: $schedule: $case: expected \"$want\", got:"
        printf '%s\n' "$out"
        failed=1
    fi
}
for s in forward reverse shuffle:1; do race $s war any; done
race warp war WRONG
race warp-reverse war WRONG
race warp-reverse raw WRONG
for s in forward reverse shuffle:1 warp warp-reverse; do
    race $s war_barrier right
    race $s raw_barrier right
done

if [ $failed != 0 ]; then echo "test-schedule: FAILED"; fi
exit $failed
