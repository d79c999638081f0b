"""Reading trace files from disk: gzip handling and the one-line errors for files that are not there."""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

from stepscope.errors import StepscopeError

_CHUNK = 1 << 20
_GZIP_ERRORS = (EOFError, OSError, zlib.error, gzip.BadGzipFile)


def _gunzip(data: bytes) -> bytes | bytearray:
    """Decompress into a buffer sized from the gzip trailer, so the output is never copied while it grows."""
    size = int.from_bytes(data[-4:], "little")  # ISIZE: the size mod 2**32 of the last member
    out = bytearray(size)
    view = memoryview(out)
    filled = 0
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
        while filled < size:
            n = f.readinto(view[filled : filled + _CHUNK])  # readinto decompresses via a temporary
            if not n:
                break
            filled += n
        complete = filled == size and not f.read(1)
    view.release()
    if complete:
        return out
    del out
    return gzip.decompress(data)  # over 4 GiB or several members: let gzip size it


def read_bytes(path: Path) -> bytes | bytearray:
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
            data = _gunzip(data)
        except _GZIP_ERRORS as exc:
            raise StepscopeError(f"{path}: truncated or corrupt gzip ({exc})") from None
        if not data:
            raise StepscopeError(f"{path}: gzip holds an empty file")
    return data
