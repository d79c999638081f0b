"""Writing report files for the verbs: '-' for stdout, any other name through user_output (a regular file
atomically, a device, FIFO or descriptor in place)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from stepscope.errors import StepscopeError
from stepscope.user_output import check_name, write_user_output

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
    return str(write_user_output(target, data, what))


def outputs_to_stdout(**targets: str | None) -> bool:
    """Whether one of the outputs asked for (by flag: json="-") is stdout: the terminal report then goes to
    stderr, so the document on stdout is whole. Checked before any work: two outputs to stdout (one stream of two
    documents) and a name no file can have (empty, a part over 255 bytes) are a one-line error."""
    named = {flag: t for flag, t in targets.items() if t is not None}
    if sum(t == "-" for t in named.values()) > 1:
        raise StepscopeError("only one output can go to stdout ('-')", hint="give the others file names")
    for flag, target in named.items():
        if target != "-":
            check_name(target, f"--{flag} output")
    return "-" in named.values()


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


def streams_to_devnull() -> None:
    """stdout and stderr pointed at the null device (opened, never replaced): their terminal or reader is gone, and
    what is still to be printed must not raise again."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            os.dup2(devnull, fd)
    os.close(devnull)


def _stdout_to_devnull() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # what is still buffered is flushed there, not to the closed pipe
    os.close(devnull)
