"""The device's clock against the host's: a GPU activity cannot start before the runtime call that launched it
began. When most of a device's linked activities do, its clock is offset from the host's (a tool that wrote the
device's times on another clock), and its activities are moved later by the least shift that makes every launch
possible; when a few do, their times cannot be trusted, and a note says so."""

from __future__ import annotations

import numpy as np

from stepscope.trace.links import launch_pairs
from stepscope.trace.model import GPU_ACTIVITY_KINDS, Events

# Where most of a device's linked activities start before their launch, the device clock is taken as offset.
OFFSET_SHARE = 0.5


def device_clock_aligned(events: Events, strings: tuple[str, ...], notes: list[str]) -> Events:
    """The table with each offset device's activities moved to start no earlier than their launches,
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
        notes.append(f"{said}: the device's clock is offset from the host's, so its kernels, copies and memsets are "
                     f"moved {_ms(worst)} later (the least shift that puts every activity after its launch; the GPU's "
                     "busy time, idle gaps and step ends stand on this estimate)")
        if start is events.start:
            start = start.copy()
        # What the launches show to be offset; the device's annotations and sync records stay as written.
        start[events.of_kind(*GPU_ACTIVITY_KINDS) & (events.device == dev)] += worst
    if start is events.start:
        return events
    columns = {name: getattr(events, name) for name in events.__dataclass_fields__}
    columns["start"] = start
    return Events.from_columns(**columns)


def _ms(ns: int) -> str:
    return f"{ns / 1e9:.4g} s" if ns >= 10**9 else f"{ns / 1e6:.4g} ms"
