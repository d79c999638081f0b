"""`tf32`: float32 matmuls and convolutions on TF32 tensor cores (10 bits of mantissa in the products).

Tried only where the diagnosis sees float32 matmuls on tensor-core hardware."""

from __future__ import annotations

from stepscope.tune.edits import Patchwork, after_imports, mark
from stepscope.tune.fix import Fix, Params
from stepscope.tune.points import Points
from stepscope.tune.wire import Settings


def _install(points: Points, params: Params) -> None:
    points.tf32 = True


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    return after_imports(work, settings, f"torch.backends.cuda.matmul.allow_tf32 = True{mark('tf32')}")


FIX = Fix(id="tf32", code="torch.backends.cuda.matmul.allow_tf32 = True", order=80, cuda_only=True,
          recommended_only=True, tolerance=0.02, install=_install, write=_write)
