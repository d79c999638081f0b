"""`larger_batch` (only with --allow-batch-change): `DataLoader(batch_size=k * b)`, spreading each step's fixed
costs over more samples. It changes the optimisation: the learning rate must follow (linear scaling: lr x k, with a
warm-up), which the patch says on the line it changes; the trial measures throughput only."""

from __future__ import annotations

from collections.abc import Sequence

from stepscope.tune.edits import Patchwork, keyword_at, named
from stepscope.tune.fix import Fix, Params, PlanContext
from stepscope.tune.points import Points
from stepscope.tune.wire import DeviceInfo, Settings

MEMORY_HEADROOM = 0.9  # a bigger batch must leave a tenth of the device's memory free
FACTORS = (2, 4)


def batch_factors(settings: Settings, device: DeviceInfo) -> Sequence[int]:
    """Batch multipliers whose peak memory (scaled from the baseline's) fits the device."""
    loader = settings.loaders[0] if settings.loaders else None
    if loader is None or not loader.batch_size:
        return ()
    peak, total = settings.peak_memory_bytes, device.total_memory_bytes
    if device.kind != "cuda" or not peak or not total:
        return FACTORS
    return tuple(k for k in FACTORS if k * peak <= MEMORY_HEADROOM * total)


def _options(ctx: PlanContext) -> tuple[Params, ...] | str:
    factors = batch_factors(ctx.settings, ctx.device)
    return tuple({"larger_batch": {"factor": k}} for k in factors) or "no room in device memory for a bigger batch"


def _install(points: Points, params: Params) -> None:
    points.loader.batch_factor = int(params.get("factor", 2))


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    k = int(params.get("factor", 2))
    return keyword_at(work, settings.loaders, "batch_size", None, named("DataLoader"), scale=k)


FIX = Fix(id="larger_batch", code="DataLoader(..., batch_size=2 * batch_size)  # and rescale the learning rate",
          order=40, needs="loader", changes_batch=True, install=_install, write=_write, options=_options)
