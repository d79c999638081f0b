"""The device's time per step on a GPU: a CUDA event recorded at each step boundary, read a step or more later
with `query()` (never a sync), so the device's step is measured without stalling the host that enqueues it.

`make_event` is injectable: tests drive the timer with a fake device clock."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

# Events not yet complete are kept this long before the oldest are given up (a device that never catches up).
MAX_PENDING = 64


class Event(Protocol):
    def record(self) -> None: ...
    def query(self) -> bool: ...
    def elapsed_time(self, end: Any) -> float: ...  # milliseconds, as torch.cuda.Event gives it


class DeviceTimer:
    """Device time of step i = the time between the device reaching boundary i-1 and boundary i."""

    def __init__(self, make_event: Callable[[], Event]) -> None:
        self.make_event = make_event
        self.device_ns: dict[int, int] = {}  # step index -> ns
        self._pending: deque[tuple[int, Event]] = deque()

    def boundary(self, index: int) -> None:
        """Step `index` ends now on the host: mark the point the device will reach when it has done its work."""
        event = self.make_event()
        event.record()
        self._pending.append((index, event))
        self.collect()
        while len(self._pending) > MAX_PENDING:
            self._pending.popleft()

    def collect(self) -> None:
        """Read every pair of completed boundaries (a boundary is complete once the device has passed it)."""
        pending = self._pending
        while len(pending) >= 2 and pending[1][1].query():
            _, start = pending.popleft()
            index, end = pending[0]
            self.device_ns[index] = round(start.elapsed_time(end) * 1e6)

    def restart(self) -> None:
        """The step source changed: earlier boundaries are another source's."""
        self._pending.clear()
        self.device_ns.clear()


def cuda_timer() -> DeviceTimer | None:
    """A timer on the current CUDA stream when the program uses CUDA; None otherwise (a CPU job: the host's wall
    time is the step)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return DeviceTimer(lambda: torch.cuda.Event(enable_timing=True))
