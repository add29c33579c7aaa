"""
dev/experiments/summarize.py: a markdown summary of experiment runs, read from their main.log.

    python dev/experiments/summarize.py RESULTS_DIR [-o summary.md] [--unigram_from VAL_SHARD]

Every folder below RESULTS_DIR that holds a run.info (written by dev/experiments/common.sh:
key=value lines such as mode=siamese seed=2 lr=1e-3 rc=0) is a run; its main.log is the
key=value log of common/logger.h (step=N train_loss=... / step=N val_loss=... [arith_acc=...]),
the last line written for a step winning. Two tables: one row per run, then one row per
(shape, mode, lr) with the mean and spread over seeds.

A run counts as diverged when the trainer failed (rc != 0: e.g. it stopped after non-finite steps),
when any step was non-finite (skipped=1, or a NaN/Inf loss), when its last validation loss is
above the one at step 0, or when the mean of its last 5 training losses is above the first one.
With --unigram_from, a run that did not diverge but whose final validation loss is less than
0.1 nats below the unigram entropy of that shard (the loss of predicting every token from the
token frequencies alone, context ignored) is marked "stalled at the unigram plateau": it trained
little further than a model that ignores the context would.
"""

import argparse
import math
import os
import statistics
import struct
import sys


STALL_MARGIN = 0.1  # nats: a final val loss closer than this to the unigram entropy counts as stalled


def unigram_entropy(shard):
    """Entropy (nats) of the token frequencies of a token shard (common/dataloader.h format)."""
    with open(shard, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        data = f.read(2 * header[2])
    counts = {}
    for (t,) in struct.iter_unpack("<H", data):
        counts[t] = counts.get(t, 0) + 1
    n = sum(counts.values())
    return -sum(c / n * math.log(c / n) for c in counts.values())


def read_kv_lines(path):
    """{step: {key: value}} from key=value lines; later lines for the same step win per key."""
    steps = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            try:
                step = int(fields.pop("step"))
            except (KeyError, ValueError):
                continue
            steps.setdefault(step, {}).update(fields)
    return steps


def series(steps, key):
    """[(step, float)] for the steps that logged `key`, in step order ('nan' parses to nan)."""
    out = []
    for s in sorted(steps):
        if key in steps[s]:
            try:
                out.append((s, float(steps[s][key])))
            except ValueError:
                out.append((s, float("nan")))
    return out


def read_info(run_dir):
    info = {}
    with open(os.path.join(run_dir, "run.info"), encoding="utf-8") as f:
        for line in f:
            if "=" in line:
                k, v = line.strip().split("=", 1)
                info[k] = v
    return info


def run_metrics(run_dir, unigram=None):
    info = read_info(run_dir)
    log = os.path.join(run_dir, "main.log")
    steps = read_kv_lines(log) if os.path.exists(log) else {}
    train, val, acc = series(steps, "train_loss"), series(steps, "val_loss"), series(steps, "arith_acc")
    skipped = sum(1 for s in steps.values() if s.get("skipped") == "1")
    nonfinite = skipped + sum(1 for _, v in train + val if not math.isfinite(v))
    m = dict(info)
    m["dir"] = os.path.basename(os.path.normpath(run_dir))
    m["steps_logged"] = train[-1][0] if train else 0
    m["val0"] = val[0][1] if val and val[0][0] == 0 else float("nan")
    m["final_val"] = val[-1][1] if val else float("nan")
    finite_val = [v for _, v in val if math.isfinite(v)]
    m["min_val"] = min(finite_val) if finite_val else float("nan")
    m["final_train"] = statistics.fmean([v for _, v in train[-5:]]) if train else float("nan")
    m["acc_final"] = acc[-1][1] if acc else None
    m["acc_max"] = max(v for _, v in acc) if acc else None
    reasons = []
    if info.get("rc", "?") != "0":
        reasons.append(f"rc {info.get('rc', '?')}")
    if nonfinite:
        reasons.append(f"{nonfinite} non-finite")
    if val and math.isfinite(m["val0"]) and not m["final_val"] <= m["val0"]:
        reasons.append("val above start")
    if train and not m["final_train"] <= train[0][1]:
        reasons.append("train above start")
    if not train:
        reasons.append("no steps logged")
    m["diverged"] = bool(reasons)
    m["status"] = "diverged: " + ", ".join(reasons) if reasons else "ok"
    m["stalled"] = not reasons and unigram is not None and not m["final_val"] < unigram - STALL_MARGIN
    if m["stalled"]:
        m["status"] = f"stalled (final val within {STALL_MARGIN} of the unigram {unigram:.3f})"
    return m


def fmt(v, digits=4):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if not math.isfinite(v) else f"{v:.{digits}f}"
    return str(v)


def mean_spread(values, digits=4):
    """mean ± sample standard deviation of the finite values, as text"""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return "-"
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f}"
    return f"{statistics.fmean(vals):.{digits}f} ± {statistics.stdev(vals):.{digits}f}"


def summarize(root, unigram=None):
    run_dirs = sorted(os.path.dirname(os.path.join(d, f)) for d, _, files in os.walk(root)
                      for f in files if f == "run.info")
    if not run_dirs:
        sys.exit(f"error: no run.info below {root}")
    runs = [run_metrics(d, unigram) for d in run_dirs]
    has_acc = any(r["acc_final"] is not None for r in runs)
    lines = [f"runs below `{root}` ({len(runs)})", "",
             "| run | shape | mode | lr | seed | steps | val@0 | min val | final val | final train (last 5) |"
             + (" arith_acc final | arith_acc max |" if has_acc else "") + " status |",
             "|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if has_acc else "") + "---|"]
    for r in runs:
        row = [r["dir"], r.get("shape", "?"), r.get("mode", "?"), r.get("lr", "?"), r.get("seed", "?"), str(r["steps_logged"]),
               fmt(r["val0"]), fmt(r["min_val"]), fmt(r["final_val"]), fmt(r["final_train"])]
        if has_acc:
            row += [fmt(r["acc_final"]), fmt(r["acc_max"])]
        lines.append("| " + " | ".join(row + [r["status"]]) + " |")
    groups = {}
    for r in runs:
        groups.setdefault((r.get("shape", "?"), r.get("mode", "?"), r.get("lr", "?")), []).append(r)
    lines += ["", "per shape, mode and learning rate (mean ± sample std over the seeds whose run did not diverge)", "",
              "| shape | mode | lr | runs | diverged | stalled | min val | final val |" + (" arith_acc final | arith_acc max |" if has_acc else ""),
              "|---|---|---|---|---|---|---|---|" + ("---|---|" if has_acc else "")]
    for (shape, mode, lr), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], float(kv[0][2]) if kv[0][2] != "?" else 0)):
        ok = [r for r in rs if not r["diverged"]]
        row = [shape, mode, lr, str(len(rs)), str(len(rs) - len(ok)), str(sum(1 for r in rs if r.get("stalled"))),
               mean_spread([r["min_val"] for r in ok]), mean_spread([r["final_val"] for r in ok])]
        if has_acc:
            row += [mean_spread([r["acc_final"] for r in ok]), mean_spread([r["acc_max"] for r in ok])]
        lines.append("| " + " | ".join(row) + " |")
    if unigram is not None:
        lines += ["", f"unigram entropy of the validation shard: {unigram:.4f} nats"]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root", help="results folder holding run folders with run.info")
    p.add_argument("-o", dest="output", default="", help="also write the summary here")
    p.add_argument("--unigram_from", default="", metavar="SHARD",
                   help="mark runs whose final val loss is above this shard's unigram entropy")
    args = p.parse_args()
    text = summarize(args.root, unigram_entropy(args.unigram_from) if args.unigram_from else None)
    sys.stdout.write(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
