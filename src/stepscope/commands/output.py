"""Writing report files for the verbs: derived names, nothing overwritten by surprise, '-' for stdout."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from stepscope.atomic import write_atomic
from stepscope.errors import StepscopeError

if TYPE_CHECKING:
    from rich.console import Console


def write_output(target: str, data: bytes, what: str) -> str | None:
    """Write `data` to a path or to stdout ('-'); return the path written, None for stdout."""
    if target == "-":
        with reader_may_leave():
            sys.stdout.buffer.write(data)
            if not data.endswith(b"\n"):
                sys.stdout.buffer.write(b"\n")
            sys.stdout.flush()
        return None
    path = Path(target)
    if path.is_dir():
        raise StepscopeError(f"{path}: is a folder; give a file name for the {what}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StepscopeError(f"{path.parent}: cannot create the folder for the {what} ({exc.strerror or exc})",
                             hint="give a file name in a folder you can write to") from None
    write_atomic(path, data, what=what)
    return str(path)


@contextmanager
def reader_may_leave() -> Iterator[None]:
    """Output to stdout whose reader may close the pipe early (`| head`): the rest of that output goes nowhere,
    and the verb goes on, so the files it was asked for are still written and a later failure still sets the
    exit code (a BrokenPipeError let through would stop the verb half-way, with exit code 0)."""
    try:
        yield
    except BrokenPipeError:
        _stdout_to_devnull()


def going_on_when_reader_leaves(console: Console) -> Console:
    """The console, made to stay quiet once its reader has left: rich's default exits at once with code 1,
    before the files asked for are written."""

    def reader_gone() -> None:
        console.quiet = True
        if console.file is sys.stdout:
            _stdout_to_devnull()

    console.on_broken_pipe = reader_gone  # type: ignore[method-assign]  # rich's documented hook
    return console


def _stdout_to_devnull() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # what is still buffered is flushed there, not to the closed pipe
    os.close(devnull)
