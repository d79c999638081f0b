"""How fast another machine's host runs host code, against the origin's: from the calibrations `stepscope run`
records on each (calibration.json: the unprofiled cost of one operator of a tiny training step, and of one launch).
A prediction that has no calibration of the target's host keeps the origin's host, and says so."""

from __future__ import annotations

import json
import math
from pathlib import Path

import msgspec

from stepscope.errors import StepscopeError
from stepscope.model.calibration import ProfilerCost

CALIBRATION = "calibration.json"


def read_host(path: str | Path) -> ProfilerCost:
    """A machine's calibration: a calibration.json, or a run folder holding one."""
    path = Path(path)
    file = path / CALIBRATION if path.is_dir() else path
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        hint = "give a `stepscope run` folder from the target machine, or its calibration.json"
        raise StepscopeError(f"{file}: not a calibration stepscope can read ({exc})", hint=hint) from None
    if not isinstance(data, dict) or not data.get("plain_op_ns"):
        raise StepscopeError(f"{file}: no host speed in it (plain_op_ns)",
                             hint="calibrations are written by `stepscope run` on the target machine")
    try:
        return msgspec.convert(data, ProfilerCost)
    except msgspec.ValidationError as exc:
        raise StepscopeError(f"{file}: not a calibration stepscope can read ({exc})",
                             hint="calibrations are written by `stepscope run` on the target machine") from None


def host_speed(origin: ProfilerCost | None, target: ProfilerCost | None) -> tuple[float | None, str]:
    """The target host's speed over the origin's (>1: faster), and how it was taken; None when it cannot be."""
    if target is None:
        return None, "the host's timeline as measured on the origin"
    if origin is None:
        return None, "the origin has no calibration of its host (a trace read from a file): its host is kept"
    if not origin.loop or origin.loop != target.loop:
        return None, ("the two calibrations were measured by different loops (stepscope versions): the origin's host "
                      "is kept")
    pairs = ((origin.plain_op_ns, target.plain_op_ns), (origin.plain_launch_ns, target.plain_launch_ns))
    ratios = [a / b for a, b in pairs if a and b]
    if not ratios:
        return None, "the calibrations hold no host speed: the origin's host is kept"
    speed = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    return speed, (f"the target's host runs host code {speed:.2f}x as fast as the origin's (their calibrations: "
                   f"{target.plain_op_ns:.0f} against {origin.plain_op_ns:.0f} ns per operator)")
