"""
dev/experiments/plot_mechanism.py: tables and a PNG from the output of dev/experiments/mechanism.c.

    python dev/experiments/plot_mechanism.py pre.txt post.txt siamese.txt -o mechanism.png [--table summary.md]

Left panel: the update size ||z_k|| against its stream, per sublayer k (attention and MLP of each
layer): pre and post against their one stream x, siamese against Y (the Pre-Norm-like stream) and,
dashed, ||z_k / c_l|| against a_k = LN(x_k) (the Post-Norm-like stream X). Right panel (siamese):
the norms of the two terms of the final merge. The table holds the same numbers and the losses of
the merge with one term ablated.
"""

import argparse
import sys

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


def table(results):
    lines = ["| mode | val loss | ratio ||z||/||stream||: first layer | middle | last layer | mean over sublayers |",
             "|---|---|---|---|---|---|"]
    for r in results:
        ratios = [s["ratio"] for s in r["sublayers"]]
        L = len(ratios) // 2
        per_layer = [(ratios[2 * l] + ratios[2 * l + 1]) / 2 for l in range(L)]
        stream = "Y" if r["mode"] == "siamese" else "x"
        lines.append(f"| {r['mode']} (stream {stream}) | {r['val_loss']:.4f} | {per_layer[0]:.3f} | "
                     f"{per_layer[L // 2]:.3f} | {per_layer[-1]:.3f} | {sum(ratios) / len(ratios):.3f} |")
        if r["mode"] == "siamese":
            rx = [s["ratio_x"] for s in r["sublayers"]]
            px = [(rx[2 * l] + rx[2 * l + 1]) / 2 for l in range(L)]
            lines.append(f"| siamese (stream X: ||z/c||/||LN(x)||) | | {px[0]:.3f} | {px[L // 2]:.3f} | "
                         f"{px[-1]:.3f} | {sum(rx) / len(rx):.3f} |")
    for r in results:
        m = r["merge"]
        if not m:
            continue
        lines += ["", "siamese final merge h = LN(LN(x; lnfx) + LN(y; lnfy); lnf), on the same val tokens:", "",
                  "| ||LN(x; lnfx)|| | ||LN(y; lnfy)|| | cosine | loss | LN(x) term zeroed | LN(y) term zeroed |"
                  " LN(x) term -> its mean | LN(y) term -> its mean |",
                  "|---|---|---|---|---|---|---|---|",
                  f"| {m['lnfx_norm']:.3f} | {m['lnfy_norm']:.3f} | {m['cosine']:.3f} | {m['loss']:.4f} | "
                  f"{m['loss_zero_x']:.4f} | {m['loss_zero_y']:.4f} | {m['loss_mean_x']:.4f} | {m['loss_mean_y']:.4f} |",
                  "", f"(the head recomputed on the unablated sum gives {m['loss_recomputed']:.4f})"]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description="plot the output of dev/experiments/mechanism")
    p.add_argument("files", nargs="+")
    p.add_argument("-o", dest="output", default="mechanism.png")
    p.add_argument("--table", default="", help="also write the markdown tables here")
    args = p.parse_args()
    results = [read(f) for f in args.files]
    text = table(results)
    sys.stdout.write(text)
    if args.table:
        with open(args.table, "w", encoding="utf-8") as f:
            f.write(text)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    siamese = [r for r in results if r["merge"]]
    fig, axes = plt.subplots(1, 2 if siamese else 1, figsize=(12 if siamese else 6.5, 4.4), squeeze=False,
                             gridspec_kw={"width_ratios": [2, 1]} if siamese else None)
    ax = axes[0][0]
    for r in results:
        k = [s["sublayer"] / 2 for s in r["sublayers"]]  # in layers: attention at l, MLP at l + 0.5
        color = COLORS.get(r["mode"], "black")
        stream = "Y" if r["mode"] == "siamese" else "x"
        ax.plot(k, [s["ratio"] for s in r["sublayers"]], "o-", color=color, markersize=3,
                label=f"{r['mode']}: ||z|| / ||{stream}||")
        if r["mode"] == "siamese":
            ax.plot(k, [s["ratio_x"] for s in r["sublayers"]], "s--", color=color, markersize=3, alpha=0.7,
                    label="siamese: ||z/c|| / ||LN(x)||")
    ax.set_yscale("log")
    ax.set_xlabel("layer (attention at l, MLP at l + 0.5)")
    ax.set_title("update size against the stream it is added to")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    if siamese:
        ax = axes[0][1]
        m = siamese[0]["merge"]
        ax.bar(["||LN(x; lnfx)||\n(stream X)", "||LN(y; lnfy)||\n(stream Y)"], [m["lnfx_norm"], m["lnfy_norm"]],
               color=["tab:purple", "tab:green"])
        ax.set_title(f"siamese final merge (cosine {m['cosine']:.2f})\n"
                     f"loss {m['loss']:.3f}; X->mean {m['loss_mean_x']:.3f}, Y->mean {m['loss_mean_y']:.3f}",
                     fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
