"""Fixes for a step that waits on its input: DataLoader workers, and workers that outlive an epoch."""

from __future__ import annotations

import numpy as np

from stepscope.advice.context import Context
from stepscope.advice.location import rows_named
from stepscope.advice.patterns import MIN_SHARE
from stepscope.advice.recommendation import recommendation
from stepscope.advice.text import r4, us
from stepscope.advice.whatif import WORKERS_ASSUMED, gpu_busy_ns, step_without
from stepscope.analysis.categories import DATALOADER
from stepscope.model import report as s

# A __next__ call this many times its median is the workers being started again (a new epoch's iterator).
RESTART_RATIO = 10.0


def _input_wait(ctx: Context) -> float:
    """ns per step the step waits on the DataLoader (GPU idle for it, or the whole call on a CPU run)."""
    if ctx.accelerator == "gpu":
        return ctx.part_ns("input")
    return ctx.facts.breakdown.mean()["dataloader"]


def dataloader_workers(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """DataLoader wait over MIN_SHARE of the step: load in worker processes."""
    wait = _input_wait(ctx)
    if not ctx.step_ns or wait < MIN_SHARE * ctx.step_ns:
        return []
    dl = ctx.dataloader
    if dl.iterator == "single-process":
        title = "Load batches in worker processes: DataLoader(..., num_workers=4 or more, pin_memory=True)"
    else:
        title = "Give the DataLoader more workers or prefetch (num_workers, prefetch_factor), or cheaper transforms"
    # Workers overlap loading with the step, but each batch still takes its loading time over the workers.
    loading = dl.host_ns / WORKERS_ASSUMED
    what = f"DataLoader wait removed by {WORKERS_ASSUMED} workers on spare cores"
    if ctx.accelerator == "gpu" and gpu_busy_ns(ctx) >= loading:
        est = step_without(ctx, wait, what, gpu_busy_ns(ctx), "the step cannot be shorter than the GPU's busy time")
    else:
        est = step_without(ctx, wait, what, loading, f"the workers still need 1/{WORKERS_ASSUMED} of the loading time")
    return [recommendation(ctx, "dataloader_workers", title, {
        "dataloader_wait_share": r4(wait / ctx.step_ns), "dataloader_wait_us_per_step": us(wait),
        "iterator": dl.iterator}, est, rows_named(ctx.facts.trace, DATALOADER))]


def persistent_workers(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """One __next__ far longer than the rest with workers: they restart every epoch."""
    dl = ctx.dataloader
    calls = dl.calls_ns
    if dl.iterator != "multi-process" or len(calls) < 2:
        return []
    median, longest = float(np.median(calls)), float(calls.max())
    extra = (longest - median) / max(len(ctx.facts.steps), 1)
    if longest < RESTART_RATIO * max(median, 1.0) or extra < MIN_SHARE * ctx.step_ns:
        return []
    est = step_without(ctx, extra, "Worker start-up amortised away")
    title = "Keep DataLoader workers alive between epochs: DataLoader(..., persistent_workers=True)"
    return [recommendation(ctx, "persistent_workers", title, {
        "longest_next_us": us(longest), "median_next_us": us(median),
        "restart_share": r4(extra / ctx.step_ns)}, est)]
