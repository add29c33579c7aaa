"""
dev/experiments/plot_mechanism.py: tables and a PNG from the output of dev/experiments/mechanism.c.

    python dev/experiments/plot_mechanism.py pre.txt post.txt siamese.txt -o mechanism.png [--table summary.md]

Left panel: the update size ||z_k|| against its stream, per sublayer k (attention and MLP of each
layer): pre and post against their one stream x, siamese against Y (the Pre-Norm-like stream) and,
dashed, ||z_k / c_l|| against a_k = LN(x_k) (the Post-Norm-like stream X); every file (model) is
one line. Right panel (siamese): how much the validation loss rises when one term of the final
merge is replaced by its mean or set to zero. The tables hold per-layer summaries, the norms of
the two merge terms and the ablated losses.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import summarize  # noqa: E402

COLORS = {"pre": "tab:blue", "post": "tab:orange", "siamese": "tab:green"}


def read(path):
    out = {"sublayers": [], "merge": None, "mode": None, "val_loss": None}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                continue
            parts = line.split()
            if not parts:
                continue
            fields = dict(p.split("=", 1) for p in parts if "=" in p)
            if parts[0] == "merge":
                out["merge"] = {k: float(v) for k, v in fields.items()}
            elif "sublayer" in fields:
                out["sublayers"].append({k: (v if k == "kind" else float(v)) for k, v in fields.items()})
            elif "mode" in fields:
                out["mode"], out["val_loss"] = fields["mode"], float(fields["val_loss"])
    if out["mode"] is None:
        sys.exit(f"error: {path}: no model= line (not an output of dev/experiments/mechanism)")
    return out


def layer_means(values):
    """the mean of the attention and the MLP sublayer of each layer"""
    return [(values[2 * l] + values[2 * l + 1]) / 2 for l in range(len(values) // 2)]


def table(results, names):
    lines = ["| model | val loss | ||z||/||stream||, layer 0 | middle layer | last layer | mean over sublayers |",
             "|---|---|---|---|---|---|"]
    for r, name in zip(results, names):
        for key, label in [("ratio", "Y" if r["mode"] == "siamese" else "x"), ("ratio_x", "X: ||z/c||/||LN(x)||")]:
            if key not in r["sublayers"][0]:
                continue
            values = [s[key] for s in r["sublayers"]]
            per_layer = layer_means(values)
            L = len(per_layer)
            loss = f"{r['val_loss']:.4f}" if key == "ratio" else ""
            lines.append(f"| {name} (stream {label}) | {loss} | {per_layer[0]:.3f} | {per_layer[L // 2]:.3f} | "
                         f"{per_layer[-1]:.3f} | {sum(values) / len(values):.3f} |")
    merges = [(r["merge"], name) for r, name in zip(results, names) if r["merge"]]
    if merges:
        keys = ["lnfx_norm", "lnfy_norm", "cosine", "loss", "loss_zero_x", "loss_zero_y", "loss_mean_x", "loss_mean_y"]
        lines += ["", "SiameseNorm's final merge h = LN(LN(x; lnfx) + LN(y; lnfy); lnf), on the same val tokens", "",
                  "| model | ||LN(x; lnfx)|| | ||LN(y; lnfy)|| | cosine | loss | LN(x) term zeroed | LN(y) term zeroed |"
                  " LN(x) term -> its mean | LN(y) term -> its mean |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for m, name in merges:
            lines.append(f"| {name} | " + " | ".join(f"{m[k]:.3f}" if "norm" in k or k == "cosine" else f"{m[k]:.4f}"
                                                      for k in keys) + " |")
        if len(merges) > 1:
            lines.append("| mean ± std | " + " | ".join(summarize.mean_spread([m[k] for m, _ in merges], digits=3)
                                                         for k in keys) + " |")
        lines += ["", "(the head recomputed on the unablated sum: " +
                  ", ".join(f"{m['loss_recomputed']:.4f}" for m, _ in merges) + ", the models' losses)"]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description="plot the output of dev/experiments/mechanism")
    p.add_argument("files", nargs="+")
    p.add_argument("-o", dest="output", default="mechanism.png")
    p.add_argument("--table", default="", help="also write the markdown tables here")
    args = p.parse_args()
    results = [read(f) for f in args.files]
    names = [os.path.splitext(os.path.basename(f))[0] for f in args.files]
    text = table(results, names)
    sys.stdout.write(text)
    if args.table:
        with open(args.table, "w", encoding="utf-8") as f:
            f.write(text)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    merges = [r["merge"] for r in results if r["merge"]]
    fig, axes = plt.subplots(1, 2 if merges else 1, figsize=(13 if merges else 6.5, 4.6), squeeze=False,
                             gridspec_kw={"width_ratios": [2, 1]} if merges else None)
    ax = axes[0][0]
    labelled = set()
    for r in results:  # one line per model; every seed of a mode in the mode's colour
        k = [s["sublayer"] / 2 for s in r["sublayers"]]  # in layers: attention at l, MLP at l + 0.5
        color = COLORS.get(r["mode"], "black")
        stream = "Y" if r["mode"] == "siamese" else "x"
        label = None if r["mode"] in labelled else f"{r['mode']}: ||z|| / ||{stream}||"
        ax.plot(k, [s["ratio"] for s in r["sublayers"]], "o-", color=color, markersize=3, alpha=0.8, label=label)
        if r["mode"] == "siamese":
            ax.plot(k, [s["ratio_x"] for s in r["sublayers"]], "s--", color=color, markersize=3, alpha=0.5,
                    label=None if label is None else "siamese: ||z/c|| / ||LN(x)||")
        labelled.add(r["mode"])
    ax.set_yscale("log")
    ax.set_xlabel("layer (attention at l, MLP at l + 0.5)")
    ax.set_title(f"update size against the stream it is added to ({len(results)} models)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    if merges:
        ax = axes[0][1]
        n = len(merges)
        full = sum(m["loss"] for m in merges) / n
        bars = [("X -> mean", "loss_mean_x", "tab:purple"), ("Y -> mean", "loss_mean_y", "tab:green"),
                ("X zeroed", "loss_zero_x", "plum"), ("Y zeroed", "loss_zero_y", "lightgreen")]
        for i, (label, key, color) in enumerate(bars):
            values = [m[key] - m["loss"] for m in merges]
            ax.bar(i, sum(values) / n, color=color)
            ax.plot([i] * n, values, "k.", markersize=5)
        ax.set_xticks(range(len(bars)))
        ax.set_xticklabels([b[0] for b in bars], fontsize=8)
        ax.set_ylabel("val loss increase (nats)")
        ax.set_title(f"siamese final merge: one stream ablated\n(loss {full:.3f}; bars: mean of {n}, dots: models)",
                     fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
