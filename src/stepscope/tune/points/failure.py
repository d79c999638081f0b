"""stepscope's own failures inside a trial: an exception raised by a patch's own code (not by the program, nor by
torch on the program's behalf) becomes a `PatchFailure` naming the fix, so the tune reports it as stepscope's and
leaves the fix untried, instead of blaming the program.

A DataLoader worker's exception is re-raised in the main process by constructing its type from the message (the
original traceback included): constructing a PatchFailure records it, so the main process knows of failures in
its workers even when the program catches the exception.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

PREFIX = "stepscope tune's patch for "


class PatchFailure(RuntimeError):
    recorded: ClassVar[list[tuple[str, str]]] = []  # (fix id, what failed), in the process that constructed it

    def __init__(self, message: str) -> None:
        super().__init__(message)
        line = next((x[x.index(PREFIX):] for x in message.splitlines() if PREFIX in x), message)
        fix = line.removeprefix(PREFIX).split(" ", 1)[0]
        self.fix = fix
        PatchFailure.recorded.append((fix, line))


@contextmanager
def owned_by(fix_id: str) -> Iterator[None]:
    """Code of the patch for `fix_id`: whatever it raises is stepscope's failure."""
    try:
        yield
    except PatchFailure:
        raise
    except Exception as exc:
        where = " in a DataLoader worker" if _in_worker() else ""
        raise PatchFailure(f"{PREFIX}{fix_id} failed{where}: {type(exc).__name__}: {exc}") from exc


def _in_worker() -> bool:
    try:
        from torch.utils.data import get_worker_info
    except ImportError:
        return False
    return get_worker_info() is not None


def failures_since(start: int) -> list[tuple[str, str]]:
    """The failures recorded in this process after the first `start`."""
    return PatchFailure.recorded[start:]
