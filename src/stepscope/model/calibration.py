"""The profiler's host cost per recorded event on the capturing machine (`calibration.json` in a run folder):
capture measures it (capture/calibrate.py), the replay takes it out of a live capture's timeline. A leaf: capture
imports it inside the user's program, and `analyze` reads it without loading capture."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ProfilerCost:
    """The profiler's host cost per recorded event, in ns, measured on the capturing machine; the one type it has
    from capture to the replay (replay/deperturb.host_cost)."""

    op_ns: float
    alloc_ns: float
    launch_ns: float
    range_ns: float
    record_shapes: bool
    profile_memory: bool
    with_stack: bool
    cuda: bool
    seconds: float  # how long the calibration took
    plain_op_ns: float = 0.0  # the host's own speed, unprofiled: one operator of the CPU training step
    plain_launch_ns: float = 0.0  # and one runtime call of the GPU loop, with its operators (0 without CUDA)
    events_per_iteration: dict[str, dict[str, float]] | None = None  # what each loop recorded, per iteration
    loop: str = ""  # LOOP_VERSION of the loops that measured it (empty: before versions were recorded)

    def to_dict(self) -> dict[str, Any]:
        """calibration.json's document, as capture writes it (readers decode the file into this type: the replay,
        predict's host speed and the pipeline take the ProfilerCost itself)."""
        return asdict(self)


MAX_EVENT_NS = 1e9  # a second per recorded event: no profiler costs that much


def calibration_problem(cost: ProfilerCost) -> str | None:
    """Why a calibration read back cannot be a measured cost (every figure a time or a count, none negative),
    None when it can be."""
    figures = {k: v for k, v in cost.to_dict().items() if isinstance(v, float)}
    for loop in (cost.events_per_iteration or {}).values():
        figures.update({f"events_per_iteration {k}": v for k, v in loop.items()})
    for name, value in figures.items():
        if not 0 <= value <= MAX_EVENT_NS:
            return f"{name} is {value}: 0 to {MAX_EVENT_NS:.0e} ns"
    return None
