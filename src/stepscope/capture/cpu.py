"""CPU utilisation per core, from psutil when it is installed, else from /proc/stat."""

from __future__ import annotations

from pathlib import Path

PROC_STAT = Path("/proc/stat")


class CpuSampler:
    """`sample()` returns each core's busy percentage since the previous call (None when unavailable)."""

    def __init__(self) -> None:
        self.source: str | None = None
        self._psutil = None
        self._previous: list[tuple[int, int]] | None = None
        try:
            import psutil

            psutil.cpu_percent(percpu=True)  # the first call only sets the baseline
            self._psutil, self.source = psutil, "psutil"
        except ImportError:
            if PROC_STAT.is_file():
                self._previous = _read_proc_stat()
                self.source = "/proc/stat"

    def sample(self) -> list[float] | None:
        if self._psutil is not None:
            return [round(float(p), 1) for p in self._psutil.cpu_percent(percpu=True)]
        if self._previous is None:
            return None
        now = _read_proc_stat()
        busy = [_busy_percent(a, b) for a, b in zip(self._previous, now, strict=False)]
        self._previous = now
        return busy


def _read_proc_stat(path: Path = PROC_STAT) -> list[tuple[int, int]]:
    """(total, idle) jiffies per core."""
    cores = []
    for line in path.read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            fields = [int(x) for x in line.split()[1:]]
            idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
            cores.append((sum(fields[:8]), idle))  # guest time is already counted in user
    return cores


def _busy_percent(before: tuple[int, int], after: tuple[int, int]) -> float:
    total, idle = after[0] - before[0], after[1] - before[1]
    return round(100.0 * (total - idle) / total, 1) if total > 0 else 0.0
