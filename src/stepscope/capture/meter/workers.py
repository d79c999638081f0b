"""The DataLoader's side of the input pipeline: each batch a worker process made, when it began and when it was
ready, so that a wait that exists when the job runs plain is known even where a profiled run hides it, and a
second worker's effect can be estimated.

The worker's loop is wrapped in the parent before workers start (its index and result queues timed: a batch begins
when its indices arrive and is ready when it is put); forked workers inherit the wrapper and append one fixed-size
record per batch to a file beside the run (one `os.write` of 36 bytes on an O_APPEND descriptor: whole records,
whatever the interleaving). Workers started with `spawn` import torch afresh and are not seen."""

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
        self._original: Any = None
        self._fd: int | None = None
        self._fd_pid = 0

    def install(self) -> None:
        from torch.utils.data._utils import worker

        self._original = worker.__dict__["_worker_loop"]
        worker._worker_loop = _TimedLoop(self, self._original)

    def remove(self) -> None:
        from torch.utils.data._utils import worker

        if self._original is not None and getattr(worker._worker_loop, "__wrapped__", None) is self._original:
            worker._worker_loop = self._original
        self._original = None

    def write(self, worker_id: int, start: int, ready: int, cpu: int) -> None:
        try:
            if self._fd is None or self._fd_pid != os.getpid():
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                self._fd_pid = os.getpid()
            os.write(self._fd, RECORD.pack(worker_id, start, ready, cpu))
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


class _TimedLoop:
    """The worker's loop with its queues timed: a batch begins when the worker takes its indices and is ready when it
    puts the batch. The loop is wrapped from outside, never a fetch: an error in the user's dataset carries no frame of
    ours (the worker formats its traceback where its loop catches it). Pickled (a `spawn` worker), it is torch's own
    loop: such a worker imports torch afresh and is not timed."""

    def __init__(self, log: WorkerLog, original: Any) -> None:
        self.log, self.__wrapped__ = log, original

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) >= 4:
            clock = _BatchClock(self.log, kwargs.get("worker_id", args[10] if len(args) > 10 else -1))
            args = (*args[:2], _TimedIndices(args[2], clock), _TimedResults(args[3], clock), *args[4:])
        return self.__wrapped__(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return _torch_worker_loop, ()


def _torch_worker_loop() -> Any:
    from torch.utils.data._utils import worker

    loop = worker._worker_loop
    return getattr(loop, "__wrapped__", loop)


class _BatchClock:
    """One worker's batch in progress: taken (its indices arrived) until put (the batch is ready)."""

    def __init__(self, log: WorkerLog, worker_id: int) -> None:
        self.log, self.worker_id = log, int(worker_id) if isinstance(worker_id, int) else -1
        self.started: tuple[int, int] | None = None

    def taken(self) -> None:
        self.started = (time.perf_counter_ns(), time.thread_time_ns())

    def ready(self) -> None:
        if self.started is not None:
            start, cpu = self.started
            self.started = None
            self.log.write(self.worker_id, start, time.perf_counter_ns(), time.thread_time_ns() - cpu)


class _TimedIndices:
    def __init__(self, queue: Any, clock: _BatchClock) -> None:
        self._queue, self._clock = queue, clock

    def get(self, *args: Any, **kwargs: Any) -> Any:
        item = self._queue.get(*args, **kwargs)
        if isinstance(item, tuple):  # (batch index, sample indices); None ends the loop
            self._clock.taken()
        return item

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


class _TimedResults:
    def __init__(self, queue: Any, clock: _BatchClock) -> None:
        self._queue, self._clock = queue, clock

    def put(self, *args: Any, **kwargs: Any) -> Any:
        self._clock.ready()
        return self._queue.put(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)
