"""Fixes for exposed host-to-device copies: pinned memory, asynchronous copies, fewer bytes, tensors kept on the
device, copies overlapped on a side stream."""

from __future__ import annotations

import numpy as np

from stepscope.advice.context import Context
from stepscope.advice.recommendation import MIN_GAIN, recommendation
from stepscope.advice.whatif import Estimate, pinned_gb_s, replayed, replayed_copies, step_without
from stepscope.analysis.copy_groups import FLOAT32, CopyGroups, compute_streams, copy_groups, pinned
from stepscope.model import report as s
from stepscope.units import bytes_text, rounded_ratio, us_from_ns

# Pageable copies smaller than this per step (scalars, indices) cost nothing worth changing code for.
PAGEABLE_MIN_BYTES = 1 << 20
# An image batch this large or larger is worth sending as uint8.
UINT8_MIN_BYTES = 1 << 20
# Copies of the same size from the same line every step, this many bytes a step or more, are worth keeping resident.
RESIDENT_MIN_BYTES = 1 << 20
# A float32 copy this large is a tensor of data worth halving (smaller ones: scalars, indices, masks).
HALF_MIN_COPY_BYTES = 1 << 16
# bfloat16 instead of float32: half the bytes.
HALF_FACTOR = 0.5


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


def _copies(ctx: Context) -> CopyGroups | None:
    """The steps' host-to-device copies as the copy fixes see them (GPU runs only)."""
    if ctx.accelerator != "gpu" or not len(ctx.facts.steps):
        return None
    return copy_groups(ctx.facts.trace, ctx.facts.steps)


def _per_step(ctx: Context, groups: CopyGroups, sel: np.ndarray) -> tuple[float, float, float]:
    """The selected copies per step: how many, their bytes and their time (ns)."""
    ev, n = ctx.facts.trace.events, max(len(ctx.facts.steps), 1)
    rows = groups.rows[sel]
    return len(rows) / n, float(ev.bytes[rows].sum()) / n, float(ev.dur[rows].sum()) / n


def _formula(ctx: Context, groups: CopyGroups, sel: np.ndarray, kept: float, what: str) -> Estimate:
    """For a trace too large to replay: the exposed copy time and its syncs, in the selected copies' share of the
    bytes, shortened to `kept` of it."""
    ev = ctx.facts.trace.events
    total = float(ev.bytes[groups.rows].sum())
    share = float(ev.bytes[groups.rows[sel]].sum()) / total if total else 0.0
    return step_without(ctx, ctx.part_ns("copy_htod", "copy_sync") * share * (1 - kept), what)


def _copies_text(count: float, kind: str = "") -> str:
    return f"{count:g} {kind}cop{'y' if count == 1 else 'ies'}"


def resident_tensors(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation | s.Considered]:
    """At least RESIDENT_MIN_BYTES per step copied host-to-device in copies that recur every step (the same size
    from the same line): the same tensors, made once on the device."""
    groups = _copies(ctx)
    if groups is None:
        return []
    sel = groups.recurring & (groups.line >= 0)
    count, nbytes, copy_ns = _per_step(ctx, groups, groups.recurring)
    if nbytes < RESIDENT_MIN_BYTES:
        return []
    if ctx.dataloader.iterator is not None:
        return []  # the steps take batches from a DataLoader: copies of the same size are its batches, new bytes
    seen = f"{_copies_text(count)} of the same size each step to the GPU ({bytes_text(nbytes)} a step)"
    count, nbytes, copy_ns = _per_step(ctx, groups, sel)
    if nbytes < RESIDENT_MIN_BYTES:
        return [s.Considered(id="resident_tensors", reason=(
            f"{seen}, but the trace has no source lines (record with with_stack=True, or under stepscope run): "
            "the same size alone does not tell the same tensors from new batches of that size"))]
    rows = groups.rows[sel]
    est = replayed_copies(ctx, "resident_tensors", rows, groups.waits[sel]) or _formula(
        ctx, groups, sel, 0.0, "The copies made once before the loop")
    title = ("Keep the tensors copied to the GPU every step on the device "
             f"({_copies_text(count)}, {bytes_text(nbytes)} a step, the same size from the same line each step): "
             "move them once, before the loop, if they hold the same values each step")
    return [recommendation(ctx, "resident_tensors", title, {
        "recurring_copies_per_step": round(count, 2), "recurring_htod_bytes_per_step": round(nbytes),
        "recurring_copy_us_per_step": us_from_ns(copy_ns)}, est, rows)]


def copy_overlap(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """Pinned host-to-device copies on a stream that runs the compute, each waited for by the host (a synchronous
    copy or a sync right after it): copy on a side stream, non_blocking, ahead of the compute."""
    groups = _copies(ctx)
    if groups is None:
        return []
    trace = ctx.facts.trace
    on_compute = np.isin(trace.events.stream[groups.rows], compute_streams(trace))
    sel = pinned(trace, groups.rows) & (groups.waits >= 0) & on_compute
    count, nbytes, copy_ns = _per_step(ctx, groups, sel)
    if nbytes < PAGEABLE_MIN_BYTES:
        return []
    rows = groups.rows[sel]
    est = replayed_copies(ctx, "copy_overlap", rows, groups.waits[sel]) or step_without(
        ctx, ctx.part_ns("copy_htod", "copy_sync") - max(copy_ns - ctx.part_ns("compute"), 0.0),
        "The copies overlapped with the compute", floor_ns=copy_ns, why_floor="the copies' own time")
    title = (f"Copy on a side stream ahead of the compute: the host waits for {_copies_text(count, 'pinned ')} "
             f"({bytes_text(nbytes)} a step) on the compute stream; issue them under torch.cuda.stream(copy_stream) "
             "with .to(device, non_blocking=True), the compute stream waiting on it (wait_stream)")
    return [recommendation(ctx, "copy_overlap", title, {
        "waited_pinned_copies_per_step": round(count, 2), "waited_pinned_bytes_per_step": round(nbytes),
        "copy_us_per_step": us_from_ns(copy_ns), "compute_us_per_step": us_from_ns(ctx.part_ns("compute"))},
        est, rows)]


def half_transfer(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """At least PAGEABLE_MIN_BYTES per step copied host-to-device as float32 (or of unrecorded dtype) in copies of
    at least HALF_MIN_COPY_BYTES, not the image batch uint8_transfer sends: copy half the bytes (bfloat16)."""
    groups = _copies(ctx)
    if groups is None:
        return []
    ev = ctx.facts.trace.events
    dtype = groups.dtype
    known = np.array([t is not None for t in dtype], dtype=bool)
    floating = np.array([t is None or t in FLOAT32 for t in dtype], dtype=bool)
    sel = floating & (ev.bytes[groups.rows] >= HALF_MIN_COPY_BYTES)
    h2d = ctx.host_to_device
    if h2d.image_shape is not None and h2d.largest_copy_bytes >= UINT8_MIN_BYTES:  # uint8_transfer's copies
        sel &= ev.bytes[groups.rows] != h2d.largest_copy_bytes
    count, nbytes, copy_ns = _per_step(ctx, groups, sel)
    if nbytes < PAGEABLE_MIN_BYTES:
        return []
    rows = groups.rows[sel]
    est = replayed_copies(ctx, "half_transfer", rows, groups.waits[sel], HALF_FACTOR) or _formula(
        ctx, groups, sel, HALF_FACTOR, "Half the bytes to copy")
    sure = bool(known[sel].all())
    title = (("Copy the float32 tensors" if sure else "If the tensors are float32 (the trace has no dtypes), copy "
              "them") + f" ({bytes_text(nbytes)} a step) to the GPU as bfloat16, half the "
             "bytes, and cast them there where the precision allows (uint8 or int16 where the values are integers)")
    return [recommendation(ctx, "half_transfer", title, {
        "float32_htod_bytes_per_step": round(nbytes), "copies_per_step": round(count, 2),
        "copy_us_per_step": us_from_ns(copy_ns), "dtype_recorded": sure}, est, rows)]
