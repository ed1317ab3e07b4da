"""Progress reporting: the one `Progress` type, and the line the command line draws with it.

Long work (coding, measuring, downloading, calibrating) takes an optional `Progress`: a
callable told how many more units (bytes) are done. `ProgressLine` is the command line's:
one self-overwriting line on stderr, only when stderr is a terminal.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

Progress = Callable[[int], None]


class ProgressLine:
    """A `Progress` that draws `label: percent done/total B rate ETA` on stderr (a terminal only)."""

    def __init__(self, label: str, total: int | None, enabled: bool = True) -> None:
        self.label, self.total, self.done = label, total, 0
        self.enabled = enabled and sys.stderr.isatty()
        self.start = self.last = time.monotonic()

    def __call__(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and now - self.last >= 0.2:
            self.last = now
            rate = self.done / max(now - self.start, 1e-9) / 1e3
            if self.total:
                pct = 100 * self.done / self.total
                eta = (self.total - self.done) / max(rate * 1e3, 1e-9)
                status = f"{pct:5.1f}%  {self.done:,}/{self.total:,} B  {rate:.1f} kB/s  ETA {eta:.0f} s"
            else:
                status = f"{self.done:,} B  {rate:.1f} kB/s"
            sys.stderr.write(f"\r{self.label}: {status}\x1b[K")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.last != self.start:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
