"""`non_blocking_copy`: batch copies from pinned memory made asynchronous (`x.to(device, non_blocking=True)`),
so the host queues the step's work while the copy runs. Tried with `pin_memory`, as one rung."""

from __future__ import annotations

from stepscope.tune.edits import Patchwork, keyword_at, named
from stepscope.tune.fix import Fix, Params
from stepscope.tune.points import Points
from stepscope.tune.wire import Settings


def _install(points: Points, params: Params) -> None:
    points.copy.non_blocking = True


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    return keyword_at(work, settings.copies, "non_blocking", "True", named("to", "cuda"), every=True)


FIX = Fix(id="non_blocking_copy", code="x.to(device, non_blocking=True)", order=31, cuda_only=True,
          together=("pin_memory", "non_blocking_copy"), install=_install, write=_write)
