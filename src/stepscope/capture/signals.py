"""SIGTERM and SIGHUP handled like SIGINT: what `timeout`, SLURM and Kubernetes send, and what a closed terminal or a
dropped ssh session sends, must not cost the run its capture.

Python dies on either on the spot, so the profiler never writes its trace. Here, while the program runs, the
signal raises `Terminated` in the main thread (as SIGINT raises KeyboardInterrupt), so the program unwinds and the
window is exported; while stepscope itself exports and writes reports, it is only remembered, and the run ends
with 128 + the signal (143, 129) once everything is written. After SIGHUP the terminal is gone: the standard
streams that were a terminal are pointed at the null device, so the reports still written are not lost to an
EIO. A handler the program or its launcher installed (nohup's SIG_IGN) is left alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from types import FrameType, TracebackType

EXIT_CODE = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM
HANGUP = getattr(signal, "SIGHUP", None)  # not on Windows
HANDLED = tuple(s for s in (signal.SIGTERM, HANGUP) if s is not None)


class Terminated(BaseException):  # like KeyboardInterrupt: not caught by `except Exception`
    """SIGTERM or SIGHUP arrived while the program was running."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


class SigtermHandler:
    """Installed for a `with` block (main thread only, and only over each signal's default action).

    `raising` says what a signal does: raise `Terminated` (True) or only set `received` (False).
    `exiting` raises SystemExit(128 + the signal) instead of `Terminated` (for the API: the user's program unwinds
    through its `with` blocks and ends with that code, as it would have ended by the signal)."""

    def __init__(self, *, raising: bool = True, exiting: bool = False) -> None:
        self.raising = raising
        self.exiting = exiting
        self.signum: int | None = None
        self.installed = False
        self._previous: dict[int, object] = {}
        self._terminals: list[int] = []

    @property
    def received(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        """128 + the signal that arrived (143 for SIGTERM, 129 for SIGHUP)."""
        return 128 + (self.signum or signal.SIGTERM)

    def __enter__(self) -> SigtermHandler:
        if threading.current_thread() is threading.main_thread():
            for sig in HANDLED:
                if signal.getsignal(sig) == signal.SIG_DFL:
                    self._previous[sig] = signal.signal(sig, self._handle)
            self.installed = bool(self._previous)
            self._terminals = terminals()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.uninstall()

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, previous)  # type: ignore[arg-type]
        self._previous = {}
        self.installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
        if signum == HANGUP:
            away_from(self._terminals)
        if not self.raising:
            return
        self.raising = False  # once: a second signal while unwinding must not cut the export short
        if self.exiting:
            raise SystemExit(128 + signum)
        raise Terminated(signum)


def terminals() -> list[int]:
    """stdout and stderr where they are a terminal, asked before a hangup: a hung-up terminal no longer says."""
    return [fd for fd in (1, 2) if _is_terminal(fd)]


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def away_from(terminals: list[int]) -> None:
    """Point the standard streams that were the closed terminal at the null device (opened, never replaced)."""
    if not terminals:
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    for fd in terminals:
        with contextlib.suppress(OSError):
            os.dup2(null, fd)
    os.close(null)
