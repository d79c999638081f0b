"""Fixes for a step that waits on its input: DataLoader workers, and workers that outlive an epoch.

With a live capture the DataLoader's settings are known (workers, persistent workers, the epochs begun in
the window, the line that built it) and the cores are counted: more workers are suggested only onto free
cores, their gain is bounded by the loading time per batch, and persistent workers only when an epoch
began (the workers started again) inside the recorded steps.
"""

from __future__ import annotations

import numpy as np

from stepscope.advice.context import Context
from stepscope.advice.found import MIN_SHARE
from stepscope.advice.location import rows_named
from stepscope.advice.recommendation import recommendation
from stepscope.advice.whatif import (
    CAVEAT,
    WORKERS_ASSUMED,
    Estimate,
    gpu_busy_ns,
    replayed,
    step_to,
    step_without,
)
from stepscope.analysis.categories import DATALOADER
from stepscope.model import report as s
from stepscope.units import ns_text, rounded_ratio, us_from_ns

# A __next__ call this many times its median is the workers being started again (a new epoch's iterator). An
# input-bound loader waits long for every batch: 8 ms sleeps per sample, batch 16, 2 workers on 2 cores waited
# ~35 ms a batch and 228 ms at an epoch's first (6.5x; benchmarks/loader_workloads.py sleep --workers 2 --epoch 6).
RESTART_RATIO = 4.0


def _input_wait(ctx: Context) -> float:
    """ns per step the step waits on the DataLoader (GPU idle for it, or the whole call on a CPU run)."""
    return ctx.part_ns("input") if ctx.accelerator == "gpu" else ctx.part_ns("dataloader")


def _loader_work(ctx: Context) -> float:
    """Host work per step inside the DataLoader: the part of loading that needs a CPU core."""
    part = "input" if ctx.accelerator == "gpu" else "dataloader"
    work = ctx.host_work.get(part)
    return float(work[ctx.typical].mean()) if work is not None and len(work) else 0.0


def free_cores(ctx: Context) -> int | None:
    """Cores neither the training process's threads nor its DataLoader workers use (None: not known)."""
    st = ctx.settings
    if st is None or st.cpu_cores is None:
        return None
    busy = 1 if ctx.accelerator == "gpu" else (st.intra_op_threads or 1)
    workers = st.dataloader.num_workers if st.dataloader is not None else 0
    return st.cpu_cores - busy - workers


def _where(ctx: Context) -> tuple[dict | None, np.ndarray | None]:
    """The DataLoader(...) line when capture saw it built, else the rows of its waits."""
    loader = ctx.settings.dataloader if ctx.settings is not None else None
    if loader is not None and loader.location is not None:
        return loader.location, None
    return None, rows_named(ctx.facts.trace, DATALOADER)


def dataloader_workers(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """DataLoader wait over MIN_SHARE of the step: load in (more) worker processes, on free cores."""
    wait = _input_wait(ctx)
    if not ctx.step_ns or wait < MIN_SHARE * ctx.step_ns:
        return []
    loader = ctx.settings.dataloader if ctx.settings is not None else None
    workers = loader.num_workers if loader is not None else (0 if ctx.dataloader.iterator == "single-process" else None)
    free = free_cores(ctx)
    if workers is None:
        est, title, target = _unknown_workers(ctx, wait), _more_title(None, None), None
    elif workers == 0:
        target, free = first_workers(ctx)
        est = _first_workers(ctx, wait, target, free)
        pin = ", pin_memory=True" if ctx.accelerator == "gpu" else ""
        title = f"Load batches in worker processes: DataLoader(..., num_workers={target}{pin})"
    else:
        if free is not None and free < 1:
            return []  # every core is taken already: more workers would only compete with the step
        target = workers + (workers if free is None else min(workers, free))
        est, title = _more_workers(ctx, wait, workers, target), _more_title(workers, target)
    location, rows = _where(ctx)
    return [recommendation(ctx, "dataloader_workers", title, {
        "dataloader_wait_share": rounded_ratio(wait / ctx.step_ns), "dataloader_wait_us_per_step": us_from_ns(wait),
        "iterator": ctx.dataloader.iterator, "num_workers": workers, "suggested_workers": target,
        "free_cores": free}, est, rows, location)]


def first_workers(ctx: Context) -> tuple[int, int | None]:
    """The workers suggested first, from loading in the main process, and the free cores that bound them."""
    free = free_cores(ctx)
    return (WORKERS_ASSUMED if free is None else max(1, min(WORKERS_ASSUMED, free))), free


def _more_title(workers: int | None, target: int | None) -> str:
    if workers is None or target is None:
        return "Give the DataLoader more workers or prefetch (num_workers, prefetch_factor), or cheaper transforms"
    return f"Give the DataLoader more workers on the free cores: num_workers={target} (now {workers})"


def _floor(ctx: Context) -> tuple[float, str]:
    if ctx.accelerator == "gpu":
        return gpu_busy_ns(ctx), "the step cannot be shorter than the GPU's busy time"
    return 0.0, ""


def _first_workers(ctx: Context, wait: float, target: int, free: int | None) -> Estimate:
    """From loading in the main process: each batch still takes its loading time, now spread over workers."""
    floor, why = _floor(ctx)
    if free is not None and free < 1:
        # No spare core: a worker hides the loading's waiting (storage, sleeps), not its CPU work.
        cpu = min(_loader_work(ctx), wait)
        return step_without(ctx, wait - cpu, "DataLoader waiting hidden by one worker; its CPU work stays (no "
                                             "free core)", floor, why)
    by_replay = replayed(ctx, "dataloader_workers", workers=target, free_cores=free)
    if by_replay is not None:
        return by_replay
    loading = ctx.dataloader.host_ns if ctx.accelerator == "gpu" else wait
    floor_ns = max(floor, loading / target)
    why = why if floor >= loading / target else f"the workers still need 1/{target} of the loading time per batch"
    return step_without(ctx, wait, f"DataLoader wait removed by {target} workers on free cores", floor_ns, why)


def _more_workers(ctx: Context, wait: float, workers: int, target: int) -> Estimate:
    """Already loading in w workers and still waiting: a batch comes every (loading time / w), which is
    about the step itself, so w' workers shorten the step at most to step x w / w'."""
    floor, why = _floor(ctx)
    bound = ctx.step_ns * workers / target
    floor_ns = max(floor, bound)
    if floor < bound:
        why = f"{workers} -> {target} workers deliver batches at most {target / workers:.3g}x faster"
    return step_without(ctx, wait, f"DataLoader wait removed by {target} workers instead of {workers}", floor_ns, why)


def _unknown_workers(ctx: Context, wait: float) -> Estimate:
    """A trace alone: assume WORKERS_ASSUMED workers on spare cores."""
    loading = ctx.dataloader.host_ns / WORKERS_ASSUMED
    what = f"DataLoader wait removed by {WORKERS_ASSUMED} workers on spare cores"
    if ctx.accelerator == "gpu" and gpu_busy_ns(ctx) >= loading:
        return step_without(ctx, wait, what, gpu_busy_ns(ctx), "the step cannot be shorter than the GPU's busy time")
    return step_without(ctx, wait, what, loading, f"the workers still need 1/{WORKERS_ASSUMED} of the loading time")


def persistent_workers(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """Workers started again inside the window (a new epoch): keep them alive between epochs."""
    dl = ctx.dataloader
    calls = dl.calls_ns
    loader = ctx.settings.dataloader if ctx.settings is not None else None
    if len(calls) < 2 or (loader is None and dl.iterator != "multi-process"):
        return []
    if loader is not None and (loader.num_workers == 0 or loader.persistent_workers or not loader.iterators_started):
        return []  # no restart happened in the window (long waits are then workers finishing together)
    median, longest = float(np.median(calls)), float(calls.max())
    restart = longest - median
    per_epoch = loader.batches_per_epoch if loader is not None and loader.batches_per_epoch else None
    extra = restart / per_epoch if per_epoch else restart / max(len(ctx.facts.steps), 1)
    if longest < RESTART_RATIO * max(median, 1.0) or extra < MIN_SHARE * ctx.step_ns:
        return []
    if per_epoch:
        step = ctx.step_ns
        speedup = step / max(step - extra, 1.0)
        est = Estimate(speedup, f"Worker start-up ({ns_text(restart)}) paid once per epoch of {per_epoch} batches "
                                f"instead of every epoch: {step_to(ctx, step, step - extra)} "
                                f"({speedup:.2f}x). {CAVEAT}")
    else:
        est = step_without(ctx, extra, "Worker start-up amortised away")
    title = "Keep DataLoader workers alive between epochs: DataLoader(..., persistent_workers=True)"
    location, rows = _where(ctx)
    return [recommendation(ctx, "persistent_workers", title, {
        "longest_next_us": us_from_ns(longest), "median_next_us": us_from_ns(median),
        "restart_share": rounded_ratio(extra / ctx.step_ns), "batches_per_epoch": per_epoch}, est, rows, location)]
