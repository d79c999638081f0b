"""The DataLoader's constructor: overrides for workers, pinned memory, persistent workers and the batch size, and
uint8_transfer's cut of the dataset's transform; it also records every loader's settings, call site and transform.
The batches the main loader yields are counted (the step clock's samples) and, under uint8_transfer, marked."""

from __future__ import annotations

import inspect
import os
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

from stepscope.capture.batch import batch_size_of
from stepscope.tune.points.failure import owned_by
from stepscope.tune.points.uint8 import Uint8Batches, Uint8Chain, find
from stepscope.tune.points.uint8_functional import Uint8Function
from stepscope.tune.points.undo import Patcher, is_library, user_site
from stepscope.tune.wire import LoaderSite, Settings, TransformSite

# DataLoader's arguments that it refuses with num_workers=0 (ValueError), and the value each takes without workers:
# dropped from the call when a trial loads in the main process, set so in the patch (tune/fixes/dataloader_workers).
REFUSED_WITHOUT_WORKERS = {"persistent_workers": "False", "prefetch_factor": "None", "multiprocessing_context": "None"}
MAX_SITES = 16  # a loop that builds a loader every epoch records its first sites, not all


class LoaderPatch:
    """Wraps DataLoader.__init__: applies the active fixes' overrides, then records what the loader uses."""

    def __init__(self, settings: Settings, applied: Counter[str], uint8: Uint8Batches | None = None) -> None:
        self.settings = settings
        self.applied = applied
        self.uint8 = uint8 or Uint8Batches()
        self.num_workers: int | None = None  # dataloader_workers
        self.pin_memory = False  # pin_memory
        self.persistent_workers = False  # persistent_workers
        self.batch_factor = 1  # larger_batch
        self.on_batch: Callable[[int | None], None] | None = None  # told each batch's size (the main loader's)
        self.pid = os.getpid()
        self._main: weakref.ref | None = None  # the dataset of the first loader to yield a batch
        self._patcher: Patcher | None = None

    def install(self, patcher: Patcher) -> None:
        from torch.utils.data import DataLoader

        self._patcher = patcher
        original = DataLoader.__init__
        signature = inspect.signature(original)
        patch = self

        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            if os.getpid() != patch.pid:
                original(loader, *args, **kwargs)
                return
            try:
                bound = signature.bind(loader, *args, **kwargs)
            except TypeError:  # arguments DataLoader does not take: let it say so itself
                original(loader, *args, **kwargs)
                return
            patch._override(bound.arguments)
            original(*bound.args, **bound.kwargs)
            patch._record(loader)
            patch._transform(loader)  # before any worker starts: they are given the dataset as it is then

        __init__.__wrapped__ = original  # type: ignore[attr-defined]
        patcher.replace(DataLoader, "__init__", __init__)
        if self.on_batch is not None or self.uint8.active:
            self._count_batches(patcher)

    def _count_batches(self, patcher: Patcher) -> None:
        """Each batch the main loader yields, counted by its size (the step clock's samples)."""
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        original = _BaseDataLoaderIter.__next__
        patch = self

        def __next__(iterator: Any) -> Any:
            batch = original(iterator)
            if os.getpid() == patch.pid and patch.on_batch is not None:
                main = patch._main() if patch._main is not None else None
                if main is None:
                    patch._main, main = weakref.ref(iterator._dataset), iterator._dataset
                if iterator._dataset is main:
                    patch.on_batch(batch_size_of(batch))
            if os.getpid() == patch.pid and patch.uint8.active:
                patch.uint8.mark(batch)
            return batch

        __next__.__wrapped__ = original  # type: ignore[attr-defined]
        patcher.replace(_BaseDataLoaderIter, "__next__", __next__)

    def _override(self, arguments: dict[str, Any]) -> None:
        if self.num_workers is not None:
            with owned_by("dataloader_workers"):
                if arguments.get("num_workers", 0) != self.num_workers:
                    arguments["num_workers"] = self.num_workers
                    self.applied["dataloader_workers"] += 1
                    if self.num_workers == 0:
                        for name in REFUSED_WITHOUT_WORKERS:
                            arguments.pop(name, None)
        if self.pin_memory:  # the DataLoader's pin thread, in this process, pins each batch: never a worker
            with owned_by("pin_memory"):
                if not arguments.get("pin_memory", False) and _cuda_available():
                    arguments["pin_memory"] = True
                    self.applied["pin_memory"] += 1
        if self.persistent_workers:
            with owned_by("persistent_workers"):
                if arguments.get("num_workers", 0) > 0 and not arguments.get("persistent_workers", False):
                    arguments["persistent_workers"] = True
                    self.applied["persistent_workers"] += 1
        if self.batch_factor > 1:
            with owned_by("larger_batch"):
                batch = arguments.get("batch_size", 1)
                if arguments.get("batch_sampler") is None and isinstance(batch, int):
                    arguments["batch_size"] = batch * self.batch_factor
                    self.applied["larger_batch"] += 1

    def _record(self, loader: Any) -> None:
        if len(self.settings.loaders) >= MAX_SITES:
            return
        file, line = user_site(3)
        try:
            batches: int | None = len(loader)
        except TypeError:  # an iterable-style dataset has no length
            batches = None
        self.settings.loaders.append(LoaderSite(
            file=file, line=line, num_workers=int(loader.num_workers), pin_memory=bool(loader.pin_memory),
            persistent_workers=bool(loader.persistent_workers), batch_size=loader.batch_size, batches=batches,
            prefetch_factor=loader.prefetch_factor))


    def _transform(self, loader: Any) -> None:
        """Record the dataset's transform; under uint8_transfer, cut it before its float conversion."""
        if len(self.settings.transforms) >= MAX_SITES:
            return
        found = find(loader.dataset)
        chain = getattr(found.owner, found.attr) if found is not None else getattr(loader.dataset, "transform", None)
        names = [type(t).__name__ for t in getattr(chain, "transforms", [])] if chain is not None else []
        if found is not None and found.function is not None:
            names = [found.function.__qualname__]
        self.settings.transforms.append(TransformSite(
            file=_user_file(found.function or found.owner if found is not None else loader.dataset), chain=names,
            ending=found.ending if found else "", mean=list(found.mean) if found and found.mean else None,
            std=list(found.std) if found and found.std else None))
        if self.uint8.active and found is not None and self._patcher is not None:
            with owned_by("uint8_transfer"):
                cut = Uint8Function(found.function) if found.function else Uint8Chain(found.prefix, found.to_uint8)
                self._patcher.replace(found.owner, found.attr, cut)
                self.uint8.found = found
                self.applied["uint8_transfer"] += 1


def _user_file(obj: Any) -> str | None:
    """The source file of the object's class (of the function itself), when it is the program's own."""
    try:
        path = inspect.getsourcefile(obj if inspect.isfunction(obj) else type(obj))
    except TypeError:
        return None
    return path if path is not None and not is_library(path) else None


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())

