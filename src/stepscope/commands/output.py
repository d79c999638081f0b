"""Writing report files for the verbs: derived names, nothing overwritten by surprise, '-' for stdout."""

from __future__ import annotations

import sys
from pathlib import Path

from stepscope.atomic import write_atomic
from stepscope.errors import StepscopeError


def write_output(target: str, data: bytes, what: str) -> str | None:
    """Write `data` to a path or to stdout ('-'); return the path written, None for stdout."""
    if target == "-":
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
