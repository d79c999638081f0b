"""Telemetry sampled by a background thread: CPU per core everywhere, NVML on NVIDIA GPUs.

The thread wakes every `interval_s` (0.2 s by default) and takes a few hundred microseconds, so it
costs the program far under 1%. The window's start and end are marked by the capture session; the
GPU energy counters are read at exactly those moments.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from stepscope.capture.cpu import CpuSampler
from stepscope.capture.nvml import NvmlSampler
from stepscope.model.telemetry import GpuWindow, Sample, TelemetryReport, WindowSummary
from stepscope.version import __version__

MAX_SAMPLES = 20_000  # about an hour at the default interval; the oldest go first


class Telemetry:
    def __init__(self, interval_s: float = 0.2, nvml: NvmlSampler | None = None) -> None:
        self.interval_s = interval_s
        self.cpu = CpuSampler()
        self.nvml = nvml if nvml is not None else NvmlSampler()
        self.samples: deque[Sample] = deque(maxlen=MAX_SAMPLES)
        self._t0 = time.perf_counter()
        self._window: list[float | None] = [None, None]
        self._energy: list[list[int | None] | None] = [None, None]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stepscope-telemetry", daemon=True)

    def start(self) -> Telemetry:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def _take(self) -> None:
        gpu = self.nvml.sample() if self.nvml.handles else []
        self.samples.append(Sample(t=round(time.perf_counter() - self._t0, 4), cpu=self.cpu.sample(), gpu=gpu))

    # -- the capture session's WindowListener ----------------------------------------------------------

    def window_started(self) -> None:
        self._mark(0)

    def window_ended(self) -> None:
        self._mark(1)

    def _mark(self, which: int) -> None:
        self._window[which] = time.perf_counter() - self._t0
        if self.nvml.handles:
            self._energy[which] = self.nvml.energy_mj()

    # -- the end -------------------------------------------------------------------------------------

    def stop(self) -> TelemetryReport:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._take()  # one last reading, so even a short run has one
        self.nvml.close()
        notes = [self.nvml.note] if self.nvml.note else []
        if self.cpu.source is None:
            notes.append("no CPU telemetry: neither psutil nor /proc/stat is available")
        samples = list(self.samples)
        first_cpu = next((s.cpu for s in samples if s.cpu), None)
        return TelemetryReport(
            generator=f"stepscope {__version__}",
            interval_s=self.interval_s,
            cpu_source=self.cpu.source,
            cpu_cores=len(first_cpu) if first_cpu else None,
            gpus=list(self.nvml.names),
            notes=notes,
            window=self._summary(samples),
            samples=samples,
        )

    def _summary(self, samples: list[Sample]) -> WindowSummary | None:
        start, end = self._window
        if start is None or end is None:
            return None
        inside = [s for s in samples if start <= s.t <= end + self.interval_s]  # a reading covers the time before it
        if not inside:  # a window shorter than the interval: the reading just after it
            inside = [s for s in samples if s.t >= start][:1]
        cores = [s.cpu for s in inside if s.cpu]
        per_core = [round(sum(c) / len(cores), 1) for c in zip(*cores, strict=False)] if cores else None
        gpus = [self._gpu_window(i, inside) for i in range(len(self.nvml.names))]
        return WindowSummary(
            start_s=round(start, 4), end_s=round(end, 4), samples=len(inside),
            cpu_util_mean=round(sum(per_core) / len(per_core), 1) if per_core else None,
            cpu_util_per_core=per_core, gpu=gpus,
        )

    def _gpu_window(self, i: int, inside: list[Sample]) -> GpuWindow:
        readings = [s.gpu[i] for s in inside if len(s.gpu) > i]

        def mean(attr: str) -> float | None:
            values = [getattr(r, attr) for r in readings if getattr(r, attr) is not None]
            return round(sum(values) / len(values), 2) if values else None

        used = [r.mem_used_bytes for r in readings if r.mem_used_bytes is not None]
        e0, e1 = self._energy
        energy = None
        if e0 and e1 and e0[i] is not None and e1[i] is not None:
            energy = round((e1[i] - e0[i]) / 1000.0, 3)
        return GpuWindow(
            index=i, name=self.nvml.names[i], util_mean=mean("util"), mem_util_mean=mean("mem_util"),
            mem_used_max_bytes=max(used) if used else None, power_mean_w=mean("power_w"),
            sm_clock_mean_mhz=mean("sm_clock_mhz"), energy_j=energy,
        )
