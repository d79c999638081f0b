"""Fixes for collectives that the step waits on."""

from __future__ import annotations

from stepscope.advice.context import Context
from stepscope.advice.found import MIN_SHARE
from stepscope.advice.recommendation import recommendation
from stepscope.advice.whatif import HOST_VIEW_HIDDEN, step_without
from stepscope.model import report as s
from stepscope.units import rounded_ratio, us_from_ns

# More collectives than this per step means gradients are reduced (nearly) one tensor at a time.
MANY_COLLECTIVES = 50


def overlap_communication(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """Collectives exposed for at least MIN_SHARE of the step."""
    if ctx.accelerator == "gpu":
        exposed, coll = ctx.part_ns("communication"), ctx.collectives
        hideable = min(1.0, ctx.part_ns("compute") / coll.ns) if coll.ns else 0.0
        what = "Collectives overlapped with compute, as far as compute time can hide them"
        count = coll.count
    else:
        exposed = ctx.facts.breakdown.mean()["communication"]
        hideable, count = HOST_VIEW_HIDDEN, None
        what = f"Half the time in collectives overlapped (host view; assumed {HOST_VIEW_HIDDEN:.0%})"
    if not ctx.step_ns or exposed < MIN_SHARE * ctx.step_ns:
        return []
    est = step_without(ctx, exposed * hideable, what)
    if count is not None and count >= MANY_COLLECTIVES:
        title = (f"Bucket gradient reductions: {count:.0f} collectives per step is one per tensor; use DDP's "
                 "buckets (bucket_cap_mb) and let them overlap the backward pass")
    else:
        title = ("Overlap collectives with compute: keep DDP's overlap on (no blocking waits in the backward "
                 "pass), prefetch the next batch's all-to-all, or accumulate gradients with no_sync()")
    return [recommendation(ctx, "overlap_communication", title, {
        "exposed_communication_share": rounded_ratio(exposed / ctx.step_ns), "exposed_us_per_step": us_from_ns(exposed),
        "collectives_per_step": round(count, 1) if count is not None else None}, est)]
