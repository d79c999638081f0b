"""Fixes for exposed host-to-device copies: pinned memory, asynchronous copies, fewer bytes."""

from __future__ import annotations

from stepscope.advice.context import Context
from stepscope.advice.recommendation import MIN_GAIN, recommendation
from stepscope.advice.whatif import pinned_gb_s, replayed, step_without
from stepscope.model import report as s
from stepscope.units import bytes_text, rounded_ratio, us_from_ns

# Pageable copies smaller than this per step (scalars, indices) cost nothing worth changing code for.
PAGEABLE_MIN_BYTES = 1 << 20
# An image batch this large or larger is worth sending as uint8.
UINT8_MIN_BYTES = 1 << 20


def pin_memory(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """At least PAGEABLE_MIN_BYTES per step copied from pageable memory."""
    pageable = float(ctx.facts.copies.pageable_htod_bytes_per_step.mean())
    if ctx.accelerator != "gpu" or pageable < PAGEABLE_MIN_BYTES:
        return []
    loader = ctx.settings.dataloader if ctx.settings is not None else None
    if loader is not None and loader.pin_memory:
        return []  # the DataLoader pins already: these copies are not its batches
    exposed = ctx.part_ns("copy_htod")
    measured = ctx.host_to_device.pageable_gb_s
    target, how = pinned_gb_s(ctx)
    saved = exposed * max(0.0, 1 - measured / target) if measured else 0.0
    est = replayed(ctx, "pin_memory", pinned_gb_s=target) or step_without(
        ctx, saved, f"Copies at pinned-memory speed ({how}; pageable ones reach {measured or 0:.1f} GB/s)")
    title = (f"Pin host memory for the {bytes_text(pageable)} per step copied to the GPU: "
             "DataLoader(..., pin_memory=True)")
    return [recommendation(ctx, "pin_memory", title, {
        "pageable_htod_bytes_per_step": round(pageable), "pageable_gb_s": round(measured or 0, 2),
        "exposed_copy_us_per_step": us_from_ns(exposed)}, est)]


def non_blocking_copy(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """A synchronisation right after a host-to-device copy."""
    costs = ctx.costs
    if costs is None:
        return []
    n = max(len(ctx.facts.steps), 1)
    rows = costs.blocking_rows[costs.blocking_after_htod]
    synced = int((costs.blocking_after_htod & costs.blocking_first).sum()) / n
    wait = ctx.part_ns("copy_sync")
    # Not blocked, the host runs ahead by the time it spent in the copy and its sync, hiding as much of
    # the later launch and CPU gaps.
    blocked = float(ctx.facts.trace.events.dur[rows].sum()) / n
    saved = wait + min(blocked, ctx.part_ns("launch", "cpu"))
    est = step_without(ctx, saved, f"The host no longer waits {blocked / 1e6:.3g} ms per step for its copies and "
                                   "launches the next kernels meanwhile")
    large = ctx.facts.copies.pageable_htod_bytes_per_step.mean() >= PAGEABLE_MIN_BYTES
    if synced == 0 or (est.speedup < MIN_GAIN and not large):
        return []
    title = "Copy batches asynchronously: x.to(device, non_blocking=True) from pinned memory"
    return [recommendation(ctx, "non_blocking_copy", title, {
        "syncs_after_copy_per_step": round(synced, 2), "copy_sync_wait_us_per_step": us_from_ns(wait),
        "host_blocked_us_per_step": us_from_ns(blocked),
        "copy_sync_share": rounded_ratio(wait / ctx.step_ns)}, est, rows)]


def uint8_transfer(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """The largest copy is a float32 image batch: send uint8, normalise on the GPU."""
    h2d = ctx.host_to_device
    shape = h2d.image_shape
    if ctx.accelerator != "gpu" or h2d.largest_copy_bytes < UINT8_MIN_BYTES or shape is None or shape[0] < 2:
        return []
    n_img, c, hgt, wid = shape
    saved = 0.75 * ctx.part_ns("copy_htod", "copy_sync")
    est = replayed(ctx, "uint8_transfer") or step_without(
        ctx, saved, "A quarter of the bytes to copy (uint8 instead of float32); the exposed copy time shrinks with "
                    "them")
    title = (f"Send the {n_img}x{c}x{hgt}x{wid} float32 image batch ({bytes_text(h2d.largest_copy_bytes)}) "
             "as uint8 and normalise on the GPU")
    return [recommendation(ctx, "uint8_transfer", title, {
        "largest_copy_bytes": h2d.largest_copy_bytes, "likely_shape": list(shape),
        "copy_us": us_from_ns(h2d.largest_copy_ns)}, est)]
