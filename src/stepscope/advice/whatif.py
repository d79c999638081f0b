"""Estimated gains, reasoned from the measured timeline: what a step would take with one cause removed.

Every estimate is a model, not a measurement; each says its assumptions in words. Estimates are made one
fix at a time against the measured step, so they do not multiply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stepscope.advice.context import Context
from stepscope.replay import whatif as w
from stepscope.replay import whatif_copies as wc
from stepscope.replay.host_clock import HostCost
from stepscope.replay.recorded import BOTH_READINGS_APART, recorded_cost
from stepscope.units import ns_text

CAVEAT = "An estimate from this trace's timeline, not a measurement."
# Matmul/conv kernel time divided by this under AMP (fp16/bf16 on tensor cores): from fp32 without tensor
# cores, peak rates differ 8-16x but real layers gain ~3x; from TF32, bf16's peak is 2x TF32's.
AMP_FACTOR = {"fp32": 3.0, "tf32": 2.0}
# fp32 matmuls moved to TF32 tensor cores (Ampere+): peak 8x, real GEMMs and convolutions ~2x.
TF32_FACTOR = 2.0
# Pinned host-to-device bandwidth when the trace has no pinned copy to measure (GB/s): PCIe 3, 4, 5 x16.
PINNED_GB_S_BY_MAJOR = {7: 11.0, 8: 22.0, 9: 45.0}
PINNED_GB_S_DEFAULT = 11.0
# torch.compile fuses chains of elementwise ops: about 3 kernels become 1, reading memory about half as often.
FUSION_LAUNCHES_KEPT = 1 / 3
FUSION_TIME_KEPT = 0.5
# A fused or foreach optimizer: a handful of launches instead of several per parameter (host ~10% of
# before), one pass over the parameters instead of several (GPU ~half).
FUSED_OPTIMIZER_HOST_KEPT = 0.1
FUSED_OPTIMIZER_GPU_KEPT = 0.5
# DataLoader workers the estimate assumes (what the recommendation suggests), each on a spare core.
WORKERS_ASSUMED = 4
# With overlap, at most the compute time can hide communication; a non-GPU accelerator: assume half.
HOST_VIEW_HIDDEN = 0.5


@dataclass(frozen=True)
class Estimate:
    """A fix's estimated gain and the sentence that says it."""

    speedup: float  # measured step time / estimated step time (or samples/s ratio for a bigger batch), unrounded
    text: str


def headline_ns(ctx: Context, step_ns: float) -> float:
    """The step an estimate's text starts from: a live capture's unprofiled step (the report's headline), else the
    step the estimate was made on. The gain is a ratio; it is said from the figure the reader sees at the top."""
    ref = ctx.run.reference if ctx.run is not None else None
    return ref.step_us * 1e3 if ref is not None and ref.step_us else step_ns


def _from_to(ctx: Context, step: float, speedup: float) -> str:
    return step_to(ctx, step, step / speedup if speedup else step)


def step_to(ctx: Context, step: float, new: float) -> str:
    """'step 993 ms -> ~800 ms': the estimate's change of the step `step` to `new`, said from the headline's step
    (the same ratio), so that every estimate on the screen starts from the step the reader sees at the top."""
    shown = headline_ns(ctx, step)
    return f"step {ns_text(shown)} -> ~{ns_text(shown * new / step if step else shown)}"


def step_without(ctx: Context, saved_ns: float, what: str, floor_ns: float = 0.0, why_floor: str = "") -> Estimate:
    """The step with saved_ns removed, never below floor_ns (e.g. the GPU's busy time)."""
    step = ctx.step_ns
    new = max(step - max(saved_ns, 0.0), floor_ns, 1.0)
    speedup = step / new if step else 1.0
    floor = f"; {why_floor}" if why_floor and new == floor_ns else ""
    return Estimate(speedup, f"{what}: {_from_to(ctx, step, speedup)} ({speedup:.2f}x){floor}. {CAVEAT}")


def gpu_busy_ns(ctx: Context) -> float:
    """What the GPU must do per step whatever the host does: kernels, exposed collectives and copies."""
    return ctx.part_ns("compute", "communication", "copy_htod", "copy_other")


def mixed_saving(ctx: Context, host_ns: float, gpu_ns: float) -> float:
    """Removing work that costs host_ns on the host and gpu_ns on the GPU: host time shortens the step where the
    GPU waits for the host, GPU time where the GPU is busy computing."""
    return host_ns * ctx.host_wait_share + gpu_ns * ctx.compute_share


def pinned_gb_s(ctx: Context) -> tuple[float, str]:
    """Pinned HtoD bandwidth: measured in this trace when it can be, else a PCIe figure for the GPU."""
    measured = ctx.host_to_device.pinned_gb_s
    if measured:
        return measured, f"pinned copies in this trace reach {measured:.1f} GB/s"
    cc = ctx.compute_capability
    bw = PINNED_GB_S_BY_MAJOR.get(cc[0], PINNED_GB_S_DEFAULT) if cc else PINNED_GB_S_DEFAULT
    return bw, f"assuming {bw:.0f} GB/s for pinned copies (PCIe x16 for this GPU generation)"


def per_step_update_ns(ctx: Context) -> float:
    """Host time per step in optimizer.step() and zero_grad(): work sized by the weights, not the batch."""
    return ctx.optimizer.host_ns + ctx.zeroing.host_ns


def bigger_batch(ctx: Context, k: int) -> Estimate:
    """Samples/s with a batch k times bigger: per-sample work scales by k, per-step overhead does not."""
    step = ctx.step_ns
    if ctx.accelerator == "gpu":
        # The replay's model (replay/whatif.bigger_batch), for a trace too large to replay: the device's work takes
        # k times as long except the optimizer's kernels (sized by the weights); the host's work per step stays
        # (taken as the whole step: it errs low). Collectives are taken to grow too (all-to-all does; all-reduce
        # does not), so it errs low again.
        busy = gpu_busy_ns(ctx)
        fixed = min(ctx.optimizer.gpu_ns, busy)
        new = max(step, k * (busy - fixed) + fixed + ctx.part_ns("device_wait"))
        how = (f"kernels and copies take {k}x as long (the optimizer's do not: they are sized by the weights); the "
               "host's work per step stays; the step is the longer of host and GPU")
    else:
        b = ctx.facts.breakdown.mean()
        ops = max(b["cpu_exec"] - per_step_update_ns(ctx), 0.0)
        new = step + (k - 1) * (ops + ctx.part_ns("dataloader"))
        how = (f"op time and data loading grow {k}x; Python and dispatch overhead and the optimizer's update "
               "and zero_grad (sized by the weights, not the batch) stay")
    speedup = k * step / new if new else 1.0
    return Estimate(speedup, f"Batch {k}x bigger: {how}; {step_to(ctx, step, new)} for {k}x the "
                                       f"samples ({speedup:.2f}x samples/s). {CAVEAT}")


# Replays are made for traces up to this many events: beyond it each costs seconds, and the formulas stand in.
REPLAY_MAX_EVENTS = 150_000


# The fixes whose gain is the device's work done sooner: on a recorded trace, a host slowed by the profiler caps
# it (the GPU waits on the host the profiler slowed), so they are replayed without the profiler's default cost.
# Not the fixes that take host work away or spread it over more samples (workers, CUDA graphs, set_to_none, a
# bigger batch): on the H100 fixtures against plain runs (tests/test_estimates_plain.py) the default made the
# workers' estimates worse (the walk-through's rung 1: 1.86x -> 2.15x against 1.75x measured).
DEVICE_SIDE = frozenset({"amp", "pin_memory", "uint8_transfer", "resident_tensors", "copy_overlap", "half_transfer"})


def without_profiler(ctx: Context, fix: str) -> tuple[HostCost | None, str]:
    """The profiler's cost a fix's what-if takes out of the host, in the replay that makes the change: none for a
    live capture's timeline (the report's, the profiler's cost already taken out by stepscope.replay.deperturb, or
    left in with the reason said); for a device-side fix on a recorded trace, what stepscope.replay.recorded decides
    (the default per event and what the settings the trace was recorded with add), so that the profiler's own cost
    does not decide the gain. With the assumption it adds."""
    if not ctx.recorded or fix not in DEVICE_SIDE:
        return None, ""
    rc = recorded_cost(ctx.facts.trace)
    return rc.cost, rc.text


def _other_reading(ctx: Context, fix: str, speedup: float,
                   makers: dict[str, Callable[[HostCost | None], w.WhatIf | None]]) -> list[str]:
    """Where the settings' share of the profiler's cost decides the host/device balance, the fix's gain with the
    default cost alone too: both readings said (the estimate is the settings' one)."""
    cost, _ = without_profiler(ctx, fix)
    rc = recorded_cost(ctx.facts.trace)
    if cost is None or not rc.has_settings:
        return []
    other = makers[fix](rc.default)
    if other is None or abs(other.speedup / speedup - 1) <= BOTH_READINGS_APART:
        return []
    return [f"the host/device balance depends on the profiler's cost: with its default per event alone (the "
            f"settings' share left in) the gain is {other.speedup:.2f}x, with the settings' share taken out "
            f"{speedup:.2f}x (this estimate)"]


def replayed(ctx: Context, fix: str, **params: float | int | bool | None) -> Estimate | None:
    """The fix's gain as the replay of the step's changed graph (stepscope.replay.whatif), without the profiler's
    cost (`without_profiler`); None where that fix cannot be replayed on this trace (nothing it would change, no GPU,
    or a trace too large to replay per fix)."""
    if ctx.accelerator != "gpu" or len(ctx.facts.trace.events) > REPLAY_MAX_EVENTS:
        return None
    trace = ctx.facts.trace
    cost, profiler = without_profiler(ctx, fix)
    makers: dict[str, Callable[[HostCost | None], w.WhatIf | None]] = {
        "dataloader_workers": lambda c: w.more_workers(trace, int(params.get("workers") or WORKERS_ASSUMED),
                                                     params.get("free_cores"),  # type: ignore[arg-type]
                                                     bool(params.get("waits_on_storage")), host_cost=c),
        "pin_memory": lambda c: w.pinned_copies(trace, float(params["pinned_gb_s"] or PINNED_GB_S_DEFAULT),
                                              host_cost=c),
        "larger_batch": lambda c: w.bigger_batch(trace, float(params.get("k") or 2), host_cost=c),
        "uint8_transfer": lambda c: w.uint8_inputs(trace, host_cost=c),
        "amp": lambda c: w.amp(trace, AMP_FACTOR, host_cost=c, after=w.workers_change(
            trace, int(params["after_workers"]), params.get("free_cores"),  # type: ignore[arg-type]
            bool(params.get("waits_on_storage"))) if params.get("after_workers") else None),
        "cuda_graphs": lambda c: w.cuda_graphs(trace, host_cost=c),
        "set_to_none": lambda c: w.set_to_none(trace, host_cost=c),
    }
    result = makers[fix](cost)
    other = _other_reading(ctx, fix, result.speedup, makers) if result is not None and result.base_ns > 0 else []
    return said(ctx, result, profiler, other)


def said(ctx: Context, result: w.WhatIf | None, profiler: str, also: list[str] | None = None) -> Estimate | None:
    """A replayed what-if as the estimate's figure and sentence (with the profiler's cost taken out, `profiler`)."""
    if result is None or result.base_ns <= 0:
        return None
    assumed = [*result.assumptions, *([profiler] if profiler else []), *(also or [])]
    per = " per sample" if result.samples_factor != 1 else ""
    step_ratio = result.base_ns / result.step_ns if result.step_ns else 1.0
    return Estimate(result.speedup, (
        f"The step's graph replayed with the change: {_from_to(ctx, result.base_ns, step_ratio)}"
        + (f" for {result.samples_factor:g}x the samples" if per else "")
        + f" ({result.speedup:.2f}x{per}); assumed: {'; '.join(assumed)}. {CAVEAT}"))


def replayed_copies(ctx: Context, fix: str, copies: np.ndarray, waits: np.ndarray,
                    factor: float = 0.5) -> Estimate | None:
    """A copy fix's gain as the replay of the step's changed graph (stepscope.replay.whatif_copies), for the copies
    (GPU rows) it changes and the host calls that wait for them; `factor`: the bytes kept (half_transfer). None where
    it cannot be replayed (as `replayed`)."""
    if ctx.accelerator != "gpu" or len(ctx.facts.trace.events) > REPLAY_MAX_EVENTS:
        return None
    trace = ctx.facts.trace
    cost, profiler = without_profiler(ctx, fix)
    makers = {
        "resident_tensors": lambda: wc.resident(trace, copies, waits, host_cost=cost),
        "copy_overlap": lambda: wc.side_stream(trace, copies, waits, host_cost=cost),
        "half_transfer": lambda: wc.smaller(trace, copies, factor, host_cost=cost),
    }
    return said(ctx, makers[fix](), profiler)
