"""What the model and optimizer hold, per device, counted once; and the CPU the run computes on.

The memory categories at the peak need to know which of the memory held from before a step is parameters,
gradients and optimizer state: the trace only shows blocks. This listener finds the model (the first module
with parameters whose forward is called) and the optimizer (the first to step), and right after that
optimizer's first step, when its state exists, adds up their tensors' storage per device. It writes
census.json into the run folder when the window ends. The hooks remove themselves once used.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import weakref
from pathlib import Path
from typing import Any

from stepscope.atomic import write_atomic
from stepscope.capture.guard import PID
from stepscope.errors import StepscopeError
from stepscope.model.runfolder import CENSUS
from stepscope.trace.census import CENSUS_SCHEMA


def _storages(tensors: Any) -> dict[tuple[str, int], tuple[int, int]]:
    """(device, storage address) -> (bytes, device index): tensors sharing storage count once."""
    found: dict[tuple[str, int], tuple[int, int]] = {}
    for t in tensors:
        try:
            storage = t.untyped_storage()
            index = t.device.index if t.device.type != "cpu" else -1
            found[(str(t.device), storage.data_ptr())] = (int(storage.nbytes()), -1 if index is None else index)
        except (AttributeError, RuntimeError):  # meta tensors, tensor subclasses without storage
            continue
    return found


def _per_device(storages: dict[tuple[str, int], tuple[int, int]]) -> dict[int, int]:
    totals: dict[int, int] = {}
    for size, index in storages.values():
        totals[index] = totals.get(index, 0) + size
    return totals


def _state_tensors(optimizer: Any) -> list[Any]:
    import torch

    return [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]


def memory_census(model: Any, optimizer: Any) -> list[dict[str, int]]:
    """Per device: parameters, trainable parameters, gradients present now, optimizer state (bytes)."""
    params = list(model.parameters()) if model is not None else []
    if optimizer is not None:
        params += [p for group in optimizer.param_groups for p in group["params"]]
    parameters = _storages(params)
    trainable = _storages(p for p in params if p.requires_grad)
    gradients = _storages(p.grad for p in params if p.grad is not None)
    state = _storages(_state_tensors(optimizer)) if optimizer is not None else {}
    sums = [_per_device(x) for x in (parameters, trainable, gradients, state)]
    devices = sorted(set().union(*sums))
    return [{"device": d, "parameters_bytes": sums[0].get(d, 0), "trainable_bytes": sums[1].get(d, 0),
             "gradients_bytes": sums[2].get(d, 0), "optimizer_state_bytes": sums[3].get(d, 0)} for d in devices]


def cpu_info() -> dict[str, Any]:
    """The CPU a CPU run computes on: torch's threads, the maximum clock and the widest SIMD it has."""
    import torch

    info: dict[str, Any] = {"threads": torch.get_num_threads(), "max_mhz": None, "simd": None,
                            "model": platform.processor() or platform.machine()}
    with contextlib.suppress(OSError, ValueError):
        info["max_mhz"] = int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()) / 1000
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    flags = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("flags", "Features") and not flags:
            flags = set(value.split())
        elif key == "model name" and info["model"] in ("", platform.machine()):
            info["model"] = value.strip()
        elif key == "cpu MHz" and info["max_mhz"] is None:
            info["max_mhz"] = float(value)  # the current clock: the best a machine without cpufreq says
    if "avx512f" in flags:
        info["simd"] = "avx512"
    elif {"avx2", "fma"} <= flags:
        info["simd"] = "avx2"
    elif "asimd" in flags or platform.machine() in ("aarch64", "arm64"):
        info["simd"] = "neon"
    return info


class MemoryCensus:
    """A window listener: counts what the model and optimizer hold, writes census.json when the window ends."""

    def __init__(self, folder: Path) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.folder = Path(folder)
        self.pid = os.getpid()
        self.notes: list[str] = []
        self._model: weakref.ref | None = None
        self._devices: list[dict[str, int]] | None = None
        self._taken = ""
        self._cpu = cpu_info()  # now, before the program runs: reading /proc is no part of any step
        self._optimizer_hook: Any = register_optimizer_step_post_hook(self._on_optimizer_step)
        self._forward_hook: Any = torch.nn.modules.module.register_module_forward_pre_hook(self._on_forward)

    def _on_forward(self, module: Any, args: Any) -> None:
        if PID[0] == self.pid and next(iter(module.parameters()), None) is not None:
            self._model = weakref.ref(module)  # called before its children: the outermost model
            self._drop("_forward_hook")

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._devices is not None or PID[0] != self.pid:
            return
        self._devices = memory_census(self._model() if self._model else None, optimizer)
        self._taken = "after the first optimizer step"
        # Not removed here: torch iterates the optimizer hook registry while calling this one. It returns at
        # once from now on and goes when the window ends.

    def _drop(self, name: str) -> None:
        handle = getattr(self, name)
        if handle is not None:
            handle.remove()
            setattr(self, name, None)

    def window_started(self) -> None:
        pass

    def session_closed(self) -> None:
        """A session that ended before its window did leaves no global hook behind."""
        self._drop("_forward_hook")
        self._drop("_optimizer_hook")

    def window_ended(self) -> None:
        if self._devices is None and self._model is not None and self._model() is not None:
            self._devices, self._taken = memory_census(self._model(), None), "from the model (no optimizer stepped)"
        self._drop("_forward_hook")
        self._drop("_optimizer_hook")
        doc = {"schema": CENSUS_SCHEMA, "memory": {"taken": self._taken, "devices": self._devices or []},
               "cpu": self._cpu}
        try:
            write_atomic(self.folder / CENSUS, json.dumps(doc, indent=1), what="memory census")
        except StepscopeError as exc:
            self.notes.append(f"the memory census could not be written ({exc.message})")
