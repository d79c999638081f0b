"""`amp`: the model's forward under `torch.autocast` (bfloat16 where supported, else float16 with a GradScaler).

Also carries out `cpu_bf16`, the diagnosis' name for bfloat16 autocast on a CPU with native bfloat16. On a CPU
without it (AVX512-BF16 or AMX) bfloat16 is emulated and far slower: tried there only when asked."""

from __future__ import annotations

from stepscope.tune.edits import Patchwork, mark, wrap_statement
from stepscope.tune.fix import Fix, Params, PlanContext
from stepscope.tune.points import Points
from stepscope.tune.wire import Settings


def _why_not(ctx: PlanContext) -> str:
    model = ctx.settings.model
    if model is None:
        return ""
    if model.autocast:
        return "already in effect (the forward runs under autocast)"
    if model.dtype != "float32":
        return f"the model's parameters are {model.dtype} already"
    if ctx.device.kind == "cpu" and not ctx.device.bf16_native and not ctx.asked:
        return ("this CPU has no bfloat16 in hardware (AVX512-BF16 or AMX): emulated, it is far slower; "
                "--fixes amp measures it anyway")
    return ""


def _params(ctx: PlanContext) -> Params:
    return {"dtype": "bfloat16" if ctx.device.bf16 else "float16"}


def _install(points: Points, params: Params) -> None:
    points.model.amp_dtype = str(params.get("dtype", "bfloat16"))


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    dtype = params.get("dtype", "bfloat16")
    header = f'with torch.autocast("{device_kind}", dtype=torch.{dtype}):{mark("amp")}'
    if dtype == "float16":
        header += " (float16: scale the loss with torch.amp.GradScaler)"
    return wrap_statement(work, settings.model_site, header)


FIX = Fix(id="amp", code="with torch.autocast(device_type, dtype=torch.bfloat16): loss = ...", order=100,
          needs="model", tolerance=0.05, carries=("cpu_bf16",), install=_install, write=_write, why_not=_why_not,
          params=_params)
