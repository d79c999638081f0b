"""Reading one file of a run folder back, the one way every reader does: only a regular file of a sane size (a FIFO
waits forever for a writer, a link to /dev/zero never ends), opened without blocking, decoded into its typed struct
and its bounds checked by the struct's own check. Every problem is a RunFileError naming the file, which the
analysis says in the report's notes: a file left out is said, never dropped in silence, never a traceback."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")
# Beyond any side file a run writes: meter.json at its 200,000-step cap is ~25 MB, telemetry.json at its 20,000
# samples of 256 cores and 8 GPUs ~55 MB.
MAX_BYTES = 256 << 20
MAX_NS = 10**15  # ~11.6 days: a longer step, phase or span is not a measurement


class RunFileError(Exception):
    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason

    @property
    def note(self) -> str:
        """The report's note: which file was left out, and why."""
        return f"{self.path}: left out ({self.reason})"


def read_bytes(path: Path, limit: int = MAX_BYTES) -> bytes | None:
    """The file's bytes; None when there is no such file; RunFileError when it is not one to read."""
    try:
        info = os.stat(path)  # through a link: what is read is its target
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RunFileError(path, f"cannot read it: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise RunFileError(path, "not a regular file (a FIFO, a device or a link to one): not read")
    if info.st_size > limit:
        raise RunFileError(path, f"{info.st_size:,} bytes, over the {limit >> 20} MiB a run's file takes")
    try:  # O_NONBLOCK: a FIFO put in its place since the check must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise RunFileError(path, f"cannot read it: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RunFileError(path, "not a regular file: not read")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise RunFileError(path, f"cannot read it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise RunFileError(path, f"over the {limit >> 20} MiB a run's file takes")
    return data


def decode(path: Path, data: bytes, kind: type[T], check: Callable[[T], str | None] | None = None) -> T:
    """`data` as a `kind` (msgspec's typed decoding: JSON's NaN and Infinity and numbers past a float are refused),
    then `check`'s bounds; RunFileError when either fails."""
    try:
        value = msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        raise RunFileError(path, f"not what the file holds: {str(exc)[:200]}") from None
    except msgspec.DecodeError as exc:
        raise RunFileError(path, f"not valid JSON: {str(exc).removeprefix('JSON is malformed: ')[:200]}") from None
    except RecursionError:
        raise RunFileError(path, "JSON nested too deeply") from None
    problem = check(value) if check is not None else None
    if problem:
        raise RunFileError(path, problem)
    return value


def load(path: Path, kind: type[T], check: Callable[[T], str | None] | None = None,
         limit: int = MAX_BYTES) -> T | None:
    """The file read and decoded; None when there is no such file; RunFileError when it cannot be used."""
    data = read_bytes(path, limit)
    return None if data is None else decode(path, data, kind, check)


def negative(value: Any, where: str = "") -> str | None:
    """Where the first negative number is in a decoded value (structs, lists, dicts), None when there is none:
    for files every number of which is a count, a size, a duration or a clock reading."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, (int, float)):
        return (where or "a value") if value < 0 else None
    if isinstance(value, msgspec.Struct):
        items: Any = ((f"{where}.{k}" if where else k, getattr(value, k)) for k in value.__struct_fields__)
    elif isinstance(value, dict):
        items = ((f"{where}.{k}", v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for name, item in items:
        if (found := negative(item, name)) is not None:
            return found
    return None
