"""`torch_compile`: the model compiled in place (`model.compile()`): fused kernels, less Python per step. Its
compilation is paid in the warm-up of every run that compiles (reported apart, as compile time)."""

from __future__ import annotations

from stepscope.tune.edits import Patchwork, inserted, mark, model_statement
from stepscope.tune.fix import Fix, Params, PlanContext
from stepscope.tune.points import Points
from stepscope.tune.wire import Settings


def compiled_already(ctx: PlanContext) -> str:
    model = ctx.settings.model
    return "already in effect (the model is compiled)" if model is not None and model.compiled else ""


def _install(points: Points, params: Params) -> None:
    if points.model.compile_mode is None:
        points.model.compile_mode = str(params.get("mode", "default"))


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    if inserted(work, "cuda_graphs"):  # its compile call does this one's work
        return True
    found = model_statement(work, settings)
    if found is None:
        return False
    edits, stmt, var = found
    edits.insert_after(stmt.end_lineno or stmt.lineno, f"{var}.compile(){mark('torch_compile')}", stmt.lineno)
    return True


FIX = Fix(id="torch_compile", code="model.compile()  # or model = torch.compile(model)", order=120, needs="model",
          compiles=True, tolerance=0.01, install=_install, write=_write, why_not=compiled_already)
