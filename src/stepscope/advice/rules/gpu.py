"""Fixes that make the GPU's own work cheaper: lower precision on tensor cores."""

from __future__ import annotations

from stepscope.advice.context import Context
from stepscope.advice.recommendation import MIN_GAIN, recommendation
from stepscope.advice.rules.dataloader import first_workers
from stepscope.advice.whatif import AMP_FACTOR, TF32_FACTOR, Estimate, replayed, step_without
from stepscope.model import report as s
from stepscope.units import rounded_ratio, share_text, us_from_ns

# Matmuls and convolutions under a tenth of kernel time are not worth a precision change.
MATMUL_MIN_SHARE = 0.10
# If a tenth of matmul time already runs in half precision, AMP is (partly) on already.
HALF_MAX_SHARE = 0.10


def _tensor_cores(ctx: Context, min_major: int) -> bool:
    """The device has tensor (matrix) cores of at least this CUDA generation; ROCm CDNA counts for AMP."""
    cc = ctx.compute_capability
    device = ctx.device
    if device is not None and device.kind == "rocm":
        return min_major <= 7
    return cc is not None and cc[0] >= min_major


def autocast_on(ctx: Context) -> bool:
    """The model's forward ran under autocast (capture saw it)."""
    st = ctx.settings
    return st is not None and st.autocast not in (None, "off")


def amp(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """fp32 or TF32 matmuls on a GPU with tensor cores and little half-precision use."""
    mm = ctx.matmul
    if ctx.accelerator != "gpu" or not _tensor_cores(ctx, 7) or not mm.kernel or autocast_on(ctx):
        return []
    eligible = mm.fp32 + mm.tf32
    if eligible < MATMUL_MIN_SHARE * mm.kernel or mm.half > HALF_MAX_SHARE * mm.total:
        return []
    gpu_saved = mm.fp32 * (1 - 1 / AMP_FACTOR["fp32"]) + mm.tf32 * (1 - 1 / AMP_FACTOR["tf32"])
    est = replayed(ctx, "amp") or step_without(ctx, gpu_saved * ctx.compute_share,
                       f"Matmul/conv kernel time / {AMP_FACTOR['fp32']:.0f} from fp32 and / {AMP_FACTOR['tf32']:.0f} "
                       "from TF32 under AMP, counted where the GPU is the bottleneck "
                       f"({share_text(ctx.compute_share)})")
    after, est = _after_the_loader(ctx, est)
    # Under MIN_GAIN it is still returned: advice.worth_a_change lists it as considered, with its estimate.
    dtype = "torch.bfloat16" if ctx.compute_capability and ctx.compute_capability[0] >= 8 else "torch.float16"
    title = (f"{'Once the batches load in workers, t' if after else 'T'}rain in mixed precision: "
             f"{share_text(eligible / mm.kernel)} of kernel time is fp32 matmuls and convolutions with no "
             f"half-precision tensor-core use: torch.autocast('cuda', dtype={dtype})")
    return [recommendation(ctx, "amp", title, {
        "compute_capability": ctx.device.compute_capability if ctx.device else None,
        "matmul_share_of_kernel_time": rounded_ratio(mm.total / mm.kernel),
        "fp32_matmul_us_per_step": us_from_ns(mm.fp32),
        "tf32_matmul_us_per_step": us_from_ns(mm.tf32), "half_matmul_us_per_step": us_from_ns(mm.half),
        "tensor_core_share": rounded_ratio(ctx.facts.kernels.tensor_core_share or 0)}, est, after=after)]


def _after_the_loader(ctx: Context, alone: Estimate) -> tuple[str | None, Estimate]:
    """AMP's gain hidden by the host's own loading (single-process, on the step's path): the device's work done
    sooner cannot shorten a step the loading holds. Where AMP alone gains under MIN_GAIN and the batches load in the
    main process, its gain once they load in workers (dataloader_workers' change, replayed with it): the expert's
    next step after the loader's, said as building on it."""
    if alone.speedup >= MIN_GAIN or ctx.dataloader.iterator != "single-process":
        return None, alone
    target, free = first_workers(ctx)
    after = replayed(ctx, "amp", after_workers=target, free_cores=free)
    if after is None or after.speedup < MIN_GAIN:
        return None, alone
    return "dataloader_workers", after


def tf32(ctx: Context, patterns: list[s.Pattern]) -> list[s.Recommendation]:
    """fp32 matmuls without tensor cores on Ampere or newer."""
    mm = ctx.matmul
    cc = ctx.compute_capability
    if ctx.accelerator != "gpu" or cc is None or cc[0] < 8 or mm.fp32 < MATMUL_MIN_SHARE * max(mm.kernel, 1):
        return []
    st = ctx.settings
    if st is not None and (st.tf32_matmul or st.float32_matmul_precision in ("high", "medium")):
        return []  # allowed already: these fp32 kernels are ones TF32 does not apply to
    est = step_without(ctx, mm.fp32 * (1 - 1 / TF32_FACTOR) * ctx.compute_share,
                       f"fp32 matmul time / {TF32_FACTOR:.0f} on TF32 tensor cores, counted where the GPU is the "
                       f"bottleneck ({share_text(ctx.compute_share)})")
    if est.speedup < MIN_GAIN:
        return []
    title = ("Allow TF32 for fp32 matmuls (Ampere or newer): torch.backends.cuda.matmul.allow_tf32 = True "
             "or torch.set_float32_matmul_precision('high')")
    return [recommendation(ctx, "tf32", title, {
        "compute_capability": ctx.device.compute_capability if ctx.device else None,
        "fp32_matmul_us_per_step": us_from_ns(mm.fp32),
        "fp32_matmul_share_of_kernel_time": rounded_ratio(mm.fp32 / mm.kernel)}, est)]
