"""Fixes for a host that cannot feed the GPU: fewer, bigger or captured launches, and no needless work."""

from __future__ import annotations

import re

import numpy as np

from stepscope.advice.context import Context
from stepscope.advice.culprits import blocking_causes, what_it_is
from stepscope.advice.location import locate, rows_named
from stepscope.advice.recommendation import MIN_GAIN, recommendation
from stepscope.advice.rules.cpu import torch_compile_cpu
from stepscope.advice.whatif import (
    FUSED_OPTIMIZER_GPU_KEPT,
    FUSED_OPTIMIZER_HOST_KEPT,
    FUSION_LAUNCHES_KEPT,
    FUSION_TIME_KEPT,
    bigger_batch,
    gpu_busy_ns,
    mixed_saving,
    per_step_update_ns,
    replayed,
    step_without,
)
from stepscope.analysis.costs import UNTRACED
from stepscope.analysis.hostops import inside_any
from stepscope.analysis.signals import OPTIMIZER_STEP, ZERO_GRAD
from stepscope.model import report as s
from stepscope.trace.model import Kind, Trace
from stepscope.units import rounded_ratio, share_text, us_from_ns

# A bigger batch is suggested when it buys at least 10% more samples/s: it changes the optimisation too.
LARGER_BATCH_MIN_GAIN = 1.10
# On a CPU that computes, when a tenth of the step or more does not grow with the batch (then twice the batch
# buys ~5% by the model). The model errs low there (ResNet-18 on the 2-core AVX2 test machine: 1.22x measured
# from batch 16 to 32 at 32 px, where small convolutions compute less efficiently; 1.05x at 64 px).
CPU_FIXED_MIN_SHARE = 0.1
CPU_LARGER_BATCH_MIN_GAIN = 1.03
# Leave 10% of device memory free when scaling the batch by peak memory.
MEMORY_HEADROOM = 0.9
ALLOCATION_OP = re.compile(r"^aten::(?:empty\w*|_empty\w*|resize_|new_empty\w*)$")
# Host ops the training step itself runs, which no change to the user's code can move: autograd's backward
# nodes (AccumulateGrad, ...Backward0) and the optimizer's step and zero_grad.
RUN_BY_THE_STEP = re.compile(r"^autograd::engine::evaluate_function: |^Optimizer\.(?:step|zero_grad)#")
# Below this many launches per step, capturing a graph saves too little to be worth static shapes.
GRAPH_MIN_LAUNCHES = 20
# Fusing pays when a step runs at least this many short elementwise kernels.
FUSION_MIN_KERNELS = 50
# Most kernels under 10 µs: the launch overhead pattern torch.compile exists for, whatever the gain here.
SHORT_MAJORITY = 0.5
# Zeroing this many gradients with kernels per step is the set_to_none=False path, not an incidental fill.
ZEROING_MIN_LAUNCHES = 10
# A per-parameter (for-loop) optimizer launches several kernels per parameter; foreach/fused ones a few.
OPTIMIZER_MIN_LAUNCHES = 50


def _holds(patterns: list[s.Pattern], pattern_id: str) -> bool:
    return any(p.id == pattern_id for p in patterns)


def _primary(patterns: list[s.Pattern], *pattern_ids: str) -> bool:
    return bool(patterns) and patterns[0].id in pattern_ids


def _first_call_cost(patterns: list[s.Pattern]) -> bool:
    """launch_bound found one slow runtime call behind most of the launch time: warm-up, not a steady state."""
    launch = next((p for p in patterns if p.id == "launch_bound"), None)
    return launch is not None and bool(launch.evidence.get("slowest_call", {}).get("first_call_cost"))


def _per_step_costs_on_cpu(ctx: Context, patterns: list[s.Pattern]) -> bool:
    """A CPU step that computes, with a tenth or more of it in work the batch does not grow (Python and the
    optimizer's update): a bigger batch spreads that over more samples."""
    if ctx.accelerator != "cpu" or not _primary(patterns, "cpu_compute_bound") or not ctx.step_ns:
        return False
    return ctx.part_ns("python") + per_step_update_ns(ctx) >= CPU_FIXED_MIN_SHARE * ctx.step_ns


def larger_batch(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """Per-step host overhead is the primary cost and memory allows twice the batch."""
    # Only where per-step costs weigh: elsewhere the batch does not buy what it costs.
    cpu = _per_step_costs_on_cpu(ctx, patterns)
    if not (cpu or _primary(patterns, "launch_bound", "python_overhead")) or _first_call_cost(patterns):
        return []
    use = ctx.memory_use
    k_max = int(MEMORY_HEADROOM / use) if use else None
    if k_max is not None and k_max < 2:
        return []
    est = replayed(ctx, "larger_batch", k=2) or bigger_batch(ctx, 2)
    if est.speedup < (CPU_LARGER_BATCH_MIN_GAIN if cpu else LARGER_BATCH_MIN_GAIN):
        return []
    what = "the optimizer's update and the Python of each step" if cpu else "the per-step host overhead"
    title = f"Use a bigger batch (2x shown) to spread {what} over more samples; rescale the learning rate"
    return [recommendation(ctx, "larger_batch", title, {
        "batch_factor": 2, "max_batch_factor_by_memory": k_max,
        "peak_memory_share": rounded_ratio(use) if use else None,
        "gpu_busy_share": rounded_ratio(ctx.compute_share) if ctx.accelerator == "gpu" else None}, est)]


def cuda_graphs(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """Launch bound with enough launches per step to capture."""
    if not _holds(patterns, "launch_bound") or ctx.launches < GRAPH_MIN_LAUNCHES or _first_call_cost(patterns):
        return []
    wait = ctx.part_ns("launch")
    est = replayed(ctx, "cuda_graphs") or step_without(
        ctx, wait, "Launch gaps removed by replaying the step as one graph", gpu_busy_ns(ctx),
        "the step cannot be shorter than the GPU's busy time")
    how = ("torch.compile(model, mode='reduce-overhead')" if not compiled(ctx)
           else "mode='reduce-overhead' in the torch.compile call already used")
    title = f"Capture the step in a CUDA graph ({how}) if its shapes are static"
    return [recommendation(ctx, "cuda_graphs", title, {
        "launch_wait_us_per_step": us_from_ns(wait), "launches_per_step": round(ctx.launches, 1)}, est)]


def compiled(ctx: Context) -> bool:
    """torch.compile is in use already: capture saw it, or the trace shows compiled regions."""
    st = ctx.settings
    return bool(st is not None and st.compiled) or ctx.elementwise.compiled


def torch_compile(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation | s.Considered]:
    """Many short elementwise kernels to fuse (GPU), or a CPU run's (cpu.torch_compile_cpu); never when compiled
    already."""
    if compiled(ctx):
        return [s.Considered(id="torch_compile", reason="the model is compiled already")] \
            if ctx.accelerator == "cpu" else []
    if ctx.accelerator == "cpu":
        return torch_compile_cpu(ctx, patterns)
    ew = ctx.elementwise
    if ctx.accelerator != "gpu" or ew.short_count < FUSION_MIN_KERNELS:
        return []
    removed = ew.short_count * (1 - FUSION_LAUNCHES_KEPT)
    saved = ctx.part_ns("launch") * min(removed / max(ctx.launches, 1), 1) + \
        ew.short_ns * (1 - FUSION_TIME_KEPT) * ctx.compute_share
    est = step_without(ctx, saved, f"Elementwise kernels fused ~{1 / FUSION_LAUNCHES_KEPT:.0f} to 1: fewer launches "
                                   "and half their memory traffic")
    short_majority = ctx.facts.kernels.short_share is not None and ctx.facts.kernels.short_share >= SHORT_MAJORITY
    if est.speedup < MIN_GAIN and not short_majority:
        return []
    title = (f"Compile the model to fuse its {ew.short_count:.0f} short elementwise kernels per step: "
             "model = torch.compile(model)")
    return [recommendation(ctx, "torch_compile", title, {
        "short_elementwise_per_step": round(ew.short_count, 1),
        "short_elementwise_us_per_step": us_from_ns(ew.short_ns),
        "kernels_per_step": round(ew.kernel_count, 1)}, est)]


def offload_cpu_work(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """The GPU waits on CPU work that launches nothing and that the user's code runs: name it, where it is, and
    what taking it off the path buys."""
    costs = ctx.costs
    if costs is None or not _holds(patterns, "cpu_compute_bound"):
        return []
    n = max(len(ctx.facts.steps), 1)
    trace = ctx.facts.trace
    # Only work inside recorded ops: time outside any op may be the profiler's, or code we cannot name; a
    # long allocation is the allocator reaching the driver (a warm-up cost), not work to vectorise; and what the
    # backward pass or the optimizer runs cannot be moved by the user's code (the optimizer's fix is its own).
    in_ops = {k: v for k, v in costs.cpu_ops.items()
              if k != UNTRACED and not ALLOCATION_OP.match(k) and not run_by_the_step(trace, k)}
    top, top_ns = max(in_ops.items(), key=lambda kv: kv[1], default=("", 0))
    est = step_without(ctx, sum(in_ops.values()) / n, "CPU work in ops overlapped with the GPU or moved onto it",
                       gpu_busy_ns(ctx), "the step cannot be shorter than the GPU's busy time")
    if not top or est.speedup < MIN_GAIN:
        return []
    location = locate(trace, rows_named(trace, re.compile(re.escape(top) + "$")))
    where = f" at {location.label}" if location else ""
    title = (f"Take the CPU work the GPU waits for off the critical path ({top}{where}, {top_ns / n / 1e6:.3g} ms "
             "per step): do it on the GPU or vectorise it; if it prepares the batch, do it in the DataLoader's "
             "workers instead")
    return [recommendation(ctx, "offload_cpu_work", title, {
        "cpu_wait_us_per_step": us_from_ns(ctx.part_ns("cpu")), "top_op": top,
        "top_op_us_per_step": us_from_ns(top_ns / n)}, est, location=location)]


def run_by_the_step(trace: Trace, name: str) -> bool:
    """The op is autograd's (a backward node, or run inside one) or the optimizer's, for most of its calls."""
    if RUN_BY_THE_STEP.match(name):
        return True
    ops = np.flatnonzero((trace.events.kind == Kind.CPU_OP) & trace.names_where(lambda x: x == name))
    outer = np.flatnonzero((trace.events.kind == Kind.CPU_OP) & trace.names_where(
        lambda x: RUN_BY_THE_STEP.match(x) is not None))
    return bool(len(ops)) and float(inside_any(trace, outer, ops).mean()) > 0.5


def set_to_none(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """Gradients zeroed with kernels or memsets every step."""
    z = ctx.zeroing
    if ctx.accelerator != "gpu" or z.launches < ZEROING_MIN_LAUNCHES:
        return []
    est = replayed(ctx, "set_to_none") or step_without(ctx, mixed_saving(ctx, z.host_ns, z.gpu_ns),
                                                        "Gradients set to None instead of zeroed")
    title = (f"Set gradients to None instead of zeroing them ({z.launches:.0f} kernels per step): "
             "optimizer.zero_grad(set_to_none=True)")
    return [recommendation(ctx, "set_to_none", title, {
        "zeroing_launches_per_step": round(z.launches, 1), "zeroing_gpu_us_per_step": us_from_ns(z.gpu_ns),
        "zeroing_host_us_per_step": us_from_ns(z.host_ns)}, est, rows_named(ctx.facts.trace, ZERO_GRAD))]


def fused_optimizer(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """Many small optimizer kernels per step, no foreach or fused implementation."""
    o = ctx.optimizer
    known = ctx.settings.optimizer if ctx.settings is not None else None
    if ctx.accelerator != "gpu" or o.fused or o.launches < OPTIMIZER_MIN_LAUNCHES:
        return []
    if known is not None and (known.fused or known.foreach):
        return []
    saved = mixed_saving(ctx, o.host_ns * (1 - FUSED_OPTIMIZER_HOST_KEPT), o.gpu_ns * (1 - FUSED_OPTIMIZER_GPU_KEPT))
    est = step_without(ctx, saved, "A handful of fused launches instead of one loop per parameter")
    title = (f"Use a fused optimizer ({o.launches:.0f} small optimizer kernels per step): "
             "e.g. torch.optim.AdamW(..., fused=True) or foreach=True")
    # Where the optimizer is built, when capture saw it, is where the fix goes.
    return [recommendation(ctx, "fused_optimizer", title, {
        "optimizer_launches_per_step": round(o.launches, 1), "optimizer_gpu_us_per_step": us_from_ns(o.gpu_ns),
        "optimizer_host_us_per_step": us_from_ns(o.host_ns)}, est, rows_named(ctx.facts.trace, OPTIMIZER_STEP),
        known.location if known is not None else None)]


def remove_sync(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """One recommendation per distinct cause of a synchronisation (copies' own syncs are non_blocking_copy's)."""
    costs = ctx.costs
    if costs is None:
        return []
    ev, n = ctx.facts.trace.events, max(len(ctx.facts.steps), 1)
    keep = ~costs.blocking_after_htod
    rows, idle, first = costs.blocking_rows[keep], costs.blocking_idle[keep], costs.blocking_first[keep]
    keys = blocking_causes(ctx.facts.trace, rows)
    result = []
    for key in dict.fromkeys(keys):
        mine = [i for i, k in enumerate(keys) if k == key]
        wait, blocked = float(idle[mine].sum()) / n, float(ev.dur[rows[mine]].sum()) / n
        est = step_without(ctx, wait, f"The GPU no longer drains and idles at this synchronisation (it also blocks "
                                      f"the host {share_text(blocked / ctx.step_ns)} of each step)")
        if est.speedup < MIN_GAIN:
            continue
        apis = sorted({ctx.facts.trace.name_of(int(r)) for r in rows[mine]})
        count = int(first[mine].sum()) / n
        title = (f"Remove the per-step synchronisation in {key.split(' > ')[0]} ({what_it_is(key)}, "
                 f"{count:.3g} per step): keep values on the GPU, read them every N steps")
        result.append(recommendation(ctx, "remove_sync", title, {
            "cause": key, "apis": apis, "count_per_step": round(count, 2),
            "gpu_idle_us_per_step": us_from_ns(wait), "host_blocked_us_per_step": us_from_ns(blocked),
            "host_blocked_share": rounded_ratio(blocked / ctx.step_ns)}, est, rows[mine]))
    return result



