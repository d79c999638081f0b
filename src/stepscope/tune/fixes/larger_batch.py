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
MAX_FACTOR = 16  # the published walk-through went from 32 to 512
UNKNOWN_MEMORY = (2, 4)  # without the device's memory (a CPU): x2 and x4 only
MIN_BATCHES = 2  # an epoch keeps at least two batches of the bigger size


def batch_factors(settings: Settings, device: DeviceInfo) -> Sequence[int]:
    """Batch multipliers to try in turn, doubling: those whose peak memory (the baseline's, scaled by the factor,
    which errs high: weights and optimizer state do not grow) leaves MEMORY_HEADROOM of the device free, up to
    MAX_FACTOR and to an epoch of MIN_BATCHES batches."""
    loader = settings.loaders[0] if settings.loaders else None
    if loader is None or not loader.batch_size:
        return ()
    peak, total = settings.peak_memory_bytes, device.total_memory_bytes
    doubling = [2 ** i for i in range(1, MAX_FACTOR.bit_length())]
    if device.kind != "cuda" or not peak or not total:
        doubling = list(UNKNOWN_MEMORY)
    else:
        doubling = [k for k in doubling if k * peak <= MEMORY_HEADROOM * total]
    if loader.batches is not None:
        doubling = [k for k in doubling if loader.batches / k >= MIN_BATCHES]
    return tuple(doubling)


def _options(ctx: PlanContext) -> tuple[Params, ...] | str:
    factors = batch_factors(ctx.settings, ctx.device)
    if factors:
        return tuple({"larger_batch": {"factor": k}} for k in factors)
    loader = ctx.settings.loaders[0] if ctx.settings.loaders else None
    if loader is not None and not loader.batch_size:
        return ("the DataLoader takes no batch_size (batch_size=None: a sampler or the dataset makes the batches): "
                "change the batch where they are made")
    if loader is not None and loader.batches is not None and loader.batches / 2 < MIN_BATCHES:
        return f"an epoch of {loader.batches} batches is too short for a bigger batch"
    return "no room in device memory for a bigger batch"


def _install(points: Points, params: Params) -> None:
    points.loader.batch_factor = int(params.get("factor", 2))


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    k = int(params.get("factor", 2))
    return keyword_at(work, settings.loaders, "batch_size", None, named("DataLoader"), scale=k,
                      comment=f"stepscope tune: larger_batch; {_kept_note(params)}")


def _kept_note(params: Params) -> str:
    k = int(params.get("factor", 2))
    return f"the learning rate must follow the batch (x{k}: linear scaling, with a warm-up)"


FIX = Fix(id="larger_batch", code="DataLoader(..., batch_size=2 * batch_size)  # and rescale the learning rate",
          order=40, needs="loader", changes_batch=True, install=_install, write=_write, options=_options,
          kept_note=_kept_note)
