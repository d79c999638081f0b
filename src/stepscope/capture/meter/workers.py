"""The DataLoader's side of the input pipeline: each batch a worker process made, when it began and when it was
ready, so that a wait that exists when the job runs plain is known even where a profiled run hides it, and a
second worker's effect can be estimated.

The fetchers are patched in the parent before workers start; forked workers inherit the patch and append one
fixed-size record per batch to a file beside the run (one `os.write` of 36 bytes on an O_APPEND descriptor: whole
records, whatever the interleaving). Workers started with `spawn` import torch afresh and are not seen (said)."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path
from typing import Any

from stepscope.model.meter import WorkerBatches

# worker id, start ns, ready ns (perf_counter_ns: one clock for every process), CPU ns
RECORD = struct.Struct("<iqqq")
LOG_NAME = ".meter-workers.bin"


class WorkerLog:
    def __init__(self, folder: Path) -> None:
        self.path = folder / LOG_NAME
        self._patches: list[tuple[Any, Any]] = []
        self._fd: int | None = None
        self._fd_pid = 0
        self.main_pid = os.getpid()

    def install(self) -> None:
        from torch.utils.data._utils import fetch

        for cls in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
            original = cls.__dict__["fetch"]
            cls.fetch = self._wrap(original)
            self._patches.append((cls, original))

    def remove(self) -> None:
        for cls, original in reversed(self._patches):
            cls.fetch = original
        self._patches = []

    def _wrap(self, original: Any) -> Any:
        log = self

        def fetch(fetcher: Any, index: Any) -> Any:
            if os.getpid() == log.main_pid:
                return original(fetcher, index)
            start, cpu = time.perf_counter_ns(), time.thread_time_ns()
            batch = original(fetcher, index)
            log._write(start, time.perf_counter_ns(), time.thread_time_ns() - cpu)
            return batch

        fetch.__wrapped__ = original  # type: ignore[attr-defined]
        return fetch

    def _write(self, start: int, ready: int, cpu: int) -> None:
        try:
            if self._fd is None or self._fd_pid != os.getpid():
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                self._fd_pid = os.getpid()
            from torch.utils.data import get_worker_info

            info = get_worker_info()
            os.write(self._fd, RECORD.pack(info.id if info is not None else -1, start, ready, cpu))
        except OSError:
            pass  # a full disk costs the worker timings, never the batch

    def read(self) -> WorkerBatches | None:
        """The batches the workers recorded (the file is removed); None when no worker recorded one."""
        try:
            data = self.path.read_bytes()
            self.path.unlink()
        except OSError:
            return None
        n = len(data) // RECORD.size
        if n == 0:
            return None
        rows = sorted(RECORD.iter_unpack(data[: n * RECORD.size]), key=lambda r: r[2])
        ids = [r[0] for r in rows]
        return WorkerBatches(workers=len(set(ids)), worker_id=ids, start_ns=[r[1] for r in rows],
                             ready_ns=[r[2] for r in rows], cpu_ns=[r[3] for r in rows])
