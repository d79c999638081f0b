"""Compare two reports (before and after a change): the figures of a `stepscope.diff/1` Diff."""

from __future__ import annotations

from stepscope.model.diff import (
    CategoryDelta,
    Diff,
    DiffSide,
    KernelChange,
    LineChange,
    PatternChange,
)
from stepscope.model.report import Report
from stepscope.version import __version__

TOP_CHANGES = 10


def compare(before: Report, after: Report) -> Diff:
    """Step time and throughput ratios, the breakdown side by side, and what changed in patterns,
    kernels and source lines."""
    b, a = before.summary, after.summary
    ratio = a.step_time_us / b.step_time_us if a.step_time_us and b.step_time_us else None
    unit = "samples/s" if a.samples_per_s and b.samples_per_s else "steps/s"
    tp_b, tp_a = (b.samples_per_s, a.samples_per_s) if unit == "samples/s" else (b.steps_per_s, a.steps_per_s)
    cats = list(dict.fromkeys([*b.breakdown_us, *a.breakdown_us]))
    appeared, gone, kept = _patterns(before, after)
    k_appeared, k_gone, k_changed, complete = _kernels(before, after)
    notes = []
    if before.device and after.device and before.device.name != after.device.name:
        notes.append(f"the runs are on different devices: {before.device.name} and {after.device.name}")
    return Diff(
        generator=f"stepscope {__version__}",
        before=_side(before),
        after=_side(after),
        step_time_ratio=_round(ratio),
        speedup=_round(1 / ratio) if ratio else None,
        throughput_ratio=_round(tp_a / tp_b) if tp_a and tp_b else None,
        throughput_unit=unit,
        breakdown=[CategoryDelta(category=c, before_us=b.breakdown_us.get(c, 0.0), after_us=a.breakdown_us.get(c, 0.0),
                                 delta_us=round(a.breakdown_us.get(c, 0.0) - b.breakdown_us.get(c, 0.0), 3))
                   for c in cats],
        patterns_appeared=appeared,
        patterns_gone=gone,
        patterns_kept=kept,
        kernels_appeared=k_appeared,
        kernels_disappeared=k_gone,
        kernels_changed=k_changed,
        kernel_lists_complete=complete,
        lines_changed=_lines(before, after),
        notes=notes,
    )


def slower_by(diff: Diff) -> float | None:
    """How much slower AFTER's step is, in percent (negative when faster); None without step times."""
    return None if diff.step_time_ratio is None else (diff.step_time_ratio - 1) * 100


def _side(r: Report) -> DiffSide:
    s = r.summary
    return DiffSide(paths=list(r.source.paths), format=r.source.format, device=r.device.name if r.device else None,
                    step_count=s.step_count, step_time_us=s.step_time_us, steps_per_s=s.steps_per_s,
                    samples_per_s=s.samples_per_s, gpu_utilization=s.gpu_utilization,
                    primary_pattern=r.patterns[0].id if r.patterns else None, **_usage(r))


def _usage(r: Report) -> dict[str, float | int | None]:
    """MFU, model FLOPs and the memory peaks of a side, when its report has them."""
    u = getattr(r, "utilization", None)
    peaks = list(getattr(r, "memory", None) or [])
    reserved = [m.peak_reserved_bytes for m in peaks if m.peak_reserved_bytes is not None]
    return {"mfu": u.mfu if u else None, "model_flops_per_step": u.model_flops_per_step if u else None,
            "peak_allocated_bytes": max((m.peak_allocated_bytes for m in peaks), default=None),
            "peak_reserved_bytes": max(reserved, default=None)}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _patterns(before: Report, after: Report) -> tuple[list[PatternChange], ...]:
    b = {p.id: p.share for p in before.patterns}
    a = {p.id: p.share for p in after.patterns}
    appeared = [PatternChange(id=i, before_share=None, after_share=a[i]) for i in a if i not in b]
    gone = [PatternChange(id=i, before_share=b[i], after_share=None) for i in b if i not in a]
    kept = [PatternChange(id=i, before_share=b[i], after_share=a[i]) for i in b if i in a]
    return appeared, gone, kept


def _per_step(r: Report) -> dict[str, float]:
    n = max(r.summary.step_count, 1)
    return {k.name: round(k.total_us / n, 3) for k in r.kernels.top} if r.kernels else {}


def _kernels(before: Report, after: Report) -> tuple[list[KernelChange], list[KernelChange], list[KernelChange], bool]:
    b, a = _per_step(before), _per_step(after)

    def change(name: str) -> KernelChange:
        x, y = b.get(name), a.get(name)
        return KernelChange(name=name, before_us_per_step=x, after_us_per_step=y,
                            delta_us_per_step=round((y or 0.0) - (x or 0.0), 3))

    appeared = sorted((change(n) for n in a if n not in b), key=lambda k: -k.delta_us_per_step)
    gone = sorted((change(n) for n in b if n not in a), key=lambda k: k.delta_us_per_step)
    both = sorted((change(n) for n in b if n in a), key=lambda k: -abs(k.delta_us_per_step))
    complete = all(r.kernels is None or len(r.kernels.top) >= r.kernels.distinct for r in (before, after))
    return appeared[:TOP_CHANGES], gone[:TOP_CHANGES], [k for k in both if k.delta_us_per_step][:TOP_CHANGES], complete


def _line_times(report: Report) -> dict[tuple[str, int], tuple[str, str, float]]:
    """(file, line) -> (function, code, µs per step) from the report's lines section; a line's time is the
    larger of its CPU and GPU time, as the section's `share` is."""
    result: dict[tuple[str, int], tuple[str, str, float]] = {}
    for row in getattr(getattr(report, "lines", None), "rows", None) or []:
        if row.file is None or row.line is None:
            continue
        cpu = getattr(row, "cpu_fwd_us", 0.0) + getattr(row, "cpu_bwd_us", 0.0)
        gpu = getattr(row, "gpu_fwd_us", 0.0) + getattr(row, "gpu_bwd_us", 0.0)
        result[(row.file, row.line)] = (getattr(row, "function", ""), getattr(row, "code", ""), max(cpu, gpu))
    return result


def _lines(before: Report, after: Report) -> list[LineChange]:
    b, a = _line_times(before), _line_times(after)
    if not b and not a:
        return []
    changes = [
        LineChange(file=key[0], line=key[1], function=(a.get(key) or b[key])[0], code=(a.get(key) or b[key])[1],
                   before_us=b[key][2] if key in b else None, after_us=a[key][2] if key in a else None,
                   delta_us=round((a[key][2] if key in a else 0.0) - (b[key][2] if key in b else 0.0), 3))
        for key in sorted(set(b) | set(a))
    ]
    changes.sort(key=lambda c: -abs(c.delta_us))
    return [c for c in changes if c.delta_us][:TOP_CHANGES]
