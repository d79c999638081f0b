"""The meter's hooks in C (`_native.c`), where they were built: the data fetch, the backward pass, the optimizer
step and the model forward's entry and exit. With them the meter cost +5.5 µs a step on the MLP workload's 1 ms
step, against +18.6 µs with the Python hooks (docs/capture.md "What it costs"). Without a compiler at install time, on
a platform other than Linux, with a clock other than time.perf_counter_ns (a test's fake clock), or with
STEPSCOPE_PURE_PYTHON_HOOKS=1 set, the Python hooks in hooks.py run instead: they do the same, event for event."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from types import ModuleType

try:  # a leaf: the extension imports nothing of ours
    import stepscope.capture.meter._native as _native  # typed by _native.pyi
except ImportError:
    _native = None  # type: ignore[assignment]  # not built: the Python hooks run

OFF_SWITCH = "STEPSCOPE_PURE_PYTHON_HOOKS"


def native_hooks(clock: Callable[[], int]) -> ModuleType | None:
    """The C hooks' module when they can stand in for the Python ones on `clock`, else None."""
    if os.environ.get(OFF_SWITCH) == "1" or clock is not time.perf_counter_ns or not sys.platform.startswith("linux"):
        return None
    return _native
