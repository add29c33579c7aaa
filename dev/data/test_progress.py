"""
dev/data/test_progress.py: the progress counter (dev/data/progress.py), standard library only;
make test runs it where python3 exists. A fake clock makes every line exact.
"""

import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from progress import Progress  # noqa: E402

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL {what}")


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def lines(stream):
    return stream.getvalue().splitlines()


# with a total: the estimate is the average pace so far times what is left
clock, out = Clock(), io.StringIO()
p = Progress("tokenizing", total=1000, unit="documents", stream=out, clock=clock)
clock.t += 3.0
p.update(200)  # 10 s between lines into a file: nothing yet
check(lines(out) == [], "no line before 10 s into a file")
clock.t += 7.0
p.update(50)
check(lines(out) == ["tokenizing: 250 / 1,000 documents (25%), 10 s, about 30 s left"],
      f"a line after 10 s with the estimate, got {lines(out)}")
clock.t += 2.0
p.update(10)
check(len(lines(out)) == 1, "the next line waits another 10 s")
clock.t += 8.0
p.update(240)
check(lines(out)[-1] == "tokenizing: 500 / 1,000 documents (50%), 20 s, about 20 s left",
      f"half done in 20 s: about 20 s left, got {lines(out)[-1]}")
clock.t += 5.0
p.update(500)  # 5 s after the last line: not shown yet
p.close()
p.close()
check(lines(out)[-1] == "tokenizing: 1,000 / 1,000 documents (100%), 25 s", f"the final line, got {lines(out)[-1]}")
check(len(lines(out)) == 3, f"close() prints the final count once, got {len(lines(out))} lines")

# without a total: count and rate
clock, out = Clock(), io.StringIO()
p = Progress("reading", unit="stories", stream=out, clock=clock)
clock.t += 4.0
p.update(4000)
p.close()
check(lines(out) == ["reading: 4,000 stories, 4 s (1,000 stories per s)"], f"count and rate, got {lines(out)}")


# on a terminal: redrawn in place every half second, and a newline at the end
class Terminal(io.StringIO):
    def isatty(self):
        return True


clock, out = Clock(), Terminal()
p = Progress("dumps", total=4, stream=out, clock=clock)
clock.t += 1.0
p.update()
p.close()
text = out.getvalue()
check(text == "\rdumps: 1 / 4 (25%), 1 s, about 3 s left\033[K\n", f"terminal output, got {text!r}")

# every=0: a line at every update, and close() does not repeat the last one
clock, out = Clock(), io.StringIO()
p = Progress("writing dumps", total=2, unit="dumps", stream=out, clock=clock, every=0)
clock.t += 5.0
p.update()
clock.t += 5.0
p.update()
p.close()
check(lines(out) == ["writing dumps: 1 / 2 dumps (50%), 5 s, about 5 s left", "writing dumps: 2 / 2 dumps (100%), 10 s"],
      f"a line per update, got {lines(out)}")

print("test_progress: all checks passed" if failures == 0 else f"test_progress: {failures} checks FAILED")
sys.exit(1 if failures else 0)
