#!/usr/bin/env bash
# tests/test_mechanism.sh: checks dev/experiments/mechanism (the residual-stream measurements of
# the experiments) on the stored test models (L 3, C 32, V 200) and a made-up shard:
#   - it measures the model and batches it says: its val loss is the trainer's validation loss at
#     step 0 on the same shard, batch shape and number of batches (both print 6 decimals);
#   - the siamese merge ablations go through the same head as the model: the loss recomputed from
#     its own LN(x; lnfx) + LN(y; lnfy) equals the model's loss to 5e-6 (both printed with 6 decimals);
#   - one line per sublayer (2L), whose ratio is z_norm / stream_norm.
set -u
cd "$(dirname "$0")/.."
MECH=${MECH:-dev/experiments/mechanism}
export OMP_NUM_THREADS=1
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
failed=0
ok() { echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
tests/bin/mkshard "$W/val.bin" 2000 200 9
for mode in pre post siamese; do
    model=data/test/$mode/model.bin
    if ! "$MECH" "$model" "$W/val.bin" -b 2 -t 16 -m 3 > "$W/$mode.txt" 2> "$W/$mode.err"; then
        bad "$mode: mechanism failed: $(head -n 1 "$W/$mode.err")"; continue
    fi
    ours=$(sed -n 's/^model=.* val_loss=\([^ ]*\)$/\1/p' "$W/$mode.txt")
    ./train_gpt2 -e "$model" -i "$W/val.bin" -j "$W/val.bin" -b 2 -t 16 -m 3 -v 1 -x 1 -s 0 -o "$W/run_$mode" > /dev/null
    trainer=$(sed -n 's/^step=0 val_loss=\([^ ]*\).*/\1/p' "$W/run_$mode/main.log")
    if [ -n "$ours" ] && [ "$ours" = "$trainer" ]; then ok "$mode: val loss $ours = the trainer's"; else bad "$mode: val loss '$ours', the trainer's '$trainer'"; fi
    n=$(grep -c '^sublayer=' "$W/$mode.txt")
    if [ "$n" -eq 6 ]; then ok "$mode: 6 sublayer lines"; else bad "$mode: $n sublayer lines, expected 6"; fi
    if awk '/^sublayer=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                           r = v["z_norm"] / v["stream_norm"]; if (r - v["ratio"] > 1e-5 * r || v["ratio"] - r > 1e-5 * r) bad = 1 }
            END { exit bad }' "$W/$mode.txt"; then ok "$mode: ratio = z_norm / stream_norm"; else bad "$mode: ratio is not z_norm / stream_norm"; fi
done
if awk '/^merge/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                   d = v["loss"] - v["loss_recomputed"]; if (d < 0) d = -d; found = 1; exit (d > 5e-6) }
        END { if (!found) exit 1 }' "$W/siamese.txt"; then
    ok "siamese: the head on LN(x; lnfx) + LN(y; lnfy) gives the model's loss: $(grep -o 'loss=[^ ]* loss_recomputed=[^ ]*' "$W/siamese.txt")"
else
    bad "siamese: the recomputed merge loss differs: $(grep '^merge' "$W/siamese.txt")"
fi
echo "test_mechanism: $failed failed"
[ "$failed" -eq 0 ]
