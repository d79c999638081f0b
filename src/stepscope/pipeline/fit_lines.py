"""The lines' and modules' host time fitted inside the step meter's phases: a profiled op runs slower than the job
does (the profiler's cost per op, several times on a CPU), so a line's raw time could exceed the very phase it ran
in (`opt.step()` 726 µs beside a measured optimizer phase of 184 µs). Each anchor's exclusive time is charged to
the meter phase it ran in (analysis/time_by_line: inside the DataLoader's range, inside the optimizer step's, the
backward pass, the rest of the step), and each phase's anchors, all lines and the unattributed together, are
scaled to fit that phase: never above it, never scaled up. So a line's forward and backward never exceed the phase
they ran in, and the lines add up to no more than the step. Kernel (GPU) times are the device's own, not scaled.
A closure optimizer (`opt.step(closure)`, LBFGS) runs its forward inside the optimizer's range: those anchors are
fitted with the optimizer's part (the meter counts them as forward), so the sum still fits the step, the split less so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from stepscope.analysis.time_by_line import Cost
from stepscope.model.meter import Meter

FITTED = "step meter"  # Lines.fitted / Modules.fitted: what the host times were fitted to


@dataclass(frozen=True)
class PhaseFit:
    """Per part of a line's host time, the factor (at most 1) that fits all anchors of that part into its phase."""

    data: float = 1.0
    optimizer: float = 1.0
    backward: float = 1.0
    rest: float = 1.0

    def apply(self, c: Cost) -> Cost:
        rest = c.cpu_fwd_ns - c.cpu_fwd_data_ns - c.cpu_fwd_optimizer_ns
        data, opt = round(c.cpu_fwd_data_ns * self.data), round(c.cpu_fwd_optimizer_ns * self.optimizer)
        return replace(c, cpu_fwd_ns=data + opt + round(rest * self.rest),
                       cpu_bwd_ns=round(c.cpu_bwd_ns * self.backward), cpu_fwd_data_ns=data, cpu_fwd_optimizer_ns=opt)


def phase_fit(costs: Iterable[Cost], steps: int, meter: Meter | None) -> PhaseFit | None:
    """The factors from every anchor's cost (`costs`: the lines' and the unattributed groups', totals over `steps`)
    and the meter's phases; None without the meter. A phase the meter saw nothing of (0) is pooled with the rest."""
    if meter is None or steps <= 0:
        return None
    parts = {"data": 0, "optimizer": 0, "backward": 0, "rest": 0}
    for c in costs:
        parts["data"] += c.cpu_fwd_data_ns
        parts["optimizer"] += c.cpu_fwd_optimizer_ns
        parts["backward"] += c.cpu_bwd_ns
        parts["rest"] += c.cpu_fwd_ns - c.cpu_fwd_data_ns - c.cpu_fwd_optimizer_ns
    per_step = {k: v / steps for k, v in parts.items()}
    measured = {k: meter.phase_us(k) * 1e3 for k in ("data", "optimizer", "backward")}
    measured["rest"] = sum(meter.phase_us(k) * 1e3 for k in ("forward", "sync", "other"))
    pooled = [k for k in ("data", "optimizer", "backward") if measured[k] <= 0 and per_step[k] > 0]
    for k in pooled:  # the meter did not see this phase apart: its time is in the meter's other
        per_step["rest"] += per_step[k]
    factor = {k: min(1.0, measured[k] / per_step[k]) if per_step[k] > 0 else 1.0 for k in per_step}
    for k in pooled:
        factor[k] = factor["rest"]
    return PhaseFit(**factor)
