"""
dev/experiments/plot_sweep.py: the learning-rate sweep of dev/experiments/stability.sh in one PNG.

    python dev/experiments/plot_sweep.py out/experiments/stability -o stability.png [--unigram_from VAL_SHARD]

One panel per model shape: the final validation loss of each run against its peak learning rate
(log scale), one line per norm mode. A diverged run (dev/experiments/summarize.py's criterion) is
drawn as a cross at the top of the panel, at its learning rate; with --unigram_from a dashed line
marks the unigram entropy: a run near it learnt little beyond the token frequencies. Needs matplotlib.
"""

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import summarize  # noqa: E402

MODE_COLORS = {"pre": "tab:blue", "post": "tab:orange", "siamese": "tab:green"}


def main():
    p = argparse.ArgumentParser(description="final val loss against learning rate, per shape and mode")
    p.add_argument("root", help="the stability results folder (run folders with run.info)")
    p.add_argument("-o", dest="output", default="stability.png")
    p.add_argument("--unigram_from", default="", metavar="SHARD")
    args = p.parse_args()
    unigram = summarize.unigram_entropy(args.unigram_from) if args.unigram_from else None
    run_dirs = sorted(os.path.join(args.root, d) for d in os.listdir(args.root)
                      if os.path.isfile(os.path.join(args.root, d, "run.info")))
    runs = [summarize.run_metrics(d, unigram) for d in run_dirs]
    shapes = sorted({r["shape"] for r in runs}, key=lambda s: (len(s), s))
    if not shapes:
        sys.exit(f"error: no runs below {args.root}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    finite = [r["final_val"] for r in runs if not r["diverged"] and math.isfinite(r["final_val"])]
    top = max(finite + ([unigram] if unigram else [])) + 0.3 if finite else 6.0
    fig, axes = plt.subplots(1, len(shapes), figsize=(5.5 * len(shapes), 4.2), squeeze=False)
    for ax, shape in zip(axes[0], shapes):
        for mode, color in MODE_COLORS.items():
            rs = sorted((r for r in runs if r["shape"] == shape and r["mode"] == mode), key=lambda r: float(r["lr"]))
            if not rs:
                continue
            ok = [r for r in rs if not r["diverged"]]
            ax.plot([float(r["lr"]) for r in ok], [r["final_val"] for r in ok], "o-", color=color, label=mode)
            bad = [float(r["lr"]) for r in rs if r["diverged"]]
            if bad:
                ax.plot(bad, [top - 0.1] * len(bad), "x", color=color, markersize=10, mew=2,
                        label=f"{mode} diverged")
        if unigram:
            ax.axhline(unigram, color="gray", linestyle="--", linewidth=1, label="unigram entropy")
        ax.set_xscale("log")
        ax.set_ylim(top=top)
        ax.set_title(f"{shape}: final val loss")
        ax.set_xlabel("peak learning rate")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
