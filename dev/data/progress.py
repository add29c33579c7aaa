"""
dev/data/progress.py: a progress counter for long work, standard library only.

    progress = Progress("tokenizing", total=len(documents), unit="documents")
    for doc in documents:
        ...
        progress.update()
    progress.close()

prints on stderr "tokenizing: 1,234 / 5,000 documents (25%), 12 s, about 36 s left" (without a
total: the count, the time and the rate). On a terminal the line is redrawn in place at most every
half second; into a file or a pipe a new line is written at most every 10 seconds, so that a log
gets a few lines and not thousands (every=0: a line at every update, for a few long steps).
close() prints the final count and the time taken, unless the last line already did. The
estimate assumes the rest goes at the average pace so far.
"""

import sys
import time


class Progress:
    def __init__(self, what, total=None, unit="", stream=None, every=None, clock=time.monotonic):
        self.what, self.total, self.unit = what, total, unit
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every if every is not None else (0.5 if self.tty else 10.0)
        self.clock = clock
        self.start = self.last = clock()
        self.done = 0
        self.shown = None  # the count the last line showed
        self.closed = False

    def line(self):
        elapsed = self.clock() - self.start
        unit = f" {self.unit}" if self.unit else ""
        if self.total:
            text = (f"{self.what}: {self.done:,} / {self.total:,}{unit} ({100.0 * self.done / self.total:.0f}%), "
                    f"{elapsed:.0f} s")
            if 0 < self.done < self.total:
                text += f", about {elapsed / self.done * (self.total - self.done):.0f} s left"
            return text
        rate = f" ({self.done / elapsed:,.0f}{unit} per s)" if elapsed > 0 else ""
        return f"{self.what}: {self.done:,}{unit}, {elapsed:.0f} s{rate}"

    def _show(self):
        self.shown = self.done
        if self.tty:
            print("\r" + self.line() + "\033[K", end="", file=self.stream, flush=True)
        else:
            print(self.line(), file=self.stream, flush=True)

    def update(self, n=1):
        self.done += n
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            self._show()

    def close(self):
        if not self.closed:
            self.closed = True
            if self.shown != self.done:
                self._show()
            if self.tty:
                print(file=self.stream, flush=True)
