"""`pin_memory`: the DataLoader's batches in pinned (page-locked) host memory, copied by DMA at full speed.

Tried with `non_blocking_copy`, as one rung: a non-blocking copy is only asynchronous from pinned memory. The
pinning is done by the DataLoader's own pin thread in the main process, never in a worker."""

from __future__ import annotations

from stepscope.tune.edits import Patchwork, keyword_at, named
from stepscope.tune.fix import Fix, Params, PlanContext
from stepscope.tune.points import Points
from stepscope.tune.wire import Settings


def _why_not(ctx: PlanContext) -> str:
    loader = ctx.loader
    return "already in effect (pin_memory=True)" if loader is not None and loader.pin_memory else ""


def _install(points: Points, params: Params) -> None:
    points.loader.pin_memory = True


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    return keyword_at(work, settings.loaders, "pin_memory", "True", named("DataLoader"))


FIX = Fix(id="pin_memory", code="DataLoader(..., pin_memory=True)", order=30, needs="loader", cuda_only=True,
          together=("pin_memory", "non_blocking_copy"), install=_install, write=_write, why_not=_why_not)
