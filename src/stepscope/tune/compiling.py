"""Compilation seen as it happens: torch's compile callbacks (dynamo tracing a frame, a backward compiled at its
first call, CUDA graphs recorded) counted and timed, so the step clock warms up until compiling stops, sets aside
a window a recompile fell in (the last partial batch of an epoch), and reports compile time apart.

Importing torch._dynamo costs seconds: the watch registers only once the program (or a compiling fix) has
imported it; a program that never compiles never pays for it.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any


class CompileWatch:
    def __init__(self) -> None:
        self.events = 0  # compilations finished
        self.total_ns = 0  # time spent in them
        self.active = False
        self._started = 0
        self._handler: Any = None

    def ready(self, force: bool = False) -> bool:
        """Registered with torch's callbacks, when torch._dynamo is loaded (imported now with `force`)."""
        if self._handler is not None:
            return True
        if not force and "torch._dynamo" not in sys.modules:
            return False
        try:
            from torch._dynamo.callback import callback_handler
        except ImportError:  # a torch without compile callbacks: compilation shows as slow warm-up steps only
            return False
        callback_handler.register_start_callback(self._start)
        callback_handler.register_end_callback(self._end)
        self._handler = callback_handler
        return True

    def remove(self) -> None:
        if self._handler is not None:
            for remove, callback in ((self._handler.remove_start_callback, self._start),
                                     (self._handler.remove_end_callback, self._end)):
                with contextlib.suppress(ValueError):  # already removed
                    remove(callback)
            self._handler = None

    def _start(self, *args: Any) -> None:
        self.active = True
        self._started = time.perf_counter_ns()

    def _end(self, *args: Any) -> None:
        self.active = False
        self.events += 1
        self.total_ns += time.perf_counter_ns() - self._started
