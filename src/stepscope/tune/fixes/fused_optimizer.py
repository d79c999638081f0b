"""`fused_optimizer`: torch.optim's fused (one kernel for the whole update) or foreach implementation, set on the
optimizer's constructor unless the script chose one."""

from __future__ import annotations

from stepscope.tune.edits import Patchwork, keyword_at, named
from stepscope.tune.fix import Fix, Params, PlanContext
from stepscope.tune.points import Points
from stepscope.tune.wire import Settings


def _why_not(ctx: PlanContext) -> str:
    if ctx.settings.optimizers and all(o.fused or not o.supports_fused for o in ctx.settings.optimizers):
        return "already in effect (fused, or not offered by the optimizer: foreach is the default on CUDA)"
    return ""


def _params(ctx: PlanContext) -> Params:
    return {"mode": "fused" if ctx.device.kind == "cuda" else "foreach"}


def _install(points: Points, params: Params) -> None:
    points.optimizer.fused = str(params.get("mode", "fused"))


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    mode = params.get("mode", "fused")
    return keyword_at(work, settings.optimizers, mode, "True", named(*{o.cls for o in settings.optimizers}))


FIX = Fix(id="fused_optimizer", code="torch.optim.AdamW(..., fused=True)", order=70, needs="optimizer",
          cuda_only=True, install=_install, write=_write, why_not=_why_not, params=_params)
