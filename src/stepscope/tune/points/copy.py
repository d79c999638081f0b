"""The batch copies to the device (`Tensor.to`, `Tensor.cuda`): `non_blocking_copy` makes a copy from pinned host
memory non-blocking; under `uint8_transfer` a uint8 image batch is converted and normalised on the device right
after its copy. The call sites of those copies are recorded for the patch.

Forked DataLoader workers inherit the patched methods, and a dataset's transforms call `.to()` there: in a worker
the original runs untouched. Asking whether memory is pinned touches CUDA, which a forked process must never do,
so it is asked only in the main process and only for a copy to a CUDA device.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from typing import Any

from stepscope.tune.points.failure import owned_by
from stepscope.tune.points.uint8 import Uint8Batches
from stepscope.tune.points.undo import Patcher, user_site
from stepscope.tune.wire import CallSite, Settings

MAX_SITES = 16  # a loop that copies at many lines records its first sites, not all


class CopyPatch:
    def __init__(self, settings: Settings, applied: Counter[str], uint8: Uint8Batches | None = None) -> None:
        self.settings = settings
        self.applied = applied
        self.uint8 = uint8 or Uint8Batches()
        self.non_blocking = False  # non_blocking_copy
        self.pid = os.getpid()
        self._sites: set[tuple[str | None, int | None]] = set()
        self._batch_sites: set[tuple[str | None, int | None]] = set()
        self._inside = threading.local()  # in a copy already, on this thread

    def install(self, patcher: Patcher) -> None:
        if not self.non_blocking and not self.uint8.active:
            return
        import torch

        for name in ("to", "cuda"):
            patcher.replace(torch.Tensor, name, self._wrap(getattr(torch.Tensor, name)))

    def _wrap(self, original: Any) -> Any:
        patch = self
        cuda_method = original.__name__ == "cuda"

        def copy(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if os.getpid() != patch.pid:  # a DataLoader worker: nothing of ours runs there
                return original(tensor, *args, **kwargs)
            if getattr(patch._inside, "copy", False):  # a TorchFunctionMode's handler called us again: once is all
                return original(tensor, *args, **kwargs)
            patch._inside.copy = True
            try:
                return patched(tensor, args, kwargs)
            finally:
                patch._inside.copy = False

        def patched(tensor: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
            if patch.non_blocking:
                with owned_by("non_blocking_copy"):
                    if patch._make_non_blocking(tensor, cuda_method, args, kwargs):
                        kwargs["non_blocking"] = True
                        patch.applied["non_blocking_copy"] += 1
                        patch._record(original.__name__, patch._sites, patch.settings.copies)
            if patch.uint8.active and patch.uint8.marked(tensor):
                with owned_by("uint8_transfer"):
                    args, dtype = _without_dtype(args)
                    dtype = kwargs.pop("dtype", dtype)
                    patch._record(original.__name__, patch._batch_sites, patch.settings.batch_copies)
                moved = original(tensor, *args, **kwargs)  # the copy, still uint8: a quarter of the bytes
                converted = patch.uint8.convert(moved)
                return converted if dtype is None else converted.to(dtype)
            return original(tensor, *args, **kwargs)

        copy.__name__ = original.__name__
        copy.__wrapped__ = original  # type: ignore[attr-defined]
        return copy

    @staticmethod
    def _make_non_blocking(tensor: Any, cuda_method: bool, args: tuple, kwargs: dict[str, Any]) -> bool:
        """A copy from pinned host memory to a CUDA device that did not ask for non_blocking. An explicit
        non_blocking=False is overridden too (scripts often pass a flag tied to pin_memory): only copies from pinned
        memory are touched, which is what makes non_blocking safe and useful."""
        import torch

        if kwargs.get("non_blocking", False) or any(isinstance(a, bool) for a in args):
            return False
        if torch.compiler.is_compiling() or tensor.device.type != "cpu":
            return False
        if not (cuda_method or to_cuda(args, kwargs)) or not torch.cuda.is_initialized():
            return False
        return bool(tensor.is_pinned())

    @staticmethod
    def _record(method: str, seen: set[tuple[str | None, int | None]], sites: list[CallSite]) -> None:
        if len(seen) < MAX_SITES:
            site = user_site(4)  # user_site, _record, patched, copy: then the caller
            if site not in seen:
                seen.add(site)
                sites.append(CallSite(file=site[0], line=site[1], value=method))


def _without_dtype(args: tuple) -> tuple[tuple, Any]:
    """`Tensor.to`'s positional arguments less a dtype (the conversion makes float32), and that dtype."""
    import torch

    dtype = next((a for a in args if isinstance(a, torch.dtype)), None)
    return tuple(a for a in args if not isinstance(a, torch.dtype)), dtype


def to_cuda(args: tuple, kwargs: dict[str, Any]) -> bool:
    """Whether `Tensor.to(*args, **kwargs)` names a CUDA device (a device, its name, or a tensor on it)."""
    import torch

    for value in (kwargs.get("device"), *args):
        if isinstance(value, torch.Tensor):
            return value.device.type == "cuda"
        if isinstance(value, (str, torch.device)):
            try:
                return torch.device(value).type == "cuda"
            except RuntimeError:
                return False
    return False
