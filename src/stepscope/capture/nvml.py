"""GPU readings through NVML (the `nvidia-ml-py` package, imported only when asked for)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stepscope.model.telemetry import GpuReading


class NvmlSampler:
    """The NVIDIA GPUs NVML sees; `note` says why there are none (no package, no driver, no GPU)."""

    def __init__(self, loader: Callable[[], Any] | None = None) -> None:
        self.handles: list[Any] = []
        self.names: list[str] = []
        self.note: str | None = None
        self._nv: Any = None
        try:
            nv = loader() if loader else _import_pynvml()
        except ImportError:
            self.note = "no GPU telemetry: nvidia-ml-py is not installed"
            return
        try:
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
        except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            self.note = "no GPU telemetry: NVML found no NVIDIA driver"
            return
        self._nv = nv
        for i in range(count):
            handle = nv.nvmlDeviceGetHandleByIndex(i)
            self.handles.append(handle)
            name = _try(nv.nvmlDeviceGetName, handle)
            self.names.append(name.decode() if isinstance(name, bytes) else str(name or f"GPU {i}"))
        if not self.handles:
            self.note = "no GPU telemetry: NVML sees no GPU"

    def sample(self) -> list[GpuReading]:
        nv = self._nv
        readings = []
        for h in self.handles:
            util = _try(nv.nvmlDeviceGetUtilizationRates, h)
            mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
            power = _try(nv.nvmlDeviceGetPowerUsage, h)  # mW
            readings.append(GpuReading(
                util=float(util.gpu) if util is not None else None,
                mem_util=float(util.memory) if util is not None else None,
                mem_used_bytes=int(mem.used) if mem is not None else None,
                power_w=power / 1000.0 if power is not None else None,
                sm_clock_mhz=_try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                mem_clock_mhz=_try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
            ))
        return readings

    def energy_mj(self) -> list[int | None]:
        """Each GPU's energy counter in mJ since the driver loaded (Volta and later; None elsewhere)."""
        return [_try(self._nv.nvmlDeviceGetTotalEnergyConsumption, h) for h in self.handles]

    def close(self) -> None:
        if self._nv is not None:
            _try(self._nv.nvmlShutdown)
            self._nv = None


def _import_pynvml() -> Any:
    import pynvml

    return pynvml


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    """An NVML reading, or None where the GPU or driver does not support it."""
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported and friends
        return None
