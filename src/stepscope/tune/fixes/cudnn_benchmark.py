"""`cudnn_benchmark`: cuDNN times its convolution algorithms for each new shape and keeps the fastest
(`torch.backends.cudnn.benchmark = True`); the autotuning is paid in the warm-up."""

from __future__ import annotations

from stepscope.tune.edits import Patchwork, after_imports, mark
from stepscope.tune.fix import Fix, Params, PlanContext
from stepscope.tune.points import Points
from stepscope.tune.wire import Settings


def _why_not(ctx: PlanContext) -> str:
    model = ctx.settings.model
    return "the model has no 2-d convolution" if model is not None and not model.conv else ""


def _install(points: Points, params: Params) -> None:
    points.cudnn_benchmark = True


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    return after_imports(work, settings, f"torch.backends.cudnn.benchmark = True{mark('cudnn_benchmark')}")


FIX = Fix(id="cudnn_benchmark", code="torch.backends.cudnn.benchmark = True", order=90, needs="model",
          cuda_only=True, autotunes=True, tolerance=0.01, install=_install, write=_write, why_not=_why_not)
