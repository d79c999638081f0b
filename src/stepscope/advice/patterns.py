"""The pattern language: which bottleneck holds the steps back, the share of the step it costs, and the
figures that decided it. Several can hold at once; the costliest comes first.

On a GPU run the shares come from the step-time attribution (analysis/costs.py), whose parts are
disjoint, so the shares of the patterns never add up to more than the step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from stepscope.advice.context import Context
from stepscope.advice.cpu_patterns import cpu_patterns, host_only_patterns
from stepscope.advice.culprits import blocking_causes
from stepscope.advice.found import MIN_SHARE, Found, costliest_first, from_parts, ranked
from stepscope.analysis.facts import Facts
from stepscope.model import report as s
from stepscope.units import bytes_text, ns_text, rounded_ratio, share_text, us_from_ns

# DESIGN.md: a GPU busy more than ~90% of the step, without gaps, is the good state.
GPU_BOUND_UTILIZATION = 0.90
# When nothing else holds, a GPU busy at least half the step is still best described as compute bound.
GPU_LARGEST_PART = 0.5
# Idle with work already queued (events, other streams, other ranks) is worth a word at a fifth of the step.
DEVICE_WAIT_NOTE = 0.2
# One runtime call taking half of all the launch-attributed time is a first-call cost (module loading).
ONE_CALL_SHARE = 0.5
ONE_STEP = " Only one step was profiled: one-time costs may dominate; profile several steps."


def classify(facts: Facts, ctx: Context | None = None) -> list[s.Pattern]:
    """Every pattern that holds, primary (costliest) first; each carries its per-step shares."""
    ctx = ctx or Context(facts)
    if len(facts.steps) == 0:
        return []
    if ctx.accelerator == "cpu":
        found = cpu_patterns(ctx)
    elif ctx.accelerator == "other":
        found = host_only_patterns(ctx)
    elif ctx.costs is None:
        return []
    else:
        found = [f for rule in GPU_PATTERNS if (f := rule(ctx)) is not None]
        if not found and (f := gpu_compute_bound(ctx, fallback=True)) is not None:
            found = [f]
        found = _with_device_wait(ctx, found)
    found = costliest_first(found)
    if len(facts.steps) == 1 and found:
        found[0] = found[0].adding(ONE_STEP)
    return ranked(found, facts.steps.ids, ctx.durations)


def _steps(ctx: Context) -> int:
    return max(len(ctx.facts.steps), 1)


# -- one function per pattern ------------------------------------------------------------------------
def input_bound(ctx: Context) -> Found | None:
    """The GPU idles while the host waits in DataLoader.__next__."""
    share = ctx.share("input")
    if share < MIN_SHARE:
        return None
    dl = ctx.dataloader
    how = {"single-process": "single-process loading: num_workers=0",
           "multi-process": "worker processes cannot keep up"}.get(dl.iterator or "", "")
    title = f"The GPU waits for the DataLoader {share_text(share)} of each step" + (f" ({how})." if how else ".")
    return from_parts(ctx, "input_bound", ("input",), title, {
        "dataloader_wait_share": rounded_ratio(share), "dataloader_wait_us_per_step": us_from_ns(ctx.part_ns("input")),
        "dataloader_us_per_step": us_from_ns(dl.host_ns), "iterator": dl.iterator,
        "gpu_utilization": rounded_ratio(ctx.compute_share)})


def copy_bound(ctx: Context) -> Found | None:
    """Host-to-device copies run with nothing to hide them, or the host waits on them."""
    share = ctx.share("copy_htod", "copy_sync")
    if share < MIN_SHARE:
        return None
    copies, h2d = ctx.facts.copies, ctx.host_to_device
    htod = float(copies.htod_bytes_per_step.mean())
    pageable = float(copies.pageable_htod_bytes_per_step.mean())
    costs = ctx.costs
    assert costs is not None
    synced = int((costs.blocking_after_htod & costs.blocking_first).sum()) / _steps(ctx)
    size = f"{bytes_text(htod)} per step" if htod else "copies of unrecorded size"
    title = (f"Host-to-device copies hold the GPU {share_text(share)} of each step: {size}"
             + (f", {bytes_text(pageable)} of it from pageable memory" if pageable else "")
             + (", each copy followed by a synchronisation." if synced else "."))
    return from_parts(ctx, "copy_bound", ("copy_htod", "copy_sync"), title, {
        "exposed_copy_share": rounded_ratio(ctx.share("copy_htod")),
        "copy_sync_share": rounded_ratio(ctx.share("copy_sync")),
        "htod_bytes_per_step": round(htod), "pageable_htod_bytes_per_step": round(pageable),
        "syncs_after_copy_per_step": round(synced, 2), "largest_copy_bytes": h2d.largest_copy_bytes,
        "htod_bandwidth_gb_s": round(h2d.pageable_gb_s or h2d.pinned_gb_s or 0.0, 2)})


def sync_bound(ctx: Context) -> Found | None:
    """The GPU idles after the host blocked in a synchronisation."""
    share = ctx.share("sync")
    if share < MIN_SHARE:
        return None
    causes = sync_causes(ctx)
    top = next(iter(causes), "")
    n = _steps(ctx)
    costs = ctx.costs
    assert costs is not None
    keep = ~costs.blocking_after_htod
    rows, points = costs.blocking_rows[keep], int(costs.blocking_first[keep].sum())
    title = (f"The GPU idles after synchronisations {share_text(share)} of each step: {points / n:.3g} per step"
             + (f", mostly in {top.split(' > ')[0]}." if top else "."))
    return from_parts(ctx, "sync_bound", ("sync",), title, {
        "sync_idle_share": rounded_ratio(share), "syncs_per_step": round(points / n, 2),
        "host_blocked_us_per_step": us_from_ns(ctx.facts.trace.events.dur[rows].sum() / n),
        "causes_idle_us_per_step": {k: us_from_ns(v / n) for k, v in list(causes.items())[:5]}})


def sync_causes(ctx: Context) -> dict[str, float]:
    """Idle ns (over all steps) each kind of blocking call caused, keyed 'outer op > inner op > api'."""
    costs = ctx.costs
    if costs is None:
        return {}
    keep = ~costs.blocking_after_htod
    keys = blocking_causes(ctx.facts.trace, costs.blocking_rows[keep])
    totals: Counter[str] = Counter()
    for key, idle in zip(keys, costs.blocking_idle[keep], strict=True):
        totals[key] += float(idle)
    return dict(totals.most_common())


def cpu_compute_bound(ctx: Context) -> Found | None:
    """The GPU idles while the host does CPU work that launches nothing."""
    share = ctx.share("cpu")
    if share < MIN_SHARE:
        return None
    costs = ctx.costs
    assert costs is not None
    n = _steps(ctx)
    top = dict(Counter(costs.cpu_ops).most_common(3))
    title = (f"The GPU waits while the host does CPU work that launches nothing, {share_text(share)} of each step"
             + (f" (mostly {next(iter(top))})." if top else "."))
    return from_parts(ctx, "cpu_compute_bound", ("cpu",), title, {
        "cpu_wait_share": rounded_ratio(share), "top_ops_us_per_step": {k: us_from_ns(v / n) for k, v in top.items()},
        "launches_per_step": round(ctx.launches, 1)})


def launch_bound(ctx: Context) -> Found | None:
    """The GPU idles while the host issues ops and launches."""
    share = ctx.share("launch")
    if share < MIN_SHARE:
        return None
    costs, k = ctx.costs, ctx.facts.kernels
    assert costs is not None
    n = _steps(ctx)
    kernels = k.count / n
    per_launch = ctx.step_ns / ctx.launches if ctx.launches else 0.0
    top = dict(Counter(costs.launch_ops).most_common(3))
    call, call_ns = ctx.slowest_call
    one_call = call_ns >= ONE_CALL_SHARE * costs.parts["launch"].sum()
    title = (f"The GPU waits for the host to launch work {share_text(share)} of each step: "
             f"{kernels:.0f} kernels per step, {share_text(k.short_share or 0)} under 10 µs, "
             f"one launch every {ns_text(per_launch)}.")
    if one_call:
        title += f" Mostly one {call} call of {ns_text(call_ns)}: a first-call cost; profile steps after warm-up."
    return from_parts(ctx, "launch_bound", ("launch",), title, {
        "launch_wait_share": rounded_ratio(share), "kernels_per_step": round(kernels, 1),
        "launches_per_step": round(ctx.launches, 1), "short_kernel_share": rounded_ratio(k.short_share or 0),
        "mean_kernel_us": us_from_ns(k.total_ns / k.count) if k.count else 0.0, "us_per_launch": us_from_ns(per_launch),
        "top_ops_us_per_step": {name: us_from_ns(v / n) for name, v in top.items()},
        "slowest_call": {"name": call, "us": us_from_ns(call_ns), "first_call_cost": bool(one_call)}})


def communication_bound(ctx: Context) -> Found | None:
    """Collectives run with no compute kernel beside them."""
    share = ctx.share("communication")
    if share < MIN_SHARE:
        return None
    coll = ctx.collectives
    hidden = 1 - ctx.part_ns("communication") / coll.ns if coll.ns else 0.0
    title = (f"Collectives not hidden behind compute take {share_text(share)} of each step: {coll.count:.0f} per step, "
             f"{ns_text(coll.ns)} of collective kernel time, {share_text(max(hidden, 0))} of it hidden.")
    return from_parts(ctx, "communication_bound", ("communication",), title, {
        "exposed_communication_share": rounded_ratio(share), "collectives_per_step": round(coll.count, 1),
        "collective_us_per_step": us_from_ns(coll.ns), "hidden_share": rounded_ratio(max(hidden, 0))})


def gpu_compute_bound(ctx: Context, fallback: bool = False) -> Found | None:
    """Kernels run most of the step: the good state, where cheaper kernels are the lever."""
    share = ctx.compute_share
    if share < (GPU_LARGEST_PART if fallback else GPU_BOUND_UTILIZATION):
        return None
    mm, k = ctx.matmul, ctx.facts.kernels
    matmul_share = mm.total / mm.kernel if mm.kernel else 0.0
    title = (f"The GPU is busy {share_text(share)} of each step: the kernels are the cost "
             f"(matmuls and convolutions {share_text(matmul_share)} of kernel time, "
             f"{share_text(mm.half / mm.total if mm.total else 0)} of that in half precision).")
    top = k.top[0] if k.top else None
    return from_parts(ctx, "gpu_compute_bound", ("compute",), title, {
        "gpu_busy_share": rounded_ratio(share), "tensor_core_share": rounded_ratio(k.tensor_core_share or 0),
        "matmul_share_of_kernel_time": rounded_ratio(matmul_share), "kernels_per_step": round(k.count / _steps(ctx), 1),
        "top_kernel": {"name": top.name, "share": rounded_ratio(top.share)} if top else None})


def _with_device_wait(ctx: Context, found: list[Found]) -> list[Found]:
    """Say so in the primary pattern when the GPU idles a large part of the step with work queued (no pattern's
    fault)."""
    share = ctx.share("device_wait")
    if share < DEVICE_WAIT_NOTE or not found:
        return found
    primary = max(found, key=lambda f: f.share)
    noted = primary.adding(f" The GPU also idles {share_text(share)} of each step with work already queued "
                           "(waiting on events, other streams or other ranks).", device_wait_share=rounded_ratio(share))
    return [noted if f is primary else f for f in found]


GPU_PATTERNS: tuple[Callable[[Context], Found | None], ...] = (
    input_bound, copy_bound, sync_bound, cpu_compute_bound, launch_bound, communication_bound, gpu_compute_bound)
