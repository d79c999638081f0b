"""Reading trace files from disk: gzip handling and the one-line errors for files that are not there."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from stepscope.errors import StepscopeError


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it is gzip; a StepscopeError naming the file otherwise."""
    if not path.exists():
        raise StepscopeError(f"{path}: no such file or folder")
    if path.is_dir():
        raise StepscopeError(f"{path}: is a folder, expected a trace file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StepscopeError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not data:
        raise StepscopeError(f"{path}: file is empty")
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as exc:
            raise StepscopeError(f"{path}: truncated or corrupt gzip ({exc})") from None
        if not data:
            raise StepscopeError(f"{path}: gzip holds an empty file")
    return data
