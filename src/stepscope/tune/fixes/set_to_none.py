"""`set_to_none`: `optimizer.zero_grad(set_to_none=True)` frees the gradients instead of zeroing them (one
memset per parameter less each step; the default since PyTorch 2.0)."""

from __future__ import annotations

from stepscope.tune.edits import Patchwork, keyword_at, named
from stepscope.tune.fix import Fix, Params, PlanContext
from stepscope.tune.points import Points
from stepscope.tune.wire import Settings


def _why_not(ctx: PlanContext) -> str:
    if not ctx.settings.zero_grad:
        return "the program calls no zero_grad"
    if all(site.value for site in ctx.settings.zero_grad):
        return "already in effect (zero_grad(set_to_none=True), the default since PyTorch 2.0)"
    return ""


def _install(points: Points, params: Params) -> None:
    points.zero_grad.force = True


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    sites = [s for s in settings.zero_grad if s.value is False]
    return keyword_at(work, sites, "set_to_none", "True", named("zero_grad"))


FIX = Fix(id="set_to_none", code="optimizer.zero_grad(set_to_none=True)", order=60, install=_install, write=_write,
          why_not=_why_not)
