"""The registry of tune fixes: one module per fix in this package, each defining `FIX` (a `tune.fix.Fix`) named as
its module. The plan, the trial's patches, the numerics guard, the patch writer and the CLI's help read them here;
adding a fix is adding a module (docs/architecture.md, "Where a new piece goes").

Recommendations no patch from outside can carry out are `CODE_CHANGES`: listed with the edit to make, never tried.
"""

from __future__ import annotations

import importlib
import pkgutil

from stepscope.tune.fix import Fix

CODE_CHANGES: dict[str, str] = {
    "remove_sync": "keep values on the device and read them every N steps (no .item(), .cpu() or print(tensor) "
                   "per step)",
    "offload_cpu_work": "move the host computation to the device, or vectorise it",
    "overlap_communication": "let collectives overlap the backward pass (DDP buckets, no_sync() with accumulation)",
    # The copy fixes tune cannot make from outside: where a tensor is made, on which stream a copy runs and what
    # dtype a tensor crosses in are the program's own (pin_memory + non_blocking_copy is the rung tune tries).
    "resident_tensors": "create the tensors on the device once, before the loop, instead of copying them each step",
    "copy_overlap": "issue the copies on a side stream (torch.cuda.stream) from pinned memory with non_blocking=True, "
                    "a step ahead, and have the compute stream wait_stream() on it",
    "half_transfer": "cast the tensors to bfloat16 on the host (or store them so) and back to float32 on the device",
}


def _load() -> dict[str, Fix]:
    found: list[Fix] = []
    for info in pkgutil.iter_modules(__path__):
        fix = importlib.import_module(f"{__name__}.{info.name}").FIX
        if fix.id != info.name:
            raise ValueError(f"tune/fixes/{info.name}.py defines the fix {fix.id!r}: a fix's module is named as it")
        found.append(fix)
    return {f.id: f for f in sorted(found, key=lambda f: (f.order, f.id))}


FIXES: dict[str, Fix] = _load()  # in the walk-through's order


def known_ids() -> list[str]:
    """Every id --fixes accepts: the fixes, and the code changes (listed, not tried)."""
    return sorted({*FIXES, *CODE_CHANGES})


def carrying(rec_id: str) -> str | None:
    """The fix that carries out a recommendation: its own id, or one that names it in `carries`."""
    if rec_id in FIXES:
        return rec_id
    return next((f.id for f in FIXES.values() if rec_id in f.carries), None)
