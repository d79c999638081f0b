"""`cuda_graphs`: the step replayed as CUDA graphs through torch.compile (`mode="reduce-overhead"`), which removes
the host's launch gaps; it includes torch_compile's fusion. Tried only where the diagnosis sees launch gaps."""

from __future__ import annotations

from stepscope.tune.edits import Patchwork, mark, model_statement, withdraw
from stepscope.tune.fix import Fix, Params, PlanContext
from stepscope.tune.fixes.torch_compile import compiled_already
from stepscope.tune.points import Points
from stepscope.tune.wire import Settings


def _params(ctx: PlanContext) -> Params:
    return {"mode": "reduce-overhead"}


def _install(points: Points, params: Params) -> None:
    points.model.compile_mode = "reduce-overhead"


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    found = model_statement(work, settings)
    if found is None:
        return False
    withdraw(work, "torch_compile")  # one compile call, with CUDA graphs
    edits, stmt, var = found
    edits.insert_after(stmt.end_lineno or stmt.lineno, f'{var}.compile(mode="reduce-overhead"){mark("cuda_graphs")}',
                       stmt.lineno)
    return True


FIX = Fix(id="cuda_graphs", code="model.compile(mode='reduce-overhead')", order=130, needs="model", cuda_only=True,
          recommended_only=True, compiles=True, tolerance=0.01, install=_install, write=_write,
          why_not=compiled_already, params=_params)
