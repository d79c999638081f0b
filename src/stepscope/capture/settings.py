"""What the program already has set, so that no fix already in effect is recommended.

Read when the recorded steps begin: the DataLoader's and the optimizer's settings (and the line that built
each), autocast, torch.compile, TF32, channels_last, intra-op threads against the cores this process may
use, and whether the CPU computes in bf16 natively (AMX or AVX512-BF16). Every reading is best effort:
what cannot be read stays None ("unknown"), never a guess.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope.attribution import torch_compile_in_use
from stepscope.attribution.usercode import UserCode
from stepscope.frameworks.detect import detect

CPUINFO = Path("/proc/cpuinfo")
# CPU flags under which bf16 matmuls and convolutions run natively, best first.
BF16_FLAGS = ("amx_bf16", "avx512_bf16")


@dataclass
class LoaderSettings:
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    batch_size: int | None
    batches_per_epoch: int | None = None
    iterators_started: int = 0  # new iterators (epochs, worker start-ups) while the steps were recorded
    batch_bytes: int | None = None  # the first batch's tensors: what crosses from a worker to the main process
    location: dict[str, Any] | None = None  # the line that built the DataLoader


@dataclass
class OptimizerSettings:
    name: str
    foreach: bool | None
    fused: bool | None
    location: dict[str, Any] | None = None  # the line that built the optimizer


@dataclass
class FrameworkSettings:
    """The framework that runs the step (frameworks/detect.py): its fixes are its own settings, at its lines."""

    name: str  # "huggingface" | "lightning" | "accelerate"
    config_name: str | None = None  # the configuration call ("TrainingArguments", "Trainer", "Accelerator")
    config: dict[str, Any] | None = None  # the line of that call
    call: dict[str, Any] | None = None  # the user's line that runs the framework's loop (trainer.train())
    loader: dict[str, Any] | None = None  # accelerate: the user's DataLoader( line (the one stepped is its copy)


@dataclass
class Settings:
    dataloader: LoaderSettings | None = None
    optimizer: OptimizerSettings | None = None
    autocast: str | None = None  # the autocast dtype in the model's forward ("bfloat16"), "off", None unknown
    compiled: bool | None = None  # torch.compile in use
    channels_last: bool | None = None  # the convolutions' weights are channels_last (None: no convolutions)
    conv_layers: int | None = None
    tf32_matmul: bool | None = None
    tf32_cudnn: bool | None = None
    float32_matmul_precision: str | None = None
    cpu_cores: int | None = None  # physical cores this process may run on (hyperthreads not counted)
    intra_op_threads: int | None = None  # torch.get_num_threads()
    cpu_capability: str | None = None  # torch's kernels: "AVX512", "AVX2", "DEFAULT", ...
    cpu_bf16: str | None = None  # the CPU flag for native bf16 ("amx_bf16", "avx512_bf16"), None without
    framework: FrameworkSettings | None = None  # the Hugging Face Trainer, Lightning or accelerate, when one runs


def framework_settings(frame: Any) -> FrameworkSettings | None:
    """The framework whose loop is on the stack from `frame` outwards, and its lines (None for a plain loop)."""
    try:
        user = UserCode()
        seen = detect(frame, user)
    except Exception:  # a help, never a failure
        return None
    if seen is None:
        return None
    return FrameworkSettings(name=seen.name, config_name=seen.config_name,
                             config=seen.config.location(user) if seen.config else None,
                             call=seen.call.location(user) if seen.call else None,
                             loader=seen.loader.location(user) if seen.loader else None)


def cpu_bf16_flag(path: Path = CPUINFO) -> str | None:
    """The best native-bf16 flag of this CPU (Linux), else None."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
            break
    return next((f for f in BF16_FLAGS if f in flags), None)


SYS_CPU = Path("/sys/devices/system/cpu")


def available_cores(sys_cpu: Path = SYS_CPU) -> int | None:
    """Physical cores among the CPUs this process may run on: torch's default thread count is the physical
    cores, and a second hyperthread of a core adds little to matmuls and convolutions."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()
    cores = set()
    for cpu in cpus:
        topology = sys_cpu / f"cpu{cpu}" / "topology"
        try:
            package = (topology / "physical_package_id").read_text().strip()
            cores.add((package, (topology / "core_id").read_text().strip()))
        except OSError:
            return len(cpus)  # no topology to read: count the CPUs
    return len(cores)


def loader_settings(loader: Any, location: dict[str, Any] | None) -> LoaderSettings | None:
    try:
        return LoaderSettings(num_workers=int(loader.num_workers), pin_memory=bool(loader.pin_memory),
                              persistent_workers=bool(loader.persistent_workers),
                              prefetch_factor=getattr(loader, "prefetch_factor", None),
                              batch_size=getattr(loader, "batch_size", None), batches_per_epoch=_length(loader),
                              location=location)
    except Exception:
        return None


def _length(loader: Any) -> int | None:
    try:
        return len(loader)
    except Exception:  # an iterable dataset has no length
        return None


def optimizer_settings(optimizer: Any, location: dict[str, Any] | None) -> OptimizerSettings | None:
    try:
        defaults = getattr(optimizer, "defaults", {}) or {}
        return OptimizerSettings(name=type(optimizer).__name__, foreach=defaults.get("foreach"),
                                 fused=defaults.get("fused"), location=location)
    except Exception:
        return None


def model_layout(model: Any) -> tuple[bool | None, int | None]:
    """(channels_last, number of 2-D convolutions) of a model; (None, 0) without convolutions."""
    import torch

    try:
        convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
        spatial = [m.weight for m in convs if m.weight.dim() == 4 and m.weight.shape[-1] * m.weight.shape[-2] > 1]
        if not spatial:
            return None, len(convs)
        last = all(w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous() for w in spatial)
        return last, len(convs)
    except Exception:
        return None, None


def compiled(model: Any) -> bool | None:
    try:
        dynamo = sys.modules.get("torch._dynamo.eval_frame")
        wrapped = dynamo is not None and isinstance(model, getattr(dynamo, "OptimizedModule", ()))
        return bool(wrapped or torch_compile_in_use())
    except Exception:
        return None


def autocast_in(module: Any) -> str:
    """The autocast dtype active now for the module's device type, or "off" (call it inside the forward)."""
    import torch

    try:
        device = next(module.parameters()).device.type
    except (StopIteration, AttributeError):
        device = "cpu"
    if not torch.is_autocast_enabled(device):
        return "off"
    return str(torch.get_autocast_dtype(device)).removeprefix("torch.")


def read_settings(model: Any = None, loader: Any = None, optimizer: Any = None,
                  locate: Callable[[Any], dict[str, Any] | None] = lambda obj: None) -> Settings:
    """Everything readable now; `locate(obj)` gives the line that built an object, when known."""
    import torch

    settings = Settings(cpu_cores=available_cores(), intra_op_threads=torch.get_num_threads(),
                        cpu_bf16=cpu_bf16_flag())
    try:
        settings.cpu_capability = torch.backends.cpu.get_cpu_capability()
        settings.float32_matmul_precision = torch.get_float32_matmul_precision()
        if torch.cuda.is_available():
            settings.tf32_matmul = bool(torch.backends.cuda.matmul.allow_tf32)
            settings.tf32_cudnn = bool(torch.backends.cudnn.allow_tf32)
    except Exception:
        pass
    if loader is not None:
        settings.dataloader = loader_settings(loader, locate(loader))
    if optimizer is not None:
        settings.optimizer = optimizer_settings(optimizer, locate(optimizer))
    if model is not None:
        settings.channels_last, settings.conv_layers = model_layout(model)
    settings.compiled = compiled(model)
    return settings


class SettingsWatch:
    """A window listener: reads the settings when the recorded steps begin, notes autocast in the model's first
    recorded forward, and counts the DataLoader iterators started while recording (workers started again)."""

    def __init__(self, objects: Callable[[], tuple[Any, Any, Any]],
                 locate: Callable[[Any], dict[str, Any] | None] = lambda obj: None,
                 iterators: Callable[[], int] = lambda: 0,
                 batch_bytes: Callable[[], int | None] = lambda: None) -> None:
        """`objects()` gives (model, main DataLoader, optimizer), each possibly None; `batch_bytes()` the bytes of the
        main DataLoader's first batch."""
        self.objects, self.locate, self.iterators, self.batch_bytes = objects, locate, iterators, batch_bytes
        self.settings: Settings | None = None
        self._iterators_at_start = 0
        self._handle: Any = None

    def window_started(self) -> None:
        try:
            model, loader, optimizer = self.objects()
            self.settings = read_settings(model, loader, optimizer, self.locate)
            # The window starts at a step boundary, inside the training loop: a framework's loop is on the stack.
            self.settings.framework = framework_settings(sys._getframe(1))
            self._iterators_at_start = self.iterators()
            if self.settings.dataloader is not None:
                self.settings.dataloader.batch_bytes = self.batch_bytes()
            if model is not None and not self.settings.compiled:  # a hook would make torch.compile recompile
                self._handle = model.register_forward_pre_hook(self._probe)
        except Exception:  # settings are a help, never a cost to the run
            self._handle = None

    def _probe(self, module: Any, args: Any) -> None:
        if self.settings is not None:
            self.settings.autocast = autocast_in(module)
        self._remove()

    def window_ended(self) -> None:
        self._remove()
        if self.settings is not None and self.settings.dataloader is not None:
            self.settings.dataloader.iterators_started = self.iterators() - self._iterators_at_start

    def _remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
