"""Patterns of runs without a GPU timeline: CPU-only runs (input, compute or Python overhead), and runs on a
non-GPU accelerator, of which only the host's side is read."""

from __future__ import annotations

import numpy as np

from stepscope.advice.context import Context
from stepscope.advice.patterns import MIN_SHARE, Found, make
from stepscope.advice.text import pct, r4, us
from stepscope.analysis.categories import COLLECTIVE_OP, DATALOADER
from stepscope.analysis.hostops import inside_any, self_time
from stepscope.trace.model import Kind

# An op shorter than this is mostly dispatch cost (argument parsing, dispatcher, allocation), not math.
TINY_OP_NS = 20_000
# Some interpreter time between ops is the price of eager mode; past a fifth of the step it is the problem.
PYTHON_OVERHEAD_MIN_SHARE = 0.2


def _column(ctx: Context, name: str) -> np.ndarray:
    b = ctx.facts.breakdown
    return b.per_step[:, b.categories.index(name)].astype(np.float64)


def _host_common(ctx: Context, where: str) -> list[Found]:
    """input_bound and communication_bound as the host sees them (DataLoader and collective ranges)."""
    durations = ctx.facts.steps.duration
    found = []
    dl, comm = _column(ctx, "dataloader"), _column(ctx, "communication")
    if dl.sum() >= MIN_SHARE * durations.sum():
        share = dl.sum() / durations.sum()
        title = f"{where} waits for the DataLoader {pct(share)} of each step."
        found.append(make("input_bound", dl, durations, title, {
            "dataloader_share": r4(share), "dataloader_us_per_step": us(dl.mean()),
            "iterator": ctx.dataloader.iterator}))
    if comm.sum() >= MIN_SHARE * durations.sum():
        share = comm.sum() / durations.sum()
        found.append(make("communication_bound", comm, durations,
                          f"{where} waits in collectives {pct(share)} of each step.",
                          {"communication_share": r4(share), "communication_us_per_step": us(comm.mean())}))
    return found


def host_only_patterns(ctx: Context) -> list[Found]:
    """A non-GPU accelerator: only what the host's ranges show; nothing about the device's own timeline."""
    found = _host_common(ctx, "The host")
    for f in found:
        f.pattern.title += " (Host view: this accelerator's own timeline is not analysed.)"
    return found


def cpu_patterns(ctx: Context) -> list[Found]:
    """A CPU-only run: the DataLoader, collectives, real CPU compute in ops, or Python and dispatch overhead."""
    found = _host_common(ctx, "The training loop")
    durations = ctx.facts.steps.duration
    compute = _substantial_op_time(ctx)
    overhead = np.maximum(durations - _column(ctx, "dataloader") - _column(ctx, "communication") - compute, 0)
    if overhead.sum() >= PYTHON_OVERHEAD_MIN_SHARE * durations.sum():
        share = overhead.sum() / durations.sum()
        ops = ctx.facts.trace.events.kind == Kind.CPU_OP
        found.append(make("python_overhead", overhead, durations,
                          f"Python and per-op dispatch take {pct(share)} of each step: time outside any torch op "
                          f"(your Python, numpy, the interpreter) or in ops too small (under {TINY_OP_NS // 1000} "
                          "µs) for their math to dominate.",
                          {"overhead_share": r4(share), "overhead_us_per_step": us(overhead.mean()),
                           "ops_per_step": round(_per_step_count(ctx, ops), 1)}))
    if compute.sum() >= MIN_SHARE * durations.sum():
        share = compute.sum() / durations.sum()
        found.append(make("cpu_compute_bound", compute, durations,
                          f"The CPU computes in ops {pct(share)} of each step: the math itself is the cost.",
                          {"cpu_compute_share": r4(share), "cpu_compute_us_per_step": us(compute.mean())}))
    return found


def _substantial_op_time(ctx: Context) -> np.ndarray:
    """Per step, the self time of ops whose own work (less the ops inside them) is at least TINY_OP_NS,
    outside the DataLoader and collectives: aten::addmm's math counts, aten::linear around it does not."""
    trace, steps = ctx.facts.trace, ctx.facts.steps
    ev = trace.events
    excluded = ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION) & trace.names_where(
        lambda s: DATALOADER.match(s) is not None or COLLECTIVE_OP.match(s) is not None)
    ops = np.flatnonzero(ev.kind == Kind.CPU_OP)
    own = self_time(trace, ops)
    keep = (own >= TINY_OP_NS) & ~excluded[ops] & ~inside_any(trace, np.flatnonzero(excluded), ops)
    work = steps.per_step(ev.start[ops[keep]], own[keep])
    room = steps.duration - _column(ctx, "dataloader") - _column(ctx, "communication")
    return np.minimum(work, np.maximum(room, 0)).astype(np.float64)


def _per_step_count(ctx: Context, mask: np.ndarray) -> float:
    steps = ctx.facts.steps
    return float(steps.per_step(ctx.facts.trace.events.start[mask]).sum()) / max(len(steps), 1)
