"""
dev/test_plot.py: tests of dev/plot.py.

    python dev/test_plot.py

A log with nothing to plot (empty, a file that is not a main.log, only lines before --from_step)
must end plot.py with one "error: ..." line and exit status 1, and write no PNG: these checks need
no matplotlib (plot.py looks at the logs before importing it). Neither does --values: the points of
each panel, the learning rate's among them, as text. With matplotlib installed, a good log must
give a PNG; without it, that check is skipped with a message.
"""

import importlib.util
import os
import subprocess
import sys
import tempfile

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot.py")
failed = 0


def run_plot(*args):
    return subprocess.run([sys.executable, PLOT, *args], capture_output=True, text=True)


def check(name, ok, detail=""):
    global failed
    print(("ok   " if ok else "FAIL ") + name)
    if not ok:
        failed += 1
        if detail:
            print("       | " + detail.replace("\n", "\n       | "))


def expect_error(name, needle, log_text, *extra):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "main.log")
        with open(log, "w") as f:
            f.write(log_text)
        png = os.path.join(tmp, "out.png")
        r = run_plot(log, "-o", png, *extra)
        lines = r.stderr.strip().splitlines()
        check(f"{name}: exit 1, one 'error: ...{needle}...' line, no PNG",
              r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
              and not os.path.exists(png), f"exit {r.returncode}, stderr: {r.stderr}")


expect_error("empty log", "no step lines with train_loss, val_loss or arith_acc", "")
expect_error("not a main.log", "no step lines", "hello world\nstep 3/10 | loss 5.1\n\x00\xff garbage\n")
expect_error("step lines without numbers", "no step lines", "step=1 train_loss=nope\nstep=x val_loss=1.0\n")
expect_error("nothing at or after --from_step", "nothing logged at or after --from_step 100",
             "step=1 train_loss=5.0\nstep=2 train_loss=4.0\n", "--from_step", "100")
with tempfile.TemporaryDirectory() as tmp:
    r = run_plot(os.path.join(tmp, "none"), "-o", os.path.join(tmp, "x.png"))
    check("missing run folder: exit 1, no such log file", r.returncode == 1 and "no such log file" in r.stderr, r.stderr)

# --values: each panel's points; the lr panel holds every step's lr, the train loss is smoothed with
# --smooth, the accuracy in percent, a resumed run's repeated step counts once (the last line wins)
with tempfile.TemporaryDirectory() as tmp:
    log = os.path.join(tmp, "main.log")
    with open(log, "w") as f:
        for step, lr in [(1, 5e-4), (2, 1e-3), (3, 7.5e-4), (3, 6e-4), (4, 1e-4)]:
            f.write(f"step={step} train_loss={5.0 - step:.4f} norm=1.0 lr={lr:.4e} ms=1.0 tok_per_s=100\n")
        f.write("step=4 val_loss=3.5 eval_acc=0.8125 arith_acc=0.4375\n")
    r = run_plot(f"wsd={log}", "--values", "--smooth", "3")
    rows = [line.split("\t") for line in r.stdout.splitlines()]
    lr = [(int(s), float(v)) for label, key, s, v in rows if key == "lr" and label == "wsd"]
    check("--values: exit 0, no PNG needed", r.returncode == 0 and not os.path.exists("runs.png"), r.stderr)
    check("--values: the lr panel holds each step's lr, the last line of a repeated step",
          lr == [(1, 5e-4), (2, 1e-3), (3, 6e-4), (4, 1e-4)], r.stdout)
    loss = [float(v) for label, key, s, v in rows if key == "train_loss"]
    check("--values: the train loss smoothed (EMA, span 3)",
          len(loss) == 4 and abs(loss[1] - (0.5 * 3.0 + 0.5 * 4.0)) < 1e-9, r.stdout)
    check("--values: val loss and the accuracies in percent",
          ["wsd", "val_loss", "4", "3.5"] in rows and ["wsd", "arith_acc", "4", "43.75"] in rows and
          ["wsd", "eval_acc", "4", "81.25"] in rows, r.stdout)

# without matplotlib (a matplotlib package that fails to import, first on the path): one error line
with tempfile.TemporaryDirectory() as tmp:
    os.makedirs(os.path.join(tmp, "matplotlib"))
    with open(os.path.join(tmp, "matplotlib", "__init__.py"), "w") as f:
        f.write("raise ImportError('no matplotlib here')\n")
    log = os.path.join(tmp, "main.log")
    with open(log, "w") as f:
        f.write("step=1 train_loss=5.0 norm=1.0 lr=1e-3 ms=1.0 tok_per_s=100\n")
    png = os.path.join(tmp, "out.png")
    r = subprocess.run([sys.executable, PLOT, log, "-o", png], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=tmp))
    lines = r.stderr.strip().splitlines()
    check("no matplotlib: exit 1, one 'error: ...needs matplotlib...' line, no PNG",
          r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and "needs matplotlib" in lines[0]
          and not os.path.exists(png), f"exit {r.returncode}, stderr: {r.stderr}")

if importlib.util.find_spec("matplotlib") is None:
    print("skip a good log gives a PNG: matplotlib is not installed (pip install matplotlib)")
else:
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "main.log")
        with open(log, "w") as f:
            for step in range(1, 21):
                f.write(f"step={step} train_loss={5.0 - 0.1 * step:.4f} norm=1.0 lr=1e-3 ms=1.0 tok_per_s=100\n")
            f.write("step=20 val_loss=3.5 arith_acc=0.4375\n")
        png = os.path.join(tmp, "good.png")
        r = run_plot(log, "-o", png, "--smooth", "5")
        check("a good log gives a PNG", r.returncode == 0 and os.path.getsize(png) > 1000, r.stderr)

print(f"test_plot: {'all checks passed' if failed == 0 else f'{failed} failed'}")
sys.exit(1 if failed else 0)
