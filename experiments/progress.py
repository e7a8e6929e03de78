"""Progress over long work: a bar with an ETA on a terminal, plain lines otherwise.

A run advances one step per round, a study one per cell. On a terminal the bar
(rich) stays at the bottom while each step's one-line result prints above it;
when the output is not a terminal (CI, a log file, a pipe) there is no bar, and
each step's line is printed as ``fabriclab: <label> i/n, <elapsed> s, ETA <s> s: line``
unless the caller already prints its own (``lines=False``). Nothing at all when quiet.
"""
from __future__ import annotations

import sys
import time

from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)


class Progress:
    """Progress over ``total`` steps called ``label`` (e.g. ``"rounds"``, ``"study cells"``).

    ``quiet``: show nothing. ``lines``: without a terminal, print one line per step with the
    elapsed time and the ETA (a run leaves this off: it prints each round's result itself).
    ``stream``: where to look for a terminal (default stdout). The ETA is the mean time per
    finished step times the steps left, in seconds. Use as a context manager or call
    :meth:`close`.
    """

    def __init__(self, label: str, total: int, quiet: bool = False, lines: bool = True, stream=None):
        self.label, self.total, self.quiet, self.lines, self.done = label, total, quiet, lines, 0
        self._bar = None
        self._t0 = time.monotonic()
        stream = sys.stdout if stream is None else stream
        if not quiet and total > 1 and stream.isatty():
            self._bar = RichProgress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                     TextColumn("ETA"), TimeRemainingColumn())
            self._task = self._bar.add_task(label, total=total)
            self._bar.start()

    @property
    def bar(self) -> bool:
        """True when a live bar is drawn (a terminal, not quiet, more than one step)."""
        return self._bar is not None

    def eta_s(self) -> float:
        """Seconds left at the mean pace of the steps done so far (0 before the first)."""
        el = time.monotonic() - self._t0
        return el / self.done * (self.total - self.done) if self.done else 0.0

    def advance(self, n: int = 1, line: str | None = None) -> None:
        """``n`` more steps done; ``line`` (optional) says what they gave."""
        self.done += n
        if self.quiet:
            return
        if self._bar is not None:
            if line:
                self._bar.console.print(line, highlight=False, markup=False)
            self._bar.update(self._task, advance=n)
            return
        if self.lines and line is not None:
            el = time.monotonic() - self._t0
            print(f"fabriclab: {self.label} {self.done}/{self.total}, {el:.0f} s, ETA {self.eta_s():.0f} s: {line}",
                  flush=True)

    def close(self) -> None:
        """Stop the bar (idempotent)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
