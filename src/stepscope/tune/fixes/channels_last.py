"""`channels_last`: the model's 4-d parameters in NHWC layout (`model.to(memory_format=torch.channels_last)`),
the layout tensor-core and oneDNN convolutions run fastest in; parameters change in place, so the optimizer keeps
them."""

from __future__ import annotations

from stepscope.tune.edits import Patchwork, mark, model_statement
from stepscope.tune.fix import Fix, Params, PlanContext
from stepscope.tune.points import Points
from stepscope.tune.wire import Settings


def _why_not(ctx: PlanContext) -> str:
    model = ctx.settings.model
    if model is not None and not model.conv:
        return "the model has no 2-d convolution"
    if model is not None and model.channels_last:
        return "already in effect (channels_last)"
    return ""


def _install(points: Points, params: Params) -> None:
    points.model.channels_last = True


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    found = model_statement(work, settings)
    if found is None:
        return False
    edits, stmt, var = found
    edits.insert_after(stmt.end_lineno or stmt.lineno,
                       f"{var} = {var}.to(memory_format=torch.channels_last){mark('channels_last')}", stmt.lineno)
    return True


FIX = Fix(id="channels_last", code="model = model.to(memory_format=torch.channels_last)", order=110, needs="model",
          tolerance=0.01, install=_install, write=_write, why_not=_why_not)
