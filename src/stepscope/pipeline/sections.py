"""The Report's parts from the Facts: plain conversions (ns to the Report's µs, shares rounded), each a value the
assembly takes; none builds or changes a Report."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import numpy as np

from stepscope.analysis.facts import Facts
from stepscope.analysis.kernels import SHORT_KERNEL_NS
from stepscope.analysis.time_by_line import Cost, location_for_sync
from stepscope.model import report as s
from stepscope.pipeline.fit_lines import FITTED, phase_fit
from stepscope.trace.model import Trace, distinct
from stepscope.units import report_us


def _round(x: float | np.number) -> float:
    return round(float(x), 4)


def step_rows(facts: Facts) -> list[s.StepRow]:
    steps = facts.steps
    n = len(steps)
    per_step_util = facts.gpu.utilization_per_step(steps)
    sync_count = facts.syncs.count_per_step(n)
    sync_time = facts.syncs.time_per_step(n)
    return [
        s.StepRow(
            id=steps.ids[i],
            duration_us=report_us(steps.duration[i]),
            breakdown_us={c: report_us(facts.breakdown.per_step[i, j])
                          for j, c in enumerate(facts.breakdown.categories)},
            gpu_utilization=_round(per_step_util[i]) if per_step_util is not None else None,
            kernel_count=int(facts.kernels.count_per_step[i]),
            sync_count=int(sync_count[i]),
            sync_us=report_us(sync_time[i]),
            htod_bytes=int(facts.copies.htod_bytes_per_step[i]),
        )
        for i in range(n)
    ]


def summary(facts: Facts, batch_size: int | None) -> s.Summary:
    steps = facts.steps
    n = len(steps)
    step_time = float(steps.duration.mean()) if n else None
    util = facts.gpu.utilization(steps)
    steps_per_s = 1e9 / step_time if step_time else None
    return s.Summary(
        step_time_us=report_us(step_time) if step_time is not None else None,
        breakdown_us={k: report_us(v) for k, v in facts.breakdown.mean().items()},
        gpu_utilization=_round(util) if util is not None else None,
        samples_per_s=round(steps_per_s * batch_size, 2) if steps_per_s and batch_size else None,
        steps_per_s=round(steps_per_s, 3) if steps_per_s else None,
        step_count=n,
        step_source=steps.source,
        dropped_steps=list(steps.dropped),
    )


def devices(trace: Trace) -> list[s.Device]:
    meta = trace.meta
    if trace.platform == "cpu":
        return [s.Device(name="CPU", kind="cpu")]
    used = set(distinct(trace.events.device[trace.is_gpu_activity]).tolist())
    described = [d for d in meta.devices if d.id in used] or list(meta.devices)
    if not described:
        return [s.Device(name="unknown GPU (the trace has no device properties)", kind=meta.accelerator,
                         count=max(len(used), 1))]
    return [
        s.Device(name=d.name, kind=d.kind, id=d.id, compute_capability=d.compute_capability,
                 total_memory_bytes=d.total_memory_bytes, sm_count=d.sm_count)
        for d in described
    ]


def gpu(facts: Facts) -> s.Gpu | None:
    if facts.gpu.primary is None:
        return None
    n = max(len(facts.steps), 1)
    return s.Gpu(devices=[
        s.DeviceIdle(
            device=d.device,
            utilization=_round(d.share(facts.steps)),
            busy_us_per_step=report_us(d.busy.sum() / n),
            idle_us_per_step={"host_wait": report_us(d.host_wait.sum() / n),
                              "kernel_wait": report_us(d.kernel_wait.sum() / n),
                              "other": report_us(d.other_idle.sum() / n)},
        )
        for d in facts.gpu.devices
    ])


def kernels(facts: Facts) -> s.Kernels | None:
    k = facts.kernels
    if k.count == 0:
        return None
    n = max(len(facts.steps), 1)
    delay = k.launch_delay_ns
    return s.Kernels(
        count=k.count,
        count_per_step=round(k.count / n, 1),
        distinct=k.distinct,
        time_us_per_step=report_us(k.total_ns / n),
        tensor_core_share=_round(k.tensor_core_share) if k.tensor_core_share is not None else None,
        short_kernel_share=_round(k.short_share) if k.short_share is not None else None,
        short_kernel_threshold_us=SHORT_KERNEL_NS / 1000,
        launch_delay_us={
            "mean": report_us(delay.mean()), "p50": report_us(np.percentile(delay, 50)),
            "p90": report_us(np.percentile(delay, 90)), "max": report_us(delay.max()),
        } if len(delay) else None,
        top=[s.KernelRow(name=t.name, count=t.count, total_us=report_us(t.total_ns), mean_us=report_us(t.mean_ns),
                         share=_round(t.share), tensor_core=t.tensor_core, collective=t.collective) for t in k.top],
    )


def syncs(facts: Facts) -> s.Syncs | None:
    sy = facts.syncs
    n = len(facts.steps)
    if not sy.apis or n == 0:
        return None
    return s.Syncs(
        count_per_step=round(float(sy.count_per_step(n).mean()), 2),
        time_us_per_step=report_us(sy.time_per_step(n).mean()),
        apis=[s.SyncApi(api=a.api, count_per_step=round(float(a.count_per_step.mean()), 2),
                        time_us_per_step=report_us(a.time_per_step.mean())) for a in sy.apis],
        causes=[s.SyncCause(op=c.op, inner_op=c.inner_op, api=c.api, count=c.count, total_us=report_us(c.total_ns),
                            location=location_for_sync(facts.trace, c))
                for c in sy.causes],
    )


def copies(facts: Facts) -> s.Copies | None:
    c = facts.copies
    if not c.directions or len(facts.steps) == 0:
        return None
    return s.Copies(
        directions=[
            s.CopyRow(direction=d.direction, count=d.count, bytes=d.bytes, total_us=report_us(d.total_ns),
                      bandwidth_gb_s=round(d.bandwidth_gb_s, 3) if d.bandwidth_gb_s is not None else None,
                      pageable_count=d.pageable_count, pageable_bytes=d.pageable_bytes,
                      pinned_count=d.pinned_count, pinned_bytes=d.pinned_bytes)
            for d in c.directions
        ],
        htod_bytes_per_step=float(c.htod_bytes_per_step.mean()),
        pageable_htod_bytes_per_step=float(c.pageable_htod_bytes_per_step.mean()),
        count_per_step=float(c.count_per_step.mean()),
    )


def memory(facts: Facts) -> list[s.MemoryRow]:
    return [s.MemoryRow(device=m.device, peak_allocated_bytes=m.peak_allocated_bytes,
                        peak_reserved_bytes=m.peak_reserved_bytes) for m in facts.memory]


def _line_cost(cost: Cost, n: int, step_ns: int, **where: object) -> s.LineCost:
    return s.LineCost(
        cpu_fwd_us=report_us(cost.cpu_fwd_ns / n), cpu_bwd_us=report_us(cost.cpu_bwd_ns / n),
        gpu_fwd_us=report_us(cost.gpu_fwd_ns / n), gpu_bwd_us=report_us(cost.gpu_bwd_ns / n),
        kernels=round(cost.kernels / n, 2), share=_round(max(cost.cpu_ns, cost.gpu_ns) / max(step_ns, 1)),
        **where,  # type: ignore[arg-type]
    )


def lines(facts: Facts, meter: s.Meter | None = None) -> s.Lines | None:
    """Time by user line per step; with the step `meter`, the host times fitted inside its phases (fit_lines.py)
    and the shares of its step."""
    summary = facts.lines
    if summary is None:
        return None
    n = summary.steps
    cost, total, fitted = _fitting(facts, meter, n, summary.step_ns)
    return s.Lines(
        source=summary.source,
        granularity=summary.granularity,
        attributed_share=_round(summary.attributed_cpu_share),
        rows=[_line_cost(cost(c.cost), n, total, file=c.line.file, line=c.line.line, function=c.line.function,
                         code=c.line.code, label=c.line.label) for c in summary.lines],
        unattributed=[_line_cost(cost(u.cost), n, total, file=None, line=None, label=f"{u.reason}: {u.what}")
                      for u in summary.unattributed],
        syncs=[s.LineSync(file=y.line.file if y.line else None, line=y.line.line if y.line else None,
                          code=y.line.code if y.line else "", op=y.op, via=y.via,
                          count_per_step=round(y.count / n, 2), time_us_per_step=report_us(y.total_ns / n))
               for y in summary.syncs],
        fitted=fitted,
    )


def _fitting(facts: Facts, meter: s.Meter | None, steps: int,
             step_ns: int) -> tuple[Callable[[Cost], Cost], int, str]:
    """How the lines' and modules' costs are given: each cost fitted inside the meter's phases (factors from every
    anchor's time: the lines' and the unattributed groups'; modules are the same anchors grouped otherwise), the
    total step time their shares are of (the meter's steps), and Lines/Modules.fitted; as recorded without it."""
    found = facts.lines
    fit = phase_fit([*(c.cost for c in found.lines), *(u.cost for u in found.unattributed)], found.steps,
                    meter) if found is not None else None
    if fit is None or meter is None:
        return (lambda c: c), step_ns, ""
    return fit.apply, round(meter.step_us * 1e3 * steps), FITTED


def modules(facts: Facts, meter: s.Meter | None = None) -> s.Modules | None:
    """Time by module per step; with the step `meter`, fitted as the lines are (the same factors: every anchor's
    time is in the lines' and the unattributed groups')."""
    summary = facts.modules
    if summary is None:
        return None
    n = summary.steps
    cost, total, fitted = _fitting(facts, meter, n, summary.step_ns)
    rows = []
    for m in summary.modules:
        whole, own = cost(m.total), cost(m.own)
        rows.append(s.ModuleCost(
            path=m.path, calls=round(m.calls / n, 2),
            cpu_fwd_us=report_us(whole.cpu_fwd_ns / n), cpu_bwd_us=report_us(whole.cpu_bwd_ns / n),
            gpu_fwd_us=report_us(whole.gpu_fwd_ns / n), gpu_bwd_us=report_us(whole.gpu_bwd_ns / n),
            kernels=round(whole.kernels / n, 2), own_cpu_us=report_us(own.cpu_ns / n),
            own_gpu_us=report_us(own.gpu_ns / n),
            share=_round(max(whole.cpu_ns, whole.gpu_ns) / max(total, 1)),
        ))
    return s.Modules(source=summary.source, rows=rows, fitted=fitted)


def timeline(facts: Facts) -> s.Timeline | None:
    """The median step's events, compact enough to travel in report.json and redraw without the trace."""
    found = facts.timeline
    return None if found is None else msgspec.convert(found, s.Timeline, from_attributes=True)
