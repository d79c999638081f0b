"""`dataloader_workers`: load batches in worker processes while the step computes (`DataLoader(num_workers=N)`).

Tried only where the diagnosis sees the step wait for its data (else workers cost cores and start-up for nothing):
whenever the step meter saw the main thread wait for data when it ran unprofiled, whatever the profiled run showed.
N from the diagnosis: the load time per batch over the compute time per step (both of the timeline's step), plus
one; then twice that; then the core count; at most 4 a core; fewest first, each tried only while the one before
was kept (or none was yet). Where the diagnosis found the workers idle while the loop waits for them (the wait is
handing batches between processes), N = 0: the batches built in the main process.
"""

from __future__ import annotations

import math

from stepscope.model.report import Report
from stepscope.tune.edits import Patchwork, keyword_at, named
from stepscope.tune.fix import Fix, Params, PlanContext
from stepscope.tune.points import Points
from stepscope.tune.points.loader import REFUSED_WITHOUT_WORKERS
from stepscope.tune.wire import Settings

MAX_OPTIONS = 3


def worker_counts(report: Report | None, settings: Settings, cores: int) -> list[int]:
    """Worker counts to try, fewest first: enough to load a batch while a step computes (load time per batch
    over compute time per step, plus one), twice that, and the core count when it is more."""
    current = settings.loaders[0].num_workers if settings.loaders else 0
    if current > 0 and _suggested(report) == 0:  # idle workers the loop waits for: load in the main process
        return [0]
    cap = max(2 * cores, 2)
    if current > 0:
        values = {2 * current, 4 * current}
    else:
        load, compute = _load_and_compute_us(report)
        need = math.ceil(load / compute) + 1 if load and compute else 2
        cap = max(cap, min(need, 4 * cores))  # a loader waiting on storage takes more workers than cores, not 50
        values = {min(need, cap), min(2 * need, cap), min(cores, 4 * need)}
    return sorted(v for v in values if current < v <= cap)[:MAX_OPTIONS]


def _suggested(report: Report | None) -> int | None:
    rec = next((r for r in report.recommendations if r.id == "dataloader_workers"), None) if report else None
    value = rec.evidence.get("suggested_workers") if rec is not None else None
    return value if isinstance(value, int) else None


def _load_and_compute_us(report: Report | None) -> tuple[float, float]:
    """The DataLoader's time per step and the rest of the step, from the diagnosis: the step meter's when it measured
    the job (the unprofiled wait and step), else the timeline's."""
    meter = report.meter if report is not None else None
    if meter is not None and meter.step_us > 0:
        wait = meter.phase_us("data")
        return wait, max(meter.step_us - wait, 0.0)
    # The breakdown's step: the timeline's (replayed) one, which the headline (the unprofiled step) may undercut.
    step = report.summary.timeline_step_time_us or report.summary.step_time_us if report is not None else None
    if report is None or not step:
        return 0.0, 0.0
    rec = next((r for r in report.recommendations if r.id == "dataloader_workers"), None)
    wait = rec.evidence.get("dataloader_wait_us_per_step") if rec is not None else None
    load = float(wait if wait is not None else report.summary.breakdown_us.get("dataloader", 0.0))
    return load, max(step - load, 0.0)


def _options(ctx: PlanContext) -> tuple[Params, ...] | str:
    counts = worker_counts(ctx.report, ctx.settings, ctx.device.cpu_cores)
    return tuple({"dataloader_workers": {"num_workers": n}} for n in counts) or "no worker count above the current"


def _install(points: Points, params: Params) -> None:
    points.loader.num_workers = int(params.get("num_workers", 4))


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    workers = int(params.get("num_workers", 4))
    placed = keyword_at(work, settings.loaders, "num_workers", str(workers), named("DataLoader"))
    if workers == 0 and placed:  # what DataLoader refuses without workers, where the call passes it
        for name, value in REFUSED_WITHOUT_WORKERS.items():
            keyword_at(work, settings.loaders, name, value, named("DataLoader"), present_only=True)
    return placed


FIX = Fix(id="dataloader_workers", code="DataLoader(..., num_workers=N)", order=10, needs="loader",
          recommended_only=True, install=_install, write=_write, options=_options)
