"""What the report says of the profiler's cost, all from the one correction (replay/deperturb.py's Deperturbed): the
`replay` section (how the timeline was made), the run's `overhead_correction` (the overhead measured, and what the
replay took out of it) and the note. One figure of the overhead: the recorded median step over the unprofiled one."""

from __future__ import annotations

from stepscope.model import report as s
from stepscope.replay.deperturb import CALIBRATED, Deperturbed
from stepscope.units import ns_text, report_us


def replay_section(dep: Deperturbed, timeline_path: str) -> s.Replay:
    def us(ns: float | None) -> float | None:
        return round(ns / 1e3, 3) if ns is not None else None

    cost = {}
    if dep.replayed and dep.cost is not None:
        cost = {k: round(v, 1) for k, v in (("op", dep.cost.op_ns), ("launch", dep.cost.launch_ns),
                                             ("alloc", dep.cost.alloc_ns), ("range", dep.cost.range_ns))}
    return s.Replay(replayed=dep.replayed, why_not=dep.why_not, timeline_trace=timeline_path,
                    recorded_step_us=us(dep.recorded_step_ns), replayed_step_us=us(dep.replayed_step_ns),
                    unprofiled_step_us=us(dep.unprofiled_step_ns),
                    error=round(dep.error, 4) if dep.error is not None else None, trusted=dep.trusted,
                    removed_us_per_step=us(dep.removed_ns_per_step) if dep.replayed else None,
                    profiler_cost_ns=cost, cost_source=dep.source)


def overhead_correction(dep: Deperturbed) -> s.OverheadCorrection | None:
    """The overhead against the run's unprofiled steps and what the replay took out; None without a reference."""
    if not dep.recorded_step_ns or not dep.unprofiled_step_ns:
        return None
    overhead = dep.overhead
    removed = dep.removed_ns_per_step if dep.replayed else 0.0
    return s.OverheadCorrection(
        profiled_step_us=report_us(dep.recorded_step_ns), unprofiled_step_us=report_us(dep.unprofiled_step_ns),
        overhead=round(overhead, 4) if overhead is not None else None, noise=round(dep.noise, 4),
        within_noise=overhead is not None and abs(overhead) <= dep.noise, applied=dep.replayed,
        host_work_us_per_step=report_us(dep.host_work_ns), removed_us_per_step=report_us(removed),
        removed_share_of_host_work=round(removed / dep.host_work_ns, 4) if dep.host_work_ns > 0 else 0.0)


def replay_notes(replay: s.Replay | None) -> list[str]:
    """What the report says of its timeline: the replay's error against the unprofiled step, or why there is none."""
    if replay is None:
        return []
    if not replay.replayed:
        return [f"timeline as recorded, with the profiler's cost in it: {replay.why_not}"]
    recorded = replay.recorded_step_us or 0
    unprofiled = replay.unprofiled_step_us or 0
    overhead = f" (profiler overhead {recorded / unprofiled - 1:+.0%})" if unprofiled else ""
    if replay.cost_source == CALIBRATED:
        sized = "its cost per event as calibrated on this machine"
    else:
        cost = replay.profiler_cost_ns
        sized = (f"no calibration: its default cost per event sized to the gap between the recorded and the unprofiled "
                 f"steps ({cost.get('op', 0):.0f} ns an op, {cost.get('launch', 0):.0f} ns a runtime call, "
                 f"{cost.get('range', 0):.0f} ns a range), so its error is the fit's, not a check")
    text = (f"replay: {ns_text((replay.replayed_step_us or 0) * 1e3)} per step against {ns_text(unprofiled * 1e3)} "
            f"measured unprofiled ({(replay.error or 0):+.1%}); as recorded {ns_text(recorded * 1e3)}{overhead}: the "
            f"profiler's cost ({ns_text((replay.removed_us_per_step or 0) * 1e3)} per step; {sized}) is taken out of "
            "the steps, the breakdown, the GPU's use, the verdict and the estimates")
    if replay.phases:
        text += "; against the step meter per phase: " + ", ".join(
            f"{name} {ns_text((p['replayed'] or 0) * 1e3)} replayed / {ns_text((p['measured'] or 0) * 1e3)} measured"
            + (f" ({p['error']:+.0%})" if p["error"] is not None else "") for name, p in replay.phases.items())
    if not replay.trusted:
        text += (f"; the replay is {abs(replay.error or 0):.0%} from the unprofiled step, beyond 5%: its shares are "
                 "approximate")
    return [text]
