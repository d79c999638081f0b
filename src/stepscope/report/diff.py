"""The diff of two runs (`stepscope.diff/1`) rendered in the terminal; its HTML page is in `report.pages`. The
figures in a Diff are computed by `stepscope.compare.compare`; this module only selects and formats them: the speed-up
it leads with (the throughput ratio), what changed in the configuration, then the breakdown, kernels and lines, per
sample when the batch changed."""

from __future__ import annotations

import math

from rich.console import Group, RenderableType
from rich.text import Text

from stepscope import stats
from stepscope.model.diff import Diff
from stepscope.report.fit import table
from stepscope.report.meter_table import LABELS as PHASE_LABELS
from stepscope.report.palette import BREAKDOWN_LABELS
from stepscope.report.tables import Cell, Table, kernel_cell
from stepscope.units import bytes_cell, share_cell, us_cell

ORDER = {c: i for i, c in enumerate(BREAKDOWN_LABELS)}  # the breakdown's priority order, as the report draws it


def _signed(us: float | None) -> str:
    if us is None:
        return "-"
    return f"+{us_cell(us)}" if us > 0 else (us_cell(us) if us else "0")


def _delta(us: float | None) -> Cell:
    """A change of time: red when it grew, green when it shrank."""
    return Cell(_signed(us), us, "up" if us and us > 0 else "down" if us and us < 0 else "")


def _change(ratio: float | None) -> str:
    return "" if ratio is None else f"{(ratio - 1) * 100:+.1f}%"


def verdict(diff: Diff) -> str:
    """The one figure the diff leads with: the throughput ratio (samples/s when both runs know their batch), the
    step-time speed-up without one; judged against the runs' noise (Diff.verdict)."""
    x = diff.headline_speedup
    if diff.mismatch:
        return f"Not comparable: {diff.mismatch}"
    if not x:
        return "No step time to compare"
    basis = f" ({diff.headline_basis})" if diff.headline_basis else ""
    per = " per sample" if diff.per_sample else ""
    figure = f"{x if x >= 1 else 1 / x:.2f}x {'faster' if x >= 1 else 'slower'}"
    if abs(x - 1) < 0.005:
        return f"No change{per}{basis}"
    if diff.verdict == "within_noise":
        return f"No change beyond noise{per}{basis}: {figure}, within the runs' ±{noise_band(diff):.1%}"
    if diff.verdict == "inconclusive":
        return f"{figure}{per}{basis}, inconclusive: too few steps to know the runs' noise"
    return f"{figure}{per}{basis}, beyond the runs' ±{noise_band(diff):.1%} noise"


def noise_band(diff: Diff) -> float:
    """The largest change the runs' noise can make to the headline, relative (stats.Z x the combined noise)."""
    return math.exp(stats.Z * (diff.noise or 0.0)) - 1


def headline(diff: Diff) -> list[str]:
    """The figures under the verdict: throughput, step time (and what a step holds when the batch changed), GPU
    utilisation, MFU, peak memory."""
    b, a = diff.before, diff.after
    lines = []
    if diff.throughput_ratio:
        unit = diff.throughput_unit
        tb = b.samples_per_s if unit == "samples/s" else b.steps_per_s
        ta = a.samples_per_s if unit == "samples/s" else a.steps_per_s
        lines.append(f"{unit} {tb:,.1f} -> {ta:,.1f} ({diff.throughput_ratio:.2f}x)")
    change = _change(diff.step_time_ratio)
    step = f"step time {us_cell(b.step_time_us)} -> {us_cell(a.step_time_us)}" + (f" ({change})" if change else "")
    if diff.per_sample:
        step += f": a step holds {b.batch_size} -> {a.batch_size} samples, so the time per sample is what compares"
    lines.append(step)
    if b.gpu_utilization is not None or a.gpu_utilization is not None:
        lines.append(f"GPU utilisation {share_cell(b.gpu_utilization)} -> {share_cell(a.gpu_utilization)}")
    if b.mfu is not None or a.mfu is not None:
        lines.append(f"MFU {share_cell(b.mfu, 1)} -> {share_cell(a.mfu, 1)}")
    if b.peak_allocated_bytes is not None or a.peak_allocated_bytes is not None:
        lines.append(f"peak memory allocated {bytes_cell(b.peak_allocated_bytes)} -> "
                     f"{bytes_cell(a.peak_allocated_bytes)} (reserved {bytes_cell(b.peak_reserved_bytes)} -> "
                     f"{bytes_cell(a.peak_reserved_bytes)})")
    return lines


def config_lines(diff: Diff) -> list[str]:
    """What changed in the configuration, as the reports record it (a value not recorded reads 'not known')."""
    if diff.config_changes:
        return [f"{c.name}: {c.before or 'not known'} -> {c.after or 'not known'}" for c in diff.config_changes]
    recorded = sorted(set(diff.before.config) & set(diff.after.config))
    if not recorded:
        return []
    if set(recorded) <= {"device", "batch (samples per step)"}:
        return [f"neither {' nor '.join(recorded)} changed; the reports record no more (DataLoader workers, dtype "
                "and compile are recorded by `stepscope run`)"]
    return [f"none of the recorded settings changed ({', '.join(recorded)}): the difference is elsewhere (code, "
            "data, machine load)"]


def pattern_lines(diff: Diff) -> list[tuple[str, str]]:
    """(text, how it moved: 'down' went away, 'up' appeared, '' stayed)."""
    return ([(f"{p.id.replace('_', ' ')} went away (was {share_cell(p.before_share)})", "down")
             for p in diff.patterns_gone]
            + [(f"{p.id.replace('_', ' ')} appeared ({share_cell(p.after_share)})", "up")
               for p in diff.patterns_appeared]
            + [(f"{p.id.replace('_', ' ')}: {share_cell(p.before_share)} -> {share_cell(p.after_share)}", "")
               for p in diff.patterns_kept])


def diff_tables(diff: Diff) -> list[Table]:
    """The breakdown, the kernels by name and the lines, before and after: per sample when the batch changed."""
    per = "per sample" if diff.per_sample else "per step"
    sample = diff.per_sample

    def pair(step: tuple[float | None, ...], per_sample: tuple[float | None, ...]) -> list[Cell]:
        before, after, delta = per_sample if sample else step
        return [Cell(us_cell(before), before), Cell(us_cell(after), after), _delta(delta)]

    tables = [Table(
        [("category", "text"), ("before", ""), ("after", ""), ("delta", "")],
        [[Cell(BREAKDOWN_LABELS.get(c.category, c.category), None, "text"),
          *pair((c.before_us, c.after_us, c.delta_us),
                (c.before_us_per_sample, c.after_us_per_sample, c.delta_us_per_sample))]
         for c in sorted(diff.breakdown, key=lambda c: ORDER.get(c.category, len(ORDER)))
         if c.before_us or c.after_us],
        title=f"Step-time breakdown ({per})", id="diff-breakdown")]
    if diff.phases:
        tables.insert(0, Table(
            [("phase", "text"), ("before", ""), ("after", ""), ("delta", "")],
            [[Cell(PHASE_LABELS.get(c.category, c.category), None, "text"),
              *pair((c.before_us, c.after_us, c.delta_us),
                    (c.before_us_per_sample, c.after_us_per_sample, c.delta_us_per_sample))]
             for c in diff.phases if c.before_us or c.after_us],
            title=f"The step, measured unprofiled (step meter, {per})", id="diff-phases"))
    if diff.kernel_groups:
        scope = ("" if diff.kernel_lists_complete
                 else " Each run lists only its top kernels: new and gone mean in that list.")
        tables.append(Table(
            [("kernel", "text name"), ("kernels", ""), ("before", ""), ("after", ""), ("delta", ""), ("", "text")],
            [[kernel_cell(g.name), Cell(str(g.kernels), g.kernels),
              *pair((g.before_us_per_step, g.after_us_per_step, g.delta_us_per_step),
                    (g.before_us_per_sample, g.after_us_per_sample, g.delta_us_per_sample)),
              Cell("new" if g.before_us_per_step is None else "gone" if g.after_us_per_step is None else "", None,
                   "text")] for g in diff.kernel_groups],
            title=f"Kernels whose time changed most ({per})", id="diff-kernels",
            note="Kernels that differ only in their C++ template arguments are one row (`kernels`: how many)." + scope))
    if diff.lines_changed:
        tables.append(Table(
            [("line", "text mono"), ("code", "text mono"), ("before", ""), ("after", ""), ("delta", "")],
            [[Cell(f"{r.file}:{r.line}", None, "text mono"), Cell(r.code or r.function, None, "text mono"),
              *pair((r.before_us, r.after_us, r.delta_us),
                    (r.before_us_per_sample, r.after_us_per_sample, r.delta_us_per_sample))]
             for r in diff.lines_changed],
            title=f"Lines whose time changed most ({per})", id="diff-lines"))
    return tables


class DiffTerminalRenderer:
    """Diff -> a rich renderable."""

    def render(self, diff: Diff) -> RenderableType:
        good = bool(diff.headline_speedup and diff.headline_speedup >= 1)
        style = ("bold" if not diff.headline_speedup or diff.verdict == "within_noise"
                 else "bold green" if good else "bold red")
        parts: list[RenderableType] = [
            Text(f"before: {', '.join(diff.before.paths[:3])}\nafter:  {', '.join(diff.after.paths[:3])}",
                 style="dim"),
            Text(verdict(diff), style=style),
            Text("\n".join(headline(diff))),
        ]
        if changes := config_lines(diff):
            parts.append(Text("What changed\n", style="bold") + Text("\n".join(f"  {c}" for c in changes)))
        if patterns := pattern_lines(diff):
            text = Text("Patterns\n", style="bold")
            for line, how in patterns:
                text.append(f"  {line}\n", style={"down": "green", "up": "red"}.get(how, ""))
            parts.append(text)
        parts += [table(t) for t in diff_tables(diff)]
        parts += [Text(f"note: {n}", style="dim") for n in diff.notes]
        return Group(*parts)
