"""Reading trace files from disk: gzip handling and the one-line errors for files that are not there.

Decompression streams: memory follows the data actually decompressed, never a size read from the file
(a truncated .gz ends in arbitrary bytes where gzip keeps the length of the original).
"""

from __future__ import annotations

import zlib
from pathlib import Path

from stepscope.errors import StepscopeError

_IN_CHUNK = 1 << 16  # compressed bytes per step: at most ~64 MiB come out of one (deflate tops out at 1032x)
# A profiler trace compresses 5-30x; past this ratio (and this size) the file is not a trace but a bomb.
MAX_GZIP_RATIO = 256
MIN_GZIP_LIMIT = 64 << 20
_GZIP_MAGIC = b"\x1f\x8b"


def gunzip(data: bytes, path: Path) -> bytearray:
    """Decompress every gzip member, step by step, into one growing buffer (glibc grows big ones in place)."""
    limit = max(MIN_GZIP_LIMIT, MAX_GZIP_RATIO * len(data))
    out = bytearray()
    view, pos = memoryview(data), 0
    inflater = zlib.decompressobj(wbits=31)  # 31: a gzip header and trailer, both checked
    while pos < len(view):
        piece = view[pos : pos + _IN_CHUNK]
        pos += len(piece)
        out += inflater.decompress(piece)
        if len(out) > limit:
            raise StepscopeError(f"{path}: decompresses to over {MAX_GZIP_RATIO}x its size, more than any "
                                 f"profiler trace does (stopped at {len(out) >> 20} MiB)")
        if inflater.eof:
            rest = inflater.unused_data + bytes(view[pos:])
            if rest[:2] != _GZIP_MAGIC:
                return out  # the last member; trailing padding is ignored, as gzip does
            view, pos = memoryview(rest), 0
            inflater = zlib.decompressobj(wbits=31)
    if not inflater.eof:
        raise StepscopeError(f"{path}: truncated gzip (the file ends inside the compressed data, "
                             f"after {len(out):,} bytes of it)")
    return out


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
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gunzip(data, path)
        except zlib.error as exc:
            raise StepscopeError(f"{path}: corrupt gzip ({exc})") from None
        if not data:
            raise StepscopeError(f"{path}: gzip holds an empty file")
    return data
