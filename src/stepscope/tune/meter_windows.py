"""A trial's windows as the step meter measured them: the clock (tune/clock.py) decides when a window opens and
closes, the meter (capture/meter/) says how long each of its steps took and where the time went.

A window of the clock spans the leading source's boundaries `first` to `first + steps`; the meter's step k of the
same source ends at its boundary k + 1 (k + 2 for model forwards, whose first call starts the first step). Its time
is the sum of those steps: the device's (CUDA events) where the meter has every one of them, else the host's wall
time on a CPU job; on a GPU without the device's figures the clock's synchronised window stands. A meter whose
steps do not span the clock's window within ALIGN_TOL (a source the two counted differently) leaves the window as the
clock timed it."""

from __future__ import annotations

from dataclasses import dataclass

from stepscope.model.meter import PHASES, MeterRecord
from stepscope.tune.clock import TimedWindow

ALIGN_TOL = 0.05
METER, SYNCHRONISED, HOST = "step meter", "synchronised windows", "host clock"


@dataclass(frozen=True)
class MeteredWindow:
    seconds: float
    timer: str  # METER, or the clock's own (SYNCHRONISED, HOST) where the meter could not stand
    phases_s: dict[str, float]  # the host's phases over the window (data, forward, ..., other); empty without


def metered(window: TimedWindow, record: MeterRecord | None, on_device: bool) -> MeteredWindow:
    clock_timer = SYNCHRONISED if on_device else HOST
    own = MeteredWindow(window.seconds, clock_timer, {})
    if record is None or record.source is None:
        return own
    st = record.steps
    offset = 2 if record.source == "forward" else 1
    lo = window.first_step + 1 - offset - st.first_step
    hi = lo + window.steps
    if lo < 0 or hi > len(st.wall_ns) or window.steps <= 0:
        return own
    wall = sum(st.wall_ns[lo:hi])
    if wall <= 0 or (not on_device and abs(wall / 1e9 / window.seconds - 1) > ALIGN_TOL):
        return own
    phases = {p: sum(getattr(st, f"{p}_ns")[lo:hi]) / 1e9 for p in PHASES}
    phases["other"] = max(wall / 1e9 - sum(phases.values()), 0.0)
    device = st.device_ns[lo:hi] if len(st.device_ns) == len(st.wall_ns) else []
    if on_device:
        if len(device) != window.steps or min(device) < 0:
            return MeteredWindow(window.seconds, clock_timer, phases)
        return MeteredWindow(sum(device) / 1e9, METER, phases)
    return MeteredWindow(wall / 1e9, METER, phases)


def data_share(phases_s: list[dict[str, float]]) -> float | None:
    """The main thread's wait for data over the windows' time, or None when the meter timed none of them."""
    timed = [p for p in phases_s if p]
    total = sum(sum(p.values()) for p in timed)
    return sum(p.get("data", 0.0) for p in timed) / total if total > 0 else None
