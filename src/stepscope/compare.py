"""Compare two reports (before and after a change): the figures of a `stepscope.diff/1` Diff."""

from __future__ import annotations

from pathlib import Path

from stepscope import stats
from stepscope.model.diff import (
    CategoryDelta,
    ConfigChange,
    Diff,
    DiffSide,
    KernelChange,
    KernelGroup,
    LineChange,
    PatternChange,
)
from stepscope.model.noise import DiffVerdict, StepNoise
from stepscope.model.report import Report
from stepscope.noise import headline_noise
from stepscope.report.names import short_kernel
from stepscope.version import __version__

TOP_CHANGES = 10
TOP_GROUPS = 12


def compare(before: Report, after: Report) -> Diff:
    """Step time and throughput ratios, the breakdown side by side, and what changed in the configuration,
    patterns, kernels and source lines; per sample when the batch size changed."""
    b, a = before.summary, after.summary
    mismatch = _basis_mismatch(before, after)
    ratio = a.step_time_us / b.step_time_us if a.step_time_us and b.step_time_us and not mismatch else None
    side_b, side_a = _side(before), _side(after)
    unit = "samples/s" if side_a.samples_per_s and side_b.samples_per_s else "steps/s"
    tp_b, tp_a = ((side_b.samples_per_s, side_a.samples_per_s) if unit == "samples/s"
                  else (side_b.steps_per_s, side_a.steps_per_s))
    batches = (side_b.batch_size, side_a.batch_size)
    per_sample = None not in batches and batches[0] != batches[1]
    throughput = _round(tp_a / tp_b) if tp_a and tp_b and not mismatch else None
    cats = list(dict.fromkeys([*b.breakdown_us, *a.breakdown_us]))
    appeared, gone, kept = _patterns(before, after)
    k_appeared, k_gone, k_changed, complete = _kernels(before, after)
    headline = throughput if throughput else _round(1 / ratio) if ratio else None
    noises = (_noise(before), _noise(after))
    judged, noise = _judged(headline, noises)
    notes = []
    if judged == "inconclusive" and headline:
        few = [w for w, n in zip(("BEFORE", "AFTER"), noises, strict=True) if n is None]
        notes.append(f"{' and '.join(few)} {'has' if len(few) == 1 else 'have'} under {stats.MIN_STEPS} steps: no "
                     "noise to judge the change by, so it may be the runs' own variation")
    if before.device and after.device and before.device.name != after.device.name:
        notes.append(f"the runs are on different devices: {before.device.name} and {after.device.name}")
    if per_sample:
        notes.append(f"the batch changed ({batches[0]} -> {batches[1]} samples per step): the speed-up, the breakdown, "
                     "kernels and lines are compared per sample, and so is --fail-if-slower")
    return Diff(
        generator=f"stepscope {__version__}",
        before=side_b,
        after=side_a,
        step_time_ratio=_round(ratio),
        speedup=_round(1 / ratio) if ratio else None,
        throughput_ratio=throughput,
        throughput_unit=unit,
        breakdown=[_category(c, b.breakdown_us.get(c, 0.0), a.breakdown_us.get(c, 0.0), batches) for c in cats],
        patterns_appeared=appeared,
        patterns_gone=gone,
        patterns_kept=kept,
        kernels_appeared=k_appeared,
        kernels_disappeared=k_gone,
        kernels_changed=k_changed,
        kernel_lists_complete=complete,
        lines_changed=_lines(before, after, batches),
        notes=notes,
        config_changes=[ConfigChange(name=k, before=side_b.config.get(k), after=side_a.config.get(k))
                        for k in dict.fromkeys([*side_b.config, *side_a.config])
                        if side_b.config.get(k) != side_a.config.get(k)],
        per_sample=per_sample,
        headline_speedup=headline,
        headline_basis=unit if throughput else "step time" if ratio else "",
        kernel_groups=_kernel_groups(before, after, batches, per_sample),
        phases=_phases(before, after, batches),
        mismatch=mismatch,
        verdict=judged,
        noise=round(noise, 4) if noise is not None else None,
        noise_basis=" / ".join(n.basis for n in noises if n is not None) if noise is not None else "",
    )


def _noise(r: Report) -> StepNoise | None:
    """The report's headline noise; for a report written before reports carried it, from its own steps."""
    if r.summary.noise is not None:
        return r.summary.noise
    return headline_noise(r.run.reference if r.run else None, [s.duration_us for s in r.steps])


def _judged(speedup: float | None,
            noises: tuple[StepNoise | None, StepNoise | None]) -> tuple[DiffVerdict, float | None]:
    """The headline speed-up against both runs' noise: faster | slower | within_noise | inconclusive."""
    if speedup is None or noises[0] is None or noises[1] is None:
        return "inconclusive", None
    noise = stats.combined(noises[0].relative, noises[1].relative)
    found = stats.verdict(1.0, speedup, noise, lower_is_faster=False)
    return found, noise  # type: ignore[return-value]  # stats.verdict's words are DiffVerdict's


def _phases(before: Report, after: Report, batches: tuple[int | None, int | None]) -> list[CategoryDelta]:
    """The step meter's phases side by side, when both runs have the meter."""
    if before.meter is None or after.meter is None:
        return []
    b = {p.name: p.mean_us for p in before.meter.phases}
    a = {p.name: p.mean_us for p in after.meter.phases}
    return [_category(name, b.get(name, 0.0), a.get(name, 0.0), batches) for name in dict.fromkeys([*b, *a])]


def _unprofiled(r: Report) -> bool:
    """Whether the report's headline step was measured without the profiler (a live run's), not as recorded."""
    return r.summary.timeline_step_time_us is not None


def _basis_mismatch(before: Report, after: Report) -> str:
    """Why the two headline step times cannot be compared, or "": a run's is measured without the profiler, a
    trace's as the profiler recorded it, slowed by the profiler's own cost (several times, on a CPU)."""
    if _unprofiled(before) == _unprofiled(after) or not before.summary.step_time_us or not after.summary.step_time_us:
        return ""
    run, trace = (before, after) if _unprofiled(before) else (after, before)
    which = ("BEFORE", "AFTER") if run is before else ("AFTER", "BEFORE")
    folders = {str(Path(p).parent) for p in run.source.paths}
    same = any(str(Path(p).parent) in folders for p in trace.source.paths)
    said = f"{which[1]} is the recorded trace of the run {which[0]}; " if same else ""
    return (f"{said}{which[0]}'s step time was measured without the profiler, {which[1]}'s as the profiler recorded "
            "it, slowed by the profiler's own cost: not like with like, so no speed-up is given (compare two run "
            "folders, or two traces recorded the same way)")


def _per(us: float | None, batch: int | None) -> float | None:
    return None if us is None or not batch else round(us / batch, 3)


def _category(name: str, before: float, after: float, batches: tuple[int | None, int | None]) -> CategoryDelta:
    per_b, per_a = _per(before, batches[0]), _per(after, batches[1])
    return CategoryDelta(category=name, before_us=before, after_us=after, delta_us=round(after - before, 3),
                         before_us_per_sample=per_b, after_us_per_sample=per_a,
                         delta_us_per_sample=round(per_a - per_b, 3) if per_a is not None and per_b is not None
                         else None)


def slower_by(diff: Diff) -> float | None:
    """How much slower AFTER is, in percent (negative when faster): per step, or per sample when the batch changed
    (a bigger batch makes each step longer and the job faster); None without step times."""
    if diff.per_sample and diff.throughput_ratio and diff.throughput_unit == "samples/s":
        return (1 / diff.throughput_ratio - 1) * 100
    return None if diff.step_time_ratio is None else (diff.step_time_ratio - 1) * 100


def _side(r: Report) -> DiffSide:
    """One run's figures; its samples/s from its steps/s and the run's batch when the report has none."""
    s, batch = r.summary, _batch(r)
    samples = s.samples_per_s or (round(s.steps_per_s * batch, 3) if s.steps_per_s and batch else None)
    return DiffSide(paths=list(r.source.paths), format=r.source.format, device=r.device.name if r.device else None,
                    step_count=s.step_count, step_time_us=s.step_time_us, steps_per_s=s.steps_per_s,
                    samples_per_s=samples, gpu_utilization=s.gpu_utilization,
                    primary_pattern=r.patterns[0].id if r.patterns else None, batch_size=batch, config=_config(r),
                    **_usage(r))


def _batch(r: Report) -> int | None:
    """Samples per step: the run's (micro-batch x accumulation), else what samples/s over steps/s says (a trace
    analysed with --batch-size)."""
    run = r.run
    if run is not None and (run.samples_per_step or run.batch_size):
        return run.samples_per_step or run.batch_size
    s = r.summary
    return round(s.samples_per_s / s.steps_per_s) if s.samples_per_s and s.steps_per_s else None


def _yes(x: bool | None) -> str | None:
    return None if x is None else "yes" if x else "no"


def _config(r: Report) -> dict[str, str]:
    """The settings a reader compares, in words, from the run and its settings sections when the report has them."""
    found: dict[str, str | None] = {"device": r.device.name if r.device else None,
                                    "batch (samples per step)": str(b) if (b := _batch(r)) else None}
    run = r.run
    st = run.settings if run is not None else None
    if run is not None and run.grad_accumulation:
        found["gradient accumulation"] = str(run.grad_accumulation)
    if st is not None:
        if st.dataloader is not None:
            found["DataLoader workers"] = str(st.dataloader.num_workers)
            found["pin memory"] = _yes(st.dataloader.pin_memory)
        found["autocast dtype"] = st.autocast
        found["torch.compile"] = _yes(st.compiled)
        found["channels_last"] = _yes(st.channels_last)
        found["TF32 matmuls"] = _yes(st.tf32_matmul)
        if st.optimizer is not None:
            found["optimizer"] = st.optimizer.name + (" (fused)" if st.optimizer.fused else " (foreach)"
                                                      if st.optimizer.foreach else "")
    return {k: v for k, v in found.items() if v is not None}


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


def _kernel_groups(before: Report, after: Report, batches: tuple[int | None, int | None],
                   per_sample: bool) -> list[KernelGroup]:
    """Kernels summed by their name with template arguments and parameters elided (sixty template instances of
    `elementwise_kernel` are one line), the largest change first: per sample when the batch changed."""
    groups: dict[str, list[dict[str, float]]] = {}
    for side, report in enumerate((before, after)):
        for name, us in _per_step(report).items():
            entry = groups.setdefault(short_kernel(name), [{}, {}])
            entry[side][name] = us
    rows = []
    for name, (b, a) in groups.items():
        tb, ta = (round(sum(x.values()), 3) if x else None for x in (b, a))
        pb, pa = _per(tb, batches[0]), _per(ta, batches[1])
        rows.append(KernelGroup(name=name, kernels=len(set(b) | set(a)), before_us_per_step=tb,
                                after_us_per_step=ta, delta_us_per_step=round((ta or 0.0) - (tb or 0.0), 3),
                                before_us_per_sample=pb, after_us_per_sample=pa,
                                delta_us_per_sample=round((pa or 0.0) - (pb or 0.0), 3)
                                if None not in batches else None))
    key = (lambda g: -abs(g.delta_us_per_sample or 0.0)) if per_sample else (lambda g: -abs(g.delta_us_per_step))
    return sorted(rows, key=key)[:TOP_GROUPS]


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


def _lines(before: Report, after: Report,
           batches: tuple[int | None, int | None] = (None, None)) -> list[LineChange]:
    b, a = _line_times(before), _line_times(after)
    if not b and not a:
        return []
    changes = []
    for key in sorted(set(b) | set(a)):
        tb, ta = (b[key][2] if key in b else None), (a[key][2] if key in a else None)
        pb, pa = _per(tb or 0.0, batches[0]), _per(ta or 0.0, batches[1])
        changes.append(LineChange(
            file=key[0], line=key[1], function=(a.get(key) or b[key])[0], code=(a.get(key) or b[key])[1],
            before_us=tb, after_us=ta, delta_us=round((ta or 0.0) - (tb or 0.0), 3),
            before_us_per_sample=pb if tb is not None else None, after_us_per_sample=pa if ta is not None else None,
            delta_us_per_sample=round(pa - pb, 3) if pa is not None and pb is not None else None))
    per_sample = None not in batches and batches[0] != batches[1]
    changes.sort(key=lambda c: -abs((c.delta_us_per_sample or 0.0) if per_sample else c.delta_us))
    return [c for c in changes if c.delta_us or (per_sample and c.delta_us_per_sample)][:TOP_CHANGES]
