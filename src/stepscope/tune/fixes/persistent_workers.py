"""`persistent_workers`: keep the DataLoader's workers between epochs (`persistent_workers=True`).

Tried only where a run would see the workers restart: an epoch shorter than a run (or several loaders)."""

from __future__ import annotations

from stepscope.tune.edits import Patchwork, keyword_at, named
from stepscope.tune.fix import Fix, Params, PlanContext
from stepscope.tune.points import Points
from stepscope.tune.wire import Settings


def _why_not(ctx: PlanContext) -> str:
    loader = ctx.loader
    if loader is None:
        return ""
    if loader.persistent_workers:
        return "already in effect (persistent_workers=True)"
    if loader.batches is not None and loader.batches >= ctx.timed_steps and len(ctx.settings.loaders) == 1:
        return "the loader's epoch outlasts a trial: no worker restart to measure"
    return ""


def _install(points: Points, params: Params) -> None:
    points.loader.persistent_workers = True


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    return keyword_at(work, settings.loaders, "persistent_workers", "True", named("DataLoader"))


FIX = Fix(id="persistent_workers", code="DataLoader(..., persistent_workers=True)", order=20, needs="loader",
          install=_install, write=_write, why_not=_why_not)
