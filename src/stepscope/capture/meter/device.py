"""The device's time per step and per phase on a GPU: a CUDA event recorded at each step boundary and where the
host enters the forward, the backward and the optimizer step, read a step or more later with `query()` (never a
sync), so the device is measured without stalling the host that enqueues its work.

A phase's device time is the time the device takes from reaching the phase's first event to reaching the next
event: the work the host enqueued in that phase, and any wait of the device for the host within it. So the phases
add up to the device's step. The stretch after a step boundary (data, the loss, anything before the forward) is
`other`. `make_event` is injectable: tests drive the timer with a fake device clock."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from stepscope.capture.meter.phases import BACKWARD, FORWARD, OPTIMIZER, OTHER

# Events not yet complete are kept this long before the oldest are given up (a device that never catches up).
MAX_PENDING = 256
TIMED_PHASES = (FORWARD, BACKWARD, OPTIMIZER)  # the phases marked on the device; the rest of a step is OTHER


class Event(Protocol):
    def record(self) -> None: ...
    def query(self) -> bool: ...
    def elapsed_time(self, end: Any) -> float: ...  # milliseconds, as torch.cuda.Event gives it


class DeviceTimer:
    """Device time of step i = the time between the device reaching boundary i-1 and boundary i; of a phase in it,
    the time from its mark to the next mark or boundary."""

    def __init__(self, make_event: Callable[[], Event]) -> None:
        self.make_event = make_event
        self.device_ns: dict[int, int] = {}  # step index -> ns
        self.phase_ns: dict[int, dict[int, int]] = {}  # step index -> phase -> ns (phases with a mark, and OTHER)
        # (index of the boundary, or -1 for a phase mark; the phase that begins at the event; the event)
        self._pending: deque[tuple[int, int, Event]] = deque()
        self._step: int | None = None  # the step the device is in (None until it passes a first boundary)
        self._acc: dict[int, int] = {}

    def boundary(self, index: int) -> None:
        """Step `index` ends now on the host: mark the point the device will reach when it has done its work."""
        self._record(index, OTHER)
        self.collect()

    def mark(self, phase: int) -> None:
        """The host enters `phase` now (one of TIMED_PHASES)."""
        if self._pending:  # before the first boundary the step is unknown: nothing to charge it to
            self._record(-1, phase)

    def _record(self, index: int, phase: int) -> None:
        event = self.make_event()
        event.record()
        pending = self._pending
        pending.append((index, phase, event))
        if len(pending) > MAX_PENDING:  # the device never caught up: start again from the next boundary
            pending.clear()
            self._step, self._acc = None, {}

    def collect(self) -> None:
        """Read every pair of completed events (an event is complete once the device has passed it)."""
        pending = self._pending
        while len(pending) >= 2 and pending[1][2].query():
            index, phase, start = pending.popleft()
            if index >= 0:
                self._step, self._acc = index + 1, {}
            if self._step is None:
                continue
            acc = self._acc
            acc[phase] = acc.get(phase, 0) + round(start.elapsed_time(pending[0][2]) * 1e6)
            if pending[0][0] >= 0:  # the next event ends the step
                self.device_ns[self._step] = sum(acc.values())
                self.phase_ns[self._step] = acc

    def restart(self) -> None:
        """The step source changed: earlier boundaries are another source's."""
        self._pending.clear()
        self.device_ns.clear()
        self.phase_ns.clear()
        self._step, self._acc = None, {}


def cuda_timer() -> DeviceTimer | None:
    """A timer on the current CUDA stream when the program uses CUDA; None otherwise (a CPU job: the host's wall
    time is the step)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return DeviceTimer(lambda: torch.cuda.Event(enable_timing=True))


def nvml_busy() -> Callable[[], float | None] | None:
    """NVML's utilisation of the current CUDA device (% of the last sample period a kernel ran), or None without
    nvidia-ml-py or a driver. NVML counts devices by PCI order, CUDA by CUDA_VISIBLE_DEVICES: matched by bus id."""
    import sys

    torch = sys.modules.get("torch")
    try:
        import pynvml as nv

        nv.nvmlInit()
        props = torch.cuda.get_device_properties(torch.cuda.current_device()) if torch is not None else None
        bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0" if props else None
        handle = nv.nvmlDeviceGetHandleByPciBusId(bus) if bus else nv.nvmlDeviceGetHandleByIndex(0)
    except Exception:  # no package, no driver, an older torch without PCI ids: no busy share
        return None

    def read() -> float | None:
        try:
            return float(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception:
            return None

    return read
