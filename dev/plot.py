"""
dev/plot.py: compare training runs from their main.log files in one PNG.

    python dev/plot.py out/pre out/post out/siamese -o compare.png
    python dev/plot.py pre=out/pre post=out/post siamese=out/siamese --smooth 20
    python dev/plot.py out/a/main.log out/b --labels "lr 1e-3,lr 3e-3" --from_step 100
    python dev/plot.py cosine=out/a wsd=out/b --values     the plotted points as text, no PNG

Each RUN is a run folder (the -o of train_gpt2 / train_gpt2cu, holding main.log) or a main.log
itself, optionally prefixed "label=". The panels: train loss (optionally smoothed with an
exponential moving average over about N steps), val loss, the learning rate of each step (the
schedule of -K), and, when any run logged them, the multiple-choice accuracy (-H) and the held-out
exact-match accuracy (arithmetic data). The log is common/logger.h's key=value
lines; when a resumed run logged a step twice, the last line wins. Losses are cross-entropies in
nats per token; the accuracy is shown in percent. A log with nothing to plot (empty, not a main.log,
or no step at or after --from_step) is an error: one line, exit status 1, and no PNG written.
Needs matplotlib (the log checks come before it is imported; without it, one error line), except with --values, which prints
the points each panel would draw, one "label<TAB>key<TAB>step<TAB>value" line each, and writes no
PNG. Tests: python dev/test_plot.py, and tests/test_train_cli.sh on the logs of real runs.
"""

import argparse
import os
import sys


def read_log(path):
    """{key: {step: value}} for every numeric key=value of the log's step lines."""
    series = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
            if "step" not in fields:
                continue
            try:
                step = int(fields.pop("step"))
            except ValueError:
                continue
            for key, value in fields.items():
                try:
                    series.setdefault(key, {})[step] = float(value)
                except ValueError:
                    pass
    return series


def sorted_xy(points):
    steps = sorted(points)
    return steps, [points[s] for s in steps]


def ema(values, span):
    if span <= 1:
        return values
    alpha = 2.0 / (span + 1.0)
    out, avg = [], None
    for v in values:
        avg = v if avg is None else alpha * v + (1 - alpha) * avg
        out.append(avg)
    return out


def parse_runs(args):
    labels = args.labels.split(",") if args.labels else []
    if labels and len(labels) != len(args.runs):
        sys.exit(f"error: {len(labels)} labels for {len(args.runs)} runs")
    runs = []
    for i, spec in enumerate(args.runs):
        label, path = None, spec
        if "=" in spec and not os.path.exists(spec):
            label, path = spec.split("=", 1)
        if os.path.isdir(path):
            path = os.path.join(path, "main.log")
        if not os.path.isfile(path):
            sys.exit(f"error: {path}: no such log file")
        if labels:
            label = labels[i]
        if label is None:
            label = os.path.basename(os.path.dirname(os.path.abspath(path))) or path
        series = read_log(path)
        if not any(key in series for key, _ in PANELS):
            sys.exit(f"error: {path}: no step lines with train_loss, val_loss or arith_acc "
                     "(empty, or not a main.log of train_gpt2)")
        if not any(step >= args.from_step for key, _ in PANELS for step in series.get(key, {})):
            sys.exit(f"error: {path}: nothing logged at or after --from_step {args.from_step}")
        runs.append((label, series))
    return runs


# the panels: log key, title, y-axis label; the first two always, the others when a run logged them
PANELS = [("train_loss", "train loss"), ("val_loss", "val loss"), ("lr", "learning rate"),
          ("eval_acc", "multiple-choice accuracy"), ("arith_acc", "arithmetic accuracy")]
ACCURACIES = ("eval_acc", "arith_acc")  # logged as fractions, shown in percent
YLABELS = {"train_loss": "cross-entropy (nats/token)", "val_loss": "cross-entropy (nats/token)",
           "lr": "learning rate", "eval_acc": "right answers (%)", "arith_acc": "held-out exact match (%)"}


def panel_points(runs, key, args):
    """[(label, steps, values)] of the runs that logged `key`, as the panel draws them."""
    out = []
    for label, series in runs:
        if key not in series:
            continue
        steps, values = sorted_xy({k: v for k, v in series[key].items() if k >= args.from_step})
        if key == "train_loss":
            values = ema(values, args.smooth)
        if key in ACCURACIES:
            values = [100.0 * v for v in values]
        out.append((label, steps, values))
    return out


def main():
    parser = argparse.ArgumentParser(description="Plot train/val loss and arithmetic accuracy of runs.")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run folder or main.log, optionally label=PATH")
    parser.add_argument("--labels", help="comma-separated labels, one per RUN")
    parser.add_argument("-o", "--output", default="runs.png", help="PNG to write (default runs.png)")
    parser.add_argument("--smooth", type=int, default=0, metavar="N", help="EMA span for the train loss (0: none)")
    parser.add_argument("--title", default=None, help="figure title")
    parser.add_argument("--group", action="store_true",
                        help="one colour per first word of the labels (\"pre s1\", \"pre s2\": one colour, "
                             "other line styles), for seeds of the same setting")
    parser.add_argument("--from_step", type=int, default=0, metavar="S",
                        help="leave out steps before S (the first losses dwarf the rest)")
    parser.add_argument("--values", action="store_true",
                        help="print the points of each panel (label, key, step, value; tab-separated), no PNG")
    args = parser.parse_args()
    runs = parse_runs(args)
    panels = PANELS[:2] + [p for p in PANELS[2:] if any(p[0] in series for _, series in runs)]
    if args.values:
        for key, _ in panels:
            for label, steps, values in panel_points(runs, key, args):
                for step, value in zip(steps, values):
                    print(f"{label}\t{key}\t{step}\t{value:.9g}")
        return

    try:
        import matplotlib
    except ImportError:
        sys.exit("error: the PNG needs matplotlib (pip install matplotlib); --values prints the points without it")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    styles = {}  # label -> (colour, dashes) with --group
    if args.group:
        groups = []
        for label, _ in runs:
            g = label.split()[0]
            if g not in groups:
                groups.append(g)
        seen = {}
        for label, _ in runs:
            g = label.split()[0]
            seen[g] = seen.get(g, 0) + 1
            styles[label] = (f"C{groups.index(g)}", ["-", "--", ":", "-."][(seen[g] - 1) % 4])
    for ax, (key, title) in zip(axes[0], panels):
        for label, steps, values in panel_points(runs, key, args):
            style = {"marker": None if key in ("train_loss", "lr") else "o", "linestyle": "-"}
            if label in styles:
                style = dict(style, color=styles[label][0], linestyle=styles[label][1])
            ax.plot(steps, values, label=label, markersize=3, linewidth=1.2, **style)
        ax.set_title(title)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(YLABELS[key])
        ax.grid(alpha=0.3)
        if key in ACCURACIES:  # from 0, to a little above the best accuracy (small ones stay visible)
            best = max((max(series[key].values()) for _, series in runs if series.get(key)), default=0.0)
            ax.set_ylim(0.0, min(100.0, max(5.0, 115.0 * best)))
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
