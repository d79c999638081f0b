"""Patterns of runs without a GPU timeline: CPU-only runs (input, compute or Python overhead), and runs on a
non-GPU accelerator, of which only the host's side is read."""

from __future__ import annotations

import numpy as np

from stepscope.advice.context import Context
from stepscope.advice.found import MIN_SHARE, Found, from_parts
from stepscope.analysis.hostwork import TINY_OP_NS
from stepscope.trace.model import Kind
from stepscope.units import rounded_ratio, share_text, us_from_ns

# Some interpreter time between ops is the price of eager mode; past a fifth of the step it is the problem.
PYTHON_OVERHEAD_MIN_SHARE = 0.2
__all__ = ["PYTHON_OVERHEAD_MIN_SHARE", "TINY_OP_NS", "cpu_patterns", "host_only_patterns"]


def _share(ctx: Context, part: str) -> float:
    typical = ctx.typical
    return float(ctx.parts[part][typical].sum() / max(ctx.durations[typical].sum(), 1.0))


def _mean(ctx: Context, part: str) -> float:
    return float(ctx.parts[part][ctx.typical].mean())


def _host_common(ctx: Context, where: str) -> list[Found]:
    """input_bound and communication_bound as the host sees them (DataLoader and collective ranges)."""
    found = []
    share = _share(ctx, "dataloader")
    if share >= MIN_SHARE:
        title = f"{where} waits for the DataLoader {share_text(share)} of each step."
        found.append(from_parts(ctx, "input_bound", ("dataloader",), title, {
            "dataloader_share": rounded_ratio(share), "dataloader_us_per_step": us_from_ns(_mean(ctx, "dataloader")),
            "iterator": ctx.dataloader.iterator}))
    share = _share(ctx, "communication")
    if share >= MIN_SHARE:
        found.append(from_parts(ctx, "communication_bound", ("communication",),
                          f"{where} waits in collectives {share_text(share)} of each step.",
                          {"communication_share": rounded_ratio(share),
                           "communication_us_per_step": us_from_ns(_mean(ctx, "communication"))}))
    return found


def host_only_patterns(ctx: Context) -> list[Found]:
    """A non-GPU accelerator: only what the host's ranges show; nothing about the device's own timeline."""
    return [f.adding(" (Host view: this accelerator's own timeline is not analysed.)")
            for f in _host_common(ctx, "The host")]


def cpu_patterns(ctx: Context) -> list[Found]:
    """A CPU-only run: the DataLoader, collectives, real CPU compute in ops, or Python and dispatch overhead."""
    found = _host_common(ctx, "The training loop")
    share = _share(ctx, "python")
    if share >= PYTHON_OVERHEAD_MIN_SHARE:
        ops = ctx.facts.trace.events.kind == Kind.CPU_OP
        found.append(from_parts(ctx, "python_overhead", ("python",),
                          f"Python and per-op dispatch take {share_text(share)} of each step: time outside any "
                          "torch op (your Python, numpy, the interpreter) or in ops too small "
                          f"(under {TINY_OP_NS // 1000} µs) for their math to dominate.",
                          {"overhead_share": rounded_ratio(share),
                           "overhead_us_per_step": us_from_ns(_mean(ctx, "python")),
                           "ops_per_step": round(_per_step_count(ctx, ops), 1)}))
    share = _share(ctx, "cpu_compute")
    if share >= MIN_SHARE:
        found.append(from_parts(ctx, "cpu_compute_bound", ("cpu_compute",),
                          f"The CPU computes in ops {share_text(share)} of each step: the math itself is the cost.",
                          {"cpu_compute_share": rounded_ratio(share),
                           "cpu_compute_us_per_step": us_from_ns(_mean(ctx, "cpu_compute"))}))
    return found


def _per_step_count(ctx: Context, mask: np.ndarray) -> float:
    steps = ctx.facts.steps
    return float(steps.per_step(ctx.facts.trace.events.start[mask]).sum()) / max(len(steps), 1)
