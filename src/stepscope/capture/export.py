"""Write the profiler's trace to disk as gzipped JSON, keeping it even when the profiler trips over it.

torch's profiler with `with_stack=True` can put bytes that are not UTF-8 into the trace (truncated
Python stack strings, seen inside DataLoader loops) and then fail with UnicodeDecodeError when the
trace is read back. Here the export goes to a plain JSON file first (torch's own .gz path re-reads it
as text), bad bytes are replaced, and the file is compressed by us; a failed export that left a file
keeps that file. (Kineto also writes range names unescaped; stepscope's own ranges are made JSON-safe
when they are named, in trace.source_annotations, since Kineto's line layout varies between versions.)
"""

from __future__ import annotations

import codecs
import gzip
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope.atomic import atomic_file
from stepscope.errors import StepscopeError


@dataclass(frozen=True)
class Exported:
    path: Path | None  # the gzipped trace, None when nothing usable was written
    notes: tuple[str, ...] = ()
    error: str | None = None  # why there is no trace


def export_trace(prof: Any, dest: Path, cut_step: int | None = None) -> Exported:
    """Export a finished torch.profiler window to `dest` (.json.gz); never raises.

    `cut_step`: the step the program was in when it ended; its range is renamed so that no analysis
    takes the fragment for a whole step.
    """
    raw = dest.with_name(dest.name + ".part.json")
    error = None
    try:
        prof.export_chrome_trace(str(raw))
    except Exception as exc:  # the profiler's own failure must not lose the run
        error = f"{type(exc).__name__}: {exc}"
    finally:
        # Kineto writes through `<name>.tmp` and renames it; on a full disk that file stays behind.
        raw.with_name(raw.name + ".tmp").unlink(missing_ok=True)
    if not raw.is_file() or raw.stat().st_size == 0:
        raw.unlink(missing_ok=True)
        return Exported(None, error=error or f"nothing was written to {raw}{_room_left(dest.parent)}")
    notes = []
    if error:
        notes.append(f"the profiler's trace export failed ({error}); kept the file it had written")
    rename = None
    if cut_step is not None:
        rename = (f'"ProfilerStep#{cut_step}"'.encode(), f'"ProfilerStep#{cut_step} (cut short)"'.encode())
    try:
        if gzip_utf8(raw, dest, rename=rename):
            notes.append("replaced bytes that were not UTF-8 in the trace (a known profiler bug with with_stack)")
    except StepscopeError as exc:
        return Exported(None, error=exc.message)
    except OSError as exc:
        return Exported(None, error=f"cannot read {raw}: {exc.strerror or exc}")
    finally:
        raw.unlink(missing_ok=True)
    return Exported(dest, tuple(notes))


def _room_left(folder: Path) -> str:
    """Why a write may have failed, when the disk is (nearly) full; empty otherwise."""
    try:
        stats = os.statvfs(folder)
    except (OSError, AttributeError):  # no statvfs on Windows
        return ""
    free = stats.f_bavail * stats.f_frsize
    return f": the disk holding it has {free:,} bytes free" if free < 1 << 20 else ""


def gzip_utf8(src: Path, dest: Path, compresslevel: int = 3, rename: tuple[bytes, bytes] | None = None) -> bool:
    """Compress `src` into `dest` (written whole or not at all), replacing `rename[0]` by `rename[1]` (whole
    lines of Kineto's JSON); returns True when bytes that were not UTF-8 had to be replaced."""
    try:
        _copy(src, dest, compresslevel, "strict", rename)
        return False
    except UnicodeDecodeError:
        pass  # nothing was written: the strict pass is abandoned, its temporary file removed
    _copy(src, dest, compresslevel, "replace", rename)
    return True


BLOCK = 1 << 20


def _converted(chunk: bytes, decoder: codecs.IncrementalDecoder, errors: str,
               rename: tuple[bytes, bytes] | None) -> bytes:
    text = decoder.decode(chunk)
    data = chunk if errors == "strict" else text.encode("utf-8")  # valid: keep the original bytes
    return data.replace(*rename) if rename and rename[0] in data else data


def _copy(src: Path, dest: Path, compresslevel: int, errors: str, rename: tuple[bytes, bytes] | None) -> None:
    """Stream `src` through a UTF-8 decoder into gzip; a strict pass raises UnicodeDecodeError at a bad byte."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors)
    with src.open("rb") as fin, atomic_file(dest, what="trace") as out, \
            gzip.GzipFile(fileobj=out, mode="wb", compresslevel=compresslevel) as fout:
        # Kineto writes one short line per field, so whole lines are a safe unit for the rename and the repair: read
        # in blocks (a line at a time took seconds on a large trace), each cut at its last newline.
        pending = b""
        while True:
            block = fin.read(BLOCK)
            if not block:
                break
            block = pending + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                pending = block
                continue
            fout.write(_converted(block[:cut], decoder, errors, rename))
            pending = block[cut:]
        if pending:
            fout.write(_converted(pending, decoder, errors, rename))
        tail = decoder.decode(b"", final=True)  # a sequence cut off by the end of the file
        if errors != "strict":
            fout.write(tail.encode("utf-8"))
