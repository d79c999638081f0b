"""SIGTERM handled like SIGINT: what `timeout`, SLURM and Kubernetes send must not cost the run its capture.

Python dies on SIGTERM on the spot, so the profiler never writes its trace. Here, while the program runs,
SIGTERM raises `Terminated` in the main thread (as SIGINT raises KeyboardInterrupt), so the program unwinds
and the window is exported; while stepscope itself exports and writes reports, it is only remembered, and
the run ends with 143 (128 + SIGTERM) once everything is written. A handler the program or its launcher
installed is left alone.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

EXIT_CODE = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM


class Terminated(BaseException):  # like KeyboardInterrupt: not caught by `except Exception`
    """SIGTERM arrived while the program was running."""


class SigtermHandler:
    """Installed for a `with` block (main thread only, and only over the default action).

    `raising` says what a SIGTERM does: raise `Terminated` (True) or only set `received` (False).
    `exit_code`, when set, raises SystemExit with it instead of `Terminated` (for the API: the user's program
    unwinds through its `with` blocks and ends with that code, as it would have ended by the signal)."""

    def __init__(self, *, raising: bool = True, exit_code: int | None = None) -> None:
        self.raising = raising
        self.exit_code = exit_code
        self.received = False
        self.installed = False
        self._previous: object = None

    def __enter__(self) -> SigtermHandler:
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self.installed = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.uninstall()

    def uninstall(self) -> None:
        if self.installed and signal.getsignal(signal.SIGTERM) == self._handle:
            signal.signal(signal.SIGTERM, self._previous)  # type: ignore[arg-type]
        self.installed = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = True
        if not self.raising:
            return
        self.raising = False  # once: a second SIGTERM while unwinding must not cut the export short
        if self.exit_code is not None:
            raise SystemExit(self.exit_code)
        raise Terminated
