"""The one function that turns traces into a Report; the CLI, the API and the callbacks all call it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from stepscope.advice import advise
from stepscope.analysis.facts import Facts, compute_facts
from stepscope.analysis.kernels import SHORT_KERNEL_NS
from stepscope.analysis.time_by_line import Cost, location_for_sync
from stepscope.errors import StepscopeError
from stepscope.model import report as s
from stepscope.pipeline_usage import memory_section, utilization_section
from stepscope.trace.census import read_census
from stepscope.trace.load import read_trace
from stepscope.trace.model import Trace
from stepscope.version import __version__

if TYPE_CHECKING:
    from stepscope.predict import PredictRequest
    from stepscope.ranks.driver import Progress
    from stepscope.ranks.engines import Engine

GENERATOR = f"stepscope {__version__}"


def analyze(
    paths: str | Path | Iterable[str | Path], *, step_range: str | None = None, batch_size: int | None = None,
    predict: PredictRequest | None = None, power_w: float | None = None,
    engine: Engine | None = None, progress: Progress | None = None,
) -> s.Report:
    """Read trace files, rank folders, globs or list files and return the report; several files are the ranks
    of one job (see analyze_files)."""
    from stepscope.ranks.inputs import rank_files

    if isinstance(paths, (str, Path)):
        paths = [paths]
    files = rank_files(paths)
    if len(files) == 1:
        return analyze_file(files[0], step_range=step_range, batch_size=batch_size, predict=predict, power_w=power_w)
    return analyze_files(files, engine=engine, step_range=step_range, batch_size=batch_size, predict=predict,
                         power_w=power_w, progress=progress)


def analyze_file(path: str | Path, *, step_range: str | None = None, batch_size: int | None = None,
                 predict: PredictRequest | None = None, power_w: float | None = None) -> s.Report:
    """One trace file's full report."""
    return analyze_trace(read_trace(path), step_range=step_range, batch_size=batch_size, predict=predict,
                         power_w=power_w)


def analyze_files(
    files: Sequence[str | Path], *, engine: Engine | None = None, step_range: str | None = None,
    batch_size: int | None = None, predict: PredictRequest | None = None, power_w: float | None = None,
    progress: Progress | None = None,
) -> s.Report:
    """The ranks of one job, never all in memory: a small summary per file mapped over `engine` (a local process
    pool by default), reduced into the cross-rank figures; then the full diagnosis of the straggler (else the
    slowest rank) and of the median rank. A file that fails is listed in the report; the others go on. The
    prediction, when asked for, is the main rank's (the report's own)."""
    from stepscope.ranks import driver, reduce, to_report
    from stepscope.ranks.engines import LocalPool

    own = engine is None
    engine = engine or LocalPool()
    try:
        outcome = driver.summarize_files(files, engine, step_range=step_range, progress=progress)
        if not outcome.summaries:
            first = outcome.failures[0]
            raise StepscopeError(f"none of the {len(files)} rank files could be analysed; {first.path}: {first.error}")
        analysis = reduce.cross_rank(outcome.summaries)
        task = partial(_chosen_report, step_range=step_range, batch_size=batch_size, predict=predict,
                       power_w=power_w)
        chosen = to_report.chosen_paths(analysis)
        reports = {}
        for i, report in engine.map(task, [(p, i == 0) for i, p in enumerate(chosen)]):
            if not isinstance(report, s.Report):
                raise StepscopeError(f"{chosen[i]}: the full diagnosis failed ({getattr(report, 'error', report)})")
            reports[chosen[i]] = report
    finally:
        if own:
            engine.close()
    return to_report.assemble(analysis, reports, outcome.failures)


def _chosen_report(job: tuple[str, bool], *, step_range: str | None, batch_size: int | None,
                   predict: PredictRequest | None, power_w: float | None) -> s.Report:
    """A chosen rank's full report (a task on the engine); only the main rank's (`job[1]`) predicts."""
    path, main = job
    return analyze_file(path, step_range=step_range, batch_size=batch_size, predict=predict if main else None,
                        power_w=power_w)


def analyze_traces(
    traces: Sequence[Trace], *, step_range: str | None = None, batch_size: int | None = None,
    predict: PredictRequest | None = None, power_w: float | None = None, run: s.Run | None = None,
) -> s.Report:
    """`run`: a live capture's run section (one trace), which the report carries and the advice reads. Several
    traces are the ranks of one job, analysed in this process (analyze_files maps files over an engine)."""
    if len(traces) == 1:
        return analyze_trace(traces[0], step_range=step_range, batch_size=batch_size, predict=predict,
                             power_w=power_w, run=run)
    from stepscope.ranks import reduce, to_report
    from stepscope.ranks.summarize import collective_args_of, summarize_trace

    summaries = [summarize_trace(t, step_range=step_range, args=collective_args_of(t)) for t in traces]
    analysis = reduce.cross_rank(summaries)
    by_path = {t.meta.path: t for t in traces}
    reports = {p: analyze_trace(by_path[p], step_range=step_range, batch_size=batch_size,
                                predict=predict if i == 0 else None, power_w=power_w, run=run if i == 0 else None)
               for i, p in enumerate(to_report.chosen_paths(analysis))}
    return to_report.assemble(analysis, reports, [])


def analyze_trace(trace: Trace, *, step_range: str | None = None, batch_size: int | None = None,
                  predict: PredictRequest | None = None, power_w: float | None = None,
                  run: s.Run | None = None) -> s.Report:
    """The report of one trace; with `predict`, its `prediction` section too (power_w: the origin GPU's mean
    power from telemetry, for energy per step); `run`: a live capture's run section."""
    return facts_and_report(trace, step_range=step_range, batch_size=batch_size, predict=predict,
                            power_w=power_w, run=run)[1]


def facts_and_report(trace: Trace, *, step_range: str | None = None, batch_size: int | None = None,
                     predict: PredictRequest | None = None, power_w: float | None = None,
                     run: s.Run | None = None) -> tuple[Facts, s.Report]:
    """The report with the facts it was made from, for outputs that read the trace again (--perfetto)."""
    facts = compute_facts(trace, step_range, census=read_census(trace.meta.path))
    report = build_report(facts, batch_size=batch_size, run=run)
    if predict is not None:
        from stepscope.predict import predict as predict_section

        try:
            report.prediction = predict_section(facts, predict, batch_size=batch_size, power_w=power_w,
                                                step_range=step_range)
        except StepscopeError as exc:  # the analysis stands without it; say why there is none
            report.notes.append(f"no prediction: {exc.message}" + (f" ({exc.hint})" if exc.hint else ""))
    return facts, report


def build_report(facts: Facts, *, batch_size: int | None = None, run: s.Run | None = None) -> s.Report:
    trace, steps = facts.trace, facts.steps
    n = len(steps)
    per_step_util = facts.gpu.utilization(steps)
    sync_count = facts.syncs.count_per_step(n)
    sync_time = facts.syncs.time_per_step(n)
    rows = [
        s.StepRow(
            id=steps.ids[i],
            duration_us=_us(steps.duration[i]),
            breakdown_us={c: _us(facts.breakdown.per_step[i, j]) for j, c in enumerate(facts.breakdown.categories)},
            gpu_utilization=_round(per_step_util[i]) if per_step_util is not None else None,
            kernel_count=int(facts.kernels.count_per_step[i]),
            sync_count=int(sync_count[i]),
            sync_us=_us(sync_time[i]),
            htod_bytes=int(facts.copies.htod_bytes_per_step[i]),
        )
        for i in range(n)
    ]
    step_time = float(steps.duration.mean()) if n else None
    total_time = float(steps.duration.sum())
    util = float(facts.gpu.devices[facts.gpu.primary].busy.sum() / total_time) if (
        facts.gpu.primary is not None and total_time > 0) else None
    steps_per_s = 1e9 / step_time if step_time else None
    summary = s.Summary(
        step_time_us=_us(step_time) if step_time is not None else None,
        breakdown_us={k: _us(v) for k, v in facts.breakdown.mean().items()},
        gpu_utilization=_round(util) if util is not None else None,
        samples_per_s=round(steps_per_s * batch_size, 2) if steps_per_s and batch_size else None,
        steps_per_s=round(steps_per_s, 3) if steps_per_s else None,
        step_count=n,
        step_source=steps.source,
        dropped_steps=list(steps.dropped),
    )
    advice = advise(facts, run)
    if run is not None:
        _fill_overhead(run, advice.correction)
        run.energy_per_step = _energy_per_step(run, summary.step_time_us)
    devices = _devices(trace)
    return s.Report(
        generator=GENERATOR,
        source=s.Source(paths=[trace.meta.path], format=trace.meta.format),
        device=devices[0] if devices else None,
        devices=devices,
        accelerator=trace.meta.accelerator,
        rank=trace.meta.rank,
        world_size=trace.meta.world_size,
        steps=rows,
        summary=summary,
        gpu=_gpu(facts),
        kernels=_kernels(facts),
        syncs=_syncs(facts),
        copies=_copies(facts),
        memory=[s.MemoryRow(device=m.device, peak_allocated_bytes=m.peak_allocated_bytes,
                            peak_reserved_bytes=m.peak_reserved_bytes) for m in facts.memory],
        patterns=advice.patterns,
        recommendations=advice.recommendations,
        notes=[*trace.meta.notes, *advice.notes],
        lines=_lines(facts),
        modules=_modules(facts),
        timeline=_timeline(facts),
        utilization=utilization_section(facts),
        memory_usage=memory_section(facts, batch_size),
        run=run,
    )


def _fill_overhead(run: s.Run, correction: s.OverheadCorrection | None) -> None:
    """The run section's overhead figures, like with like: the trace's median step over the reference."""
    run.overhead_correction = correction
    if correction is not None:
        run.recorded_step_us = correction.profiled_step_us
        run.profiler_overhead = correction.overhead


def _energy_per_step(run: s.Run, step_time_us: float | None) -> list[s.StepEnergy]:
    """Each GPU's mean window power x the unprofiled step time (the recorded step, which carries the profiler's
    overhead, when no reference was timed)."""
    step_us, basis = ((run.unprofiled_step_us, "unprofiled step time") if run.unprofiled_step_us
                      else (step_time_us, "step time"))
    if not step_us:
        return []
    return [s.StepEnergy(gpu=int(g["index"]), joules=round(g["power_mean_w"] * step_us / 1e6, 4), basis=basis)
            for g in (run.telemetry or {}).get("gpu") or [] if g.get("power_mean_w") is not None]


def _timeline(facts: Facts) -> s.Timeline | None:
    """The median step's events, compact enough to travel in report.json and redraw without the trace."""
    timeline = facts.timeline
    return None if timeline is None else msgspec.convert(timeline, s.Timeline, from_attributes=True)


def _us(ns: float | np.number) -> float:
    return round(float(ns) / 1000.0, 3)


def _round(x: float | np.number) -> float:
    return round(float(x), 4)


def _devices(trace: Trace) -> list[s.Device]:
    meta = trace.meta
    if trace.platform == "cpu":
        return [s.Device(name="CPU", kind="cpu")]
    used = set(np.unique(trace.events.device[trace.is_gpu_activity]).tolist())
    described = [d for d in meta.devices if d.id in used] or list(meta.devices)
    if not described:
        return [s.Device(name="unknown GPU (the trace has no device properties)", kind=meta.accelerator,
                         count=max(len(used), 1))]
    return [
        s.Device(name=d.name, kind=d.kind, id=d.id, compute_capability=d.compute_capability,
                 total_memory_bytes=d.total_memory_bytes, sm_count=d.sm_count)
        for d in described
    ]


def _gpu(facts: Facts) -> s.Gpu | None:
    if facts.gpu.primary is None:
        return None
    total = max(float(facts.steps.duration.sum()), 1.0)
    n = max(len(facts.steps), 1)
    return s.Gpu(devices=[
        s.DeviceIdle(
            device=d.device,
            utilization=_round(d.busy.sum() / total),
            busy_us_per_step=_us(d.busy.sum() / n),
            idle_us_per_step={"host_wait": _us(d.host_wait.sum() / n), "kernel_wait": _us(d.kernel_wait.sum() / n),
                              "other": _us(d.other_idle.sum() / n)},
        )
        for d in facts.gpu.devices
    ])


def _kernels(facts: Facts) -> s.Kernels | None:
    k = facts.kernels
    if k.count == 0:
        return None
    n = max(len(facts.steps), 1)
    delay = k.launch_delay_ns
    return s.Kernels(
        count=k.count,
        count_per_step=round(k.count / n, 1),
        distinct=k.distinct,
        time_us_per_step=_us(k.total_ns / n),
        tensor_core_share=_round(k.tensor_core_share) if k.tensor_core_share is not None else None,
        short_kernel_share=_round(k.short_share) if k.short_share is not None else None,
        short_kernel_threshold_us=SHORT_KERNEL_NS / 1000,
        launch_delay_us={
            "mean": _us(delay.mean()), "p50": _us(np.percentile(delay, 50)),
            "p90": _us(np.percentile(delay, 90)), "max": _us(delay.max()),
        } if len(delay) else None,
        top=[s.KernelRow(name=t.name, count=t.count, total_us=_us(t.total_ns), mean_us=_us(t.mean_ns),
                         share=_round(t.share), tensor_core=t.tensor_core, collective=t.collective) for t in k.top],
    )


def _syncs(facts: Facts) -> s.Syncs | None:
    sy = facts.syncs
    n = len(facts.steps)
    if not sy.apis or n == 0:
        return None
    return s.Syncs(
        count_per_step=round(float(sy.count_per_step(n).mean()), 2),
        time_us_per_step=_us(sy.time_per_step(n).mean()),
        apis=[s.SyncApi(api=a.api, count_per_step=round(float(a.count_per_step.mean()), 2),
                        time_us_per_step=_us(a.time_per_step.mean())) for a in sy.apis],
        causes=[s.SyncCause(op=c.op, inner_op=c.inner_op, api=c.api, count=c.count, total_us=_us(c.total_ns),
                            location=location_for_sync(facts.trace, c))
                for c in sy.causes],
    )


def _copies(facts: Facts) -> s.Copies | None:
    c = facts.copies
    if not c.directions or len(facts.steps) == 0:
        return None
    return s.Copies(
        directions=[
            s.CopyRow(direction=d.direction, count=d.count, bytes=d.bytes, total_us=_us(d.total_ns),
                      bandwidth_gb_s=round(d.bandwidth_gb_s, 3) if d.bandwidth_gb_s is not None else None,
                      pageable_count=d.pageable_count, pageable_bytes=d.pageable_bytes,
                      pinned_count=d.pinned_count, pinned_bytes=d.pinned_bytes)
            for d in c.directions
        ],
        htod_bytes_per_step=float(c.htod_bytes_per_step.mean()),
        pageable_htod_bytes_per_step=float(c.pageable_htod_bytes_per_step.mean()),
        count_per_step=float(c.count_per_step.mean()),
    )


def _line_cost(cost: Cost, n: int, step_ns: int, **where: object) -> s.LineCost:
    return s.LineCost(
        cpu_fwd_us=_us(cost.cpu_fwd_ns / n), cpu_bwd_us=_us(cost.cpu_bwd_ns / n),
        gpu_fwd_us=_us(cost.gpu_fwd_ns / n), gpu_bwd_us=_us(cost.gpu_bwd_ns / n),
        kernels=round(cost.kernels / n, 2), share=_round(max(cost.cpu_ns, cost.gpu_ns) / max(step_ns, 1)),
        **where,  # type: ignore[arg-type]
    )


def _lines(facts: Facts) -> s.Lines | None:
    summary = facts.lines
    if summary is None:
        return None
    n, total = summary.steps, summary.step_ns
    return s.Lines(
        source=summary.source,
        granularity=summary.granularity,
        attributed_share=_round(summary.attributed_cpu_share),
        rows=[_line_cost(c.cost, n, total, file=c.line.file, line=c.line.line, function=c.line.function,
                         code=c.line.code, label=c.line.label) for c in summary.lines],
        unattributed=[_line_cost(u.cost, n, total, file=None, line=None, label=f"{u.reason}: {u.what}")
                      for u in summary.unattributed],
        syncs=[s.LineSync(file=y.line.file if y.line else None, line=y.line.line if y.line else None,
                          code=y.line.code if y.line else "", op=y.op, via=y.via,
                          count_per_step=round(y.count / n, 2), time_us_per_step=_us(y.total_ns / n))
               for y in summary.syncs],
    )


def _modules(facts: Facts) -> s.Modules | None:
    summary = facts.modules
    if summary is None:
        return None
    n, total = summary.steps, summary.step_ns
    return s.Modules(source=summary.source, rows=[
        s.ModuleCost(
            path=m.path, calls=round(m.calls / n, 2),
            cpu_fwd_us=_us(m.total.cpu_fwd_ns / n), cpu_bwd_us=_us(m.total.cpu_bwd_ns / n),
            gpu_fwd_us=_us(m.total.gpu_fwd_ns / n), gpu_bwd_us=_us(m.total.gpu_bwd_ns / n),
            kernels=round(m.total.kernels / n, 2), own_cpu_us=_us(m.own.cpu_ns / n), own_gpu_us=_us(m.own.gpu_ns / n),
            share=_round(max(m.total.cpu_ns, m.total.gpu_ns) / max(total, 1)),
        )
        for m in summary.modules
    ])
