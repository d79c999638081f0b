"""The batch copies to the device (`Tensor.to`, `Tensor.cuda`): `non_blocking_copy` makes a copy from pinned host
memory non-blocking, and the call sites of those copies are recorded for the patch."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from stepscope.tune.points.undo import Patcher, user_site
from stepscope.tune.wire import CallSite, Settings

MAX_SITES = 16  # a loop that copies at many lines records its first sites, not all


class CopyPatch:
    def __init__(self, settings: Settings, applied: Counter[str]) -> None:
        self.settings = settings
        self.applied = applied
        self.non_blocking = False  # non_blocking_copy
        self.pid = os.getpid()
        self._sites: set[tuple[str | None, int | None]] = set()

    def install(self, patcher: Patcher) -> None:
        if not self.non_blocking:
            return
        import torch

        for name in ("to", "cuda"):
            patcher.replace(torch.Tensor, name, self._wrap(getattr(torch.Tensor, name)))

    def _wrap(self, original: Any) -> Any:
        import torch

        patch = self

        def copy(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            # An explicit non_blocking=False is overridden too (scripts often pass a flag tied to pin_memory);
            # only copies from pinned memory are touched, which is what makes non_blocking safe and useful.
            if (not kwargs.get("non_blocking", False) and not any(isinstance(a, bool) for a in args)
                    and not torch.compiler.is_compiling() and tensor.device.type == "cpu" and tensor.is_pinned()):
                kwargs["non_blocking"] = True
                patch.applied["non_blocking_copy"] += 1
                patch._record(original.__name__)
            return original(tensor, *args, **kwargs)

        copy.__name__ = original.__name__
        copy.__wrapped__ = original  # type: ignore[attr-defined]
        return copy

    def _record(self, method: str) -> None:
        if len(self._sites) < MAX_SITES:
            site = user_site(3)
            if site not in self._sites:
                self._sites.add(site)
                self.settings.copies.append(CallSite(file=site[0], line=site[1], value=method))
