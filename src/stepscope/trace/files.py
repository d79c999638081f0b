"""Reading trace files from disk: gzip handling and the one-line errors for files that are not there.

Decompression streams: memory follows the data actually decompressed, never a size read from the file
(a truncated .gz ends in arbitrary bytes where gzip keeps the length of the original).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path

from stepscope.errors import StepscopeError
from stepscope.trace.read_ahead import read_ahead

try:  # ISA-L's inflate: a trace gunzips ~1.6x as fast as with zlib (benchmarks/README.md); zlib where it is missing
    from isal.isal_zlib import decompressobj as _decompressobj
    from isal.isal_zlib import error as _isal_error

    GZIP_ERRORS: tuple[type[Exception], ...] = (zlib.error, _isal_error)
except ImportError:  # pragma: no cover - isal is a dependency; a platform without its wheel falls back
    _decompressobj = zlib.decompressobj
    GZIP_ERRORS = (zlib.error,)

_IN_CHUNK = 1 << 20  # compressed bytes handed to zlib at a time
# Decompressed bytes out of one call at most: memory stays bounded whatever the ratio, and the reading thread,
# which needs the GIL only between calls, keeps ahead of a decoder that holds it for milliseconds at a time.
_OUT_CHUNK = 1 << 20
# A profiler trace compresses 5-30x; past this ratio (and this size) the file is not a trace but a bomb.
MAX_GZIP_RATIO = 256
MIN_GZIP_LIMIT = 64 << 20
_GZIP_MAGIC = b"\x1f\x8b"


def gunzip(data: bytes, path: Path) -> bytearray:
    """Decompress every gzip member, step by step, into one growing buffer (glibc grows big ones in place)."""
    out = bytearray()
    for piece in _inflate(iter([data]), len(data), path):
        out += piece
    return out


def _inflate(blocks: Iterable[bytes], size: int, path: Path) -> Iterator[bytes]:
    """The decompressed pieces of every gzip member in a stream of compressed blocks (`size` bytes in all)."""
    limit = max(MIN_GZIP_LIMIT, MAX_GZIP_RATIO * size)
    done = 0
    inflater = _decompressobj(wbits=31)  # 31: a gzip header and trailer, both checked
    member_ended, carry = False, b""
    for block in blocks:
        view, pos = memoryview(carry + block if carry else block), 0
        carry = b""
        while pos < len(view):
            if member_ended:  # another member follows, or trailing padding (ignored, as gzip does)
                if len(view) - pos < 2:
                    carry = bytes(view[pos:])
                    break
                if bytes(view[pos : pos + 2]) != _GZIP_MAGIC:
                    return
                member_ended, inflater = False, _decompressobj(wbits=31)
            piece = view[pos : pos + _IN_CHUNK]
            pos += len(piece)
            while True:
                out = inflater.decompress(piece, _OUT_CHUNK)
                piece = inflater.unconsumed_tail
                done += len(out)
                if done > limit:
                    raise StepscopeError(f"{path}: decompresses to over {MAX_GZIP_RATIO}x its size, more than any "
                                         f"profiler trace does (stopped at {done >> 20} MiB)")
                if out:
                    yield out
                if inflater.eof or (not piece and len(out) < _OUT_CHUNK):  # a full output may have more behind it
                    break
            if inflater.eof:
                pos -= len(inflater.unused_data)  # the next member starts there
                member_ended = True
    if not member_ended:
        raise StepscopeError(f"{path}: truncated gzip (the file ends inside the compressed data, "
                             f"after {done:,} bytes of it)")


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
        except GZIP_ERRORS as exc:
            raise StepscopeError(f"{path}: corrupt gzip ({exc})") from None
        if not data:
            raise StepscopeError(f"{path}: gzip holds an empty file")
    return data


_READ_BLOCK = 8 << 20  # bytes read from the file at a time


def read_pieces(path: Path) -> tuple[Generator[bytes, None, None], int, Callable[[], int]]:
    """The file's content (gunzipped when it is gzip) as a stream of pieces, for reading a file larger than memory
    should hold at once; its size on disk, and a function telling how many of those bytes were read so far.
    The same one-line errors as read_bytes."""
    check_file(path)
    try:
        size = path.stat().st_size
        handle = path.open("rb")
    except OSError as exc:
        raise StepscopeError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if size == 0:
        handle.close()
        raise StepscopeError(f"{path}: file is empty")

    read = [0]  # bytes read from the file so far, counted by the reading thread (the caller's may not ask the file)

    def blocks() -> Iterator[bytes]:
        with handle:
            while block := handle.read(_READ_BLOCK):
                read[0] += len(block)
                yield block

    gzipped = handle.read(2) == _GZIP_MAGIC
    handle.seek(0)
    pieces = _inflate(blocks(), size, path) if gzipped else blocks()
    # Read and gunzipped on a second thread while the caller decodes: both release the GIL.
    return _checked(read_ahead(pieces), path, gzipped), size, lambda: min(read[0], size)


def _checked(pieces: Iterator[bytes], path: Path, gzipped: bool) -> Generator[bytes, None, None]:
    try:
        any_data = False
        for piece in pieces:
            any_data = True
            yield piece
    except GZIP_ERRORS as exc:
        raise StepscopeError(f"{path}: corrupt gzip ({exc})") from None
    except OSError as exc:
        raise StepscopeError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if gzipped and not any_data:
        raise StepscopeError(f"{path}: gzip holds an empty file")


def check_file(path: Path) -> None:
    if not path.exists():
        raise StepscopeError(f"{path}: no such file or folder")
    if path.is_dir():
        raise StepscopeError(f"{path}: is a folder, expected a trace file")
