"""A progress line on stderr for a trace that takes more than a few seconds to read (a multi-GB trace)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

AFTER_S = 2.0  # a read shorter than this shows nothing
EVERY_S = 0.25


class ReadingProgress:
    """Called with (bytes of the file read, its size); `close()` clears the line."""

    def __init__(self, path: Path) -> None:
        self.name = path.name
        self.started = time.monotonic()
        self.last = 0.0
        self.width = 0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.started < AFTER_S or now - self.last < EVERY_S or total <= 0:
            return
        self.last = now
        line = (f"reading {self.name}: {min(done / total, 1.0):.0%} of {total / 1e6:,.0f} MB "
                f"({now - self.started:.0f} s)")
        print("\r" + line.ljust(self.width), end="", file=sys.stderr, flush=True)
        self.width = len(line)

    def close(self) -> None:
        if self.width:
            print("\r" + " " * self.width + "\r", end="", file=sys.stderr, flush=True)
