"""Work done on a second core by a forked copy of this process, for the CLI's one-trace analysis: a big trace's
later batches are decoded (trace/kineto/halves.py) while this process decodes the first ones, and the advice rules
that replay the step run beside the others (advice/rules).

Forking copies everything this process holds (threads excepted), so it is done only where the caller allowed it
(`allowing()`: `stepscope analyze`, whose process runs no one else's code), on Linux, when a core is idle; never
inside a profiled program, a notebook or a pool's worker. The copy sends back one pickled result and ends;
whatever goes wrong there, the caller gets None and does the work itself, so a result never depends on the copy.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import Generic, TypeVar

T = TypeVar("T")

_allowed: ContextVar[bool] = ContextVar("stepscope_fork_allowed", default=False)


@contextmanager
def allowing() -> Iterator[None]:
    """Within this block, `start` may fork (the CLI's own process, doing nothing but the analysis)."""
    token = _allowed.set(True)
    try:
        yield
    finally:
        _allowed.reset(token)


def _idle_core() -> bool:
    """Whether a core is free for the copy now: fewer tasks runnable (this one among them) than cores to run on. On a
    machine busy with other work the copy would only add its own cost (its share of reading, its start) to theirs."""
    try:
        cores = len(os.sched_getaffinity(0))
        with open("/proc/loadavg") as f:
            runnable = int(f.read().split()[3].split("/")[0])
    except (AttributeError, OSError, ValueError, IndexError):
        return False
    return runnable < cores


class Forked(Generic[T]):
    """A forked copy computing one result."""

    def __init__(self, pid: int, read_fd: int) -> None:
        self._pid = pid
        self._fd = read_fd
        self._done = False

    def result(self) -> T | None:
        """The copy's result, once it has sent it; None when it failed or died."""
        self._done = True
        try:
            with os.fdopen(self._fd, "rb") as pipe:
                data = pipe.read()
        finally:
            _reap(self._pid)
        try:
            ok, value = pickle.loads(data)
        except Exception:  # a copy that died mid-write (killed, out of memory) sent a truncated pickle
            return None
        return value if ok else None

    def cancel(self) -> None:
        """Stop the copy (its result is not wanted); nothing once its result was taken."""
        if self._done:
            return
        self._done = True
        with suppress(OSError):
            os.kill(self._pid, signal.SIGKILL)
        os.close(self._fd)
        _reap(self._pid)


_exiting: list[int] = []  # copies that have sent their result and are still tearing their memory down


def _reap(pid: int) -> None:
    """Reap the copy once it has exited, without waiting for it (ms for a big copy's memory), and any earlier."""
    _exiting.append(pid)
    for each in list(_exiting):
        with suppress(ChildProcessError):
            if os.waitpid(each, os.WNOHANG)[0] == 0:
                continue
        _exiting.remove(each)


def start(work: Callable[[], T]) -> Forked[T] | None:
    """`work()` computed in a forked copy of this process, or None where that is not allowed or not possible."""
    if not (_allowed.get() and sys.platform.startswith("linux") and hasattr(os, "fork") and _idle_core()):
        return None
    read_fd, write_fd = os.pipe()
    try:
        with warnings.catch_warnings():  # 3.12+ warns of forking beside threads: the copy only runs numpy and ours
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return None
    if pid:
        os.close(write_fd)
        return Forked(pid, read_fd)
    os.close(read_fd)  # the copy: compute, send, and end without running any of this process's exit handlers
    code = 0
    try:
        try:
            payload = pickle.dumps((True, work()), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:  # said as a failure: the caller does the work itself and meets the error there
            payload = pickle.dumps((False, None))
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(payload)
    except BaseException:
        code = 1
    finally:
        os._exit(code)
