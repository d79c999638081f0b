"""The device's clock against the host's: a GPU activity cannot start before the runtime call that launched it
began. When most of a device's linked activities do, its timeline is offset from the host's (a tool that wrote the
device's times on another clock) and is moved back by the least shift that makes every launch possible; when a few
do, their times cannot be trusted, and a note says so."""

from __future__ import annotations

import numpy as np

from stepscope.trace.links import launch_pairs
from stepscope.trace.model import Events, Kind

# Where most of a device's linked activities start before their launch, the device clock is taken as offset.
OFFSET_SHARE = 0.5
_DEVICE_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_ANNOTATION, Kind.GPU_SYNC)


def device_clock_aligned(events: Events, strings: tuple[str, ...], notes: list[str]) -> Events:
    """The table with each offset device's timeline moved to start its activities no earlier than their launches,
    and a note per device whose activities start before the call that launched them."""
    gpu, calls = launch_pairs(events, strings)
    lead = events.start[gpu] - events.start[calls]  # ns from the launch's start to the activity's: never negative
    early = lead < 0
    if not early.any():
        return events
    start = events.start
    device = events.device[gpu]
    for dev in np.unique(device[early]).tolist():
        on = device == dev
        count, total, worst = int(early[on].sum()), int(on.sum()), int(-lead[on].min())
        said = (f"device {dev}: {count:,} of {total:,} GPU activities start before the runtime call that launched "
                f"them (by up to {_ms(worst)}), which cannot happen")
        if count < OFFSET_SHARE * total:
            notes.append(f"{said}: their times cannot be trusted, and the GPU figures that use them are approximate")
            continue
        notes.append(f"{said}: the device's clock is offset from the host's, so its timeline is moved {_ms(worst)} "
                     "later (the least shift that puts every activity after its launch; the GPU's busy time, idle "
                     "gaps and step ends stand on this estimate)")
        if start is events.start:
            start = start.copy()
        start[events.of_kind(*_DEVICE_KINDS) & (events.device == dev)] += worst
    if start is events.start:
        return events
    columns = {name: getattr(events, name) for name in events.__dataclass_fields__}
    columns["start"] = start
    return Events.from_columns(**columns)


def _ms(ns: int) -> str:
    return f"{ns / 1e9:.4g} s" if ns >= 10**9 else f"{ns / 1e6:.4g} ms"
