"""`uint8_transfer` in a trial: a dataset transform that ends in torchvision's `ToTensor` (+ `Normalize`), or
`PILToTensor` + a float conversion (+ `Normalize`), is cut before the float conversion, so the workers send uint8
(a quarter of the bytes to collate, pin and copy, and no float work in the workers); the conversion and the
normalisation run on the device after the copy, with the same operations (`x.float().div(255)`, then
`sub_(mean).div_(std)`): the model sees the same numbers.

The transform is recognised by its classes' names and module (any `torchvision.transforms` module, v1 or v2), so
nothing imports torchvision. The batches are marked as the main process receives them from the loader, and
converted where the program copies them (`.to()`, `.cuda()`) or, if it never does, where the model is called.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stepscope.tune.points.failure import owned_by
from stepscope.tune.points.uint8_functional import function_of, mean_std, shape_of
from stepscope.tune.points.uint8_image import to_uint8_chw

FLOATS = ("float32", "float", "torch.float32", "torch.float")


@dataclass(frozen=True)
class Found:
    """A recognised transform: where it is held, what stays in the workers, and the normalisation moved out."""

    owner: Any  # the object holding the transform (the dataset, or a preset object inside it)
    attr: str  # its attribute there
    prefix: tuple[Any, ...]  # the transforms kept in the workers (a PILToTensor among them, when it was there)
    to_uint8: bool  # the chain's ToTensor is replaced by a uint8 conversion
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    ending: str  # the cut-off classes, e.g. "ToTensor+Normalize" ("to_tensor+normalize": functional calls)
    function: Any = None  # a transform function of the program's (uint8_functional), in place of a Compose


def _name(t: Any) -> str:
    cls = type(t)
    return cls.__name__ if cls.__module__.startswith("torchvision.transforms") else ""


def _is_float(dtype: Any) -> bool:
    return str(dtype).removeprefix("torch.") in FLOATS or dtype is float


def find(dataset: Any) -> Found | None:
    """The dataset's transform, when it ends in a conversion to float (and a normalisation) it knows."""
    for _ in range(4):  # Subset and similar wrappers hold the real dataset in `.dataset`
        for owner, attr in ((dataset, "transform"), (getattr(dataset, "transform", None), "transforms")):
            chain = getattr(owner, attr, None) if owner is not None else None
            if _name(chain) == "Compose":
                found = _cut(owner, attr, list(chain.transforms))
                if found is not None:
                    return found
            elif attr == "transform" and chain is not None and (found := _functional(dataset, chain)):
                return found
        inner = getattr(dataset, "dataset", None)
        if inner is None:
            return None
        dataset = inner
    return None


def _cut(owner: Any, attr: str, chain: list[Any]) -> Found | None:
    names = [_name(t) for t in chain]
    mean = std = None
    end = len(chain)
    if names and names[-1] == "Normalize":
        mean, std = tuple(float(x) for x in chain[-1].mean), tuple(float(x) for x in chain[-1].std)
        end -= 1
    if end >= 1 and names[end - 1] == "ToTensor":
        return Found(owner, attr, tuple(chain[:end - 1]), True, mean, std, "+".join(names[end - 1:]))
    to_float = end >= 2 and names[end - 2] in ("PILToTensor", "ToImage") and (
        (names[end - 1] == "ConvertImageDtype" and _is_float(getattr(chain[end - 1], "dtype", None)))
        or (names[end - 1] == "ToDtype" and getattr(chain[end - 1], "scale", False)
            and _is_float(getattr(chain[end - 1], "dtype", None))))
    if to_float:
        return Found(owner, attr, tuple(chain[:end - 1]), False, mean, std, "+".join(names[end - 1:]))
    return None


def _functional(owner: Any, fn: Any) -> Found | None:

    fdef = function_of(fn)
    shape = shape_of(fdef, fn.__globals__) if fdef is not None else None
    if shape is None:
        return None
    stats = mean_std(shape.normalize, fn.__globals__)
    if shape.normalize is not None and stats is None:
        return None
    mean, std = stats if stats is not None else (None, None)
    return Found(owner, "transform", (), True, mean, std, "to_tensor+normalize" if stats else "to_tensor", fn)


class Uint8Chain:
    """The dataset's transform up to the float conversion, then uint8 (runs in the workers; picklable)."""

    def __init__(self, prefix: Sequence[Any], to_uint8: bool) -> None:
        self.prefix = list(prefix)
        self.to_uint8 = to_uint8

    def __call__(self, picture: Any) -> Any:
        for t in self.prefix:
            picture = t(picture)
        if self.to_uint8:
            with owned_by("uint8_transfer"):
                return to_uint8_chw(picture)
        return picture


class Uint8Batches:
    """The uint8 image batches the main loader yielded, converted to normalised float on their device."""

    def __init__(self) -> None:
        self.active = False
        self.found: Found | None = None
        self._marked: dict[int, weakref.ref] = {}
        self._stats: dict[str, tuple[Any, Any]] = {}  # device -> (mean, std) shaped [1, C, 1, 1]

    def mark(self, batch: Any, depth: int = 0) -> None:
        """Note the batch's uint8 images (NCHW, the normalisation's channels)."""
        import torch

        if isinstance(batch, torch.Tensor):
            channels = len(self.found.mean) if self.found is not None and self.found.mean else None
            if batch.dtype == torch.uint8 and batch.dim() == 4 and batch.shape[1] in ((channels,) if channels
                                                                                       else (1, 3, 4)):
                self._marked[id(batch)] = weakref.ref(batch)
        elif depth < 3 and isinstance(batch, (list, tuple)):
            for item in batch:
                self.mark(item, depth + 1)
        elif depth < 3 and isinstance(batch, dict):
            for item in batch.values():
                self.mark(item, depth + 1)

    def marked(self, tensor: Any) -> bool:
        ref = self._marked.get(id(tensor))
        return ref is not None and ref() is tensor

    def convert(self, tensor: Any) -> Any:
        """x.float().div(255), then (x - mean) / std, on x's device: ToTensor's and Normalize's operations."""
        with owned_by("uint8_transfer"):
            x = tensor.float().div(255)
            if self.found is not None and self.found.mean is not None and self.found.std is not None:
                mean, std = self._on(x.device)
                x.sub_(mean).div_(std)
            return x

    def _on(self, device: Any) -> tuple[Any, Any]:
        import torch

        key = str(device)
        if key not in self._stats:
            assert self.found is not None and self.found.mean is not None and self.found.std is not None
            shape = (1, len(self.found.mean), 1, 1)
            self._stats[key] = (torch.tensor(self.found.mean, device=device).view(shape),
                                torch.tensor(self.found.std, device=device).view(shape))
        return self._stats[key]
