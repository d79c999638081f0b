"""The CLI's own process, set up for a verb that only reads files (`analyze`, `report`, `diff`, `predict`): it runs
none of the user's code, so its libraries can be tuned for the analysis alone. Each setting is measured on
`stepscope analyze` of the V100 DDP trace (benchmarks/README.md)."""

from __future__ import annotations

import dataclasses
import gc
import marshal
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# glibc's malloc (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD): arrays up to this size come from the heap, and this much free
# heap is kept, instead of each array of a few MB being mapped afresh and the freed heap given back. An analysis
# allocates and frees such arrays thousands of times, and every page of a fresh mapping faults when first touched:
# 57k page faults became 35k, ~50 ms, for ~4 MB more resident memory at the peak.
MMAP_THRESHOLD = 16 << 20
TRIM_THRESHOLD = 64 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


_reading = False  # set up by for_reading: this process is the CLI's, for a verb that only reads files


def for_reading() -> None:
    """Before the verb loads anything: one BLAS thread and the heap kept (glibc)."""
    global _reading
    _reading = True
    # numpy's OpenBLAS starts a thread per core that spins for ~0.1 s after the import: these verbs do no linear
    # algebra, and it would take the second core the read-ahead thread inflates the trace on.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if sys.platform.startswith("linux") and "glibc" in (os.confstr("CS_GNU_LIBC_VERSION") or ""):
        import ctypes

        try:
            libc = ctypes.CDLL(None)
            libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        except (OSError, AttributeError):  # another libc under the name: its defaults stand
            pass


def loaded() -> None:
    """After the verb's modules loaded (with the collector off): what they made frozen, in a process set up for
    reading. They are tens of thousands of objects that last until the exit, all in the young generation, which the
    first collections after would walk whole (`analyze`: a young one of ~12 ms, then the middle generation's, ~11
    ms, while the report is drawn). The permanent generation is never walked. Elsewhere (a test calling the CLI in
    its own process) nothing is frozen: later garbage among those objects would never be collected."""
    if _reading:
        gc.freeze()


def before_exit() -> None:
    """What the verb leaves, frozen: the interpreter's last collection would walk all of it (tens of ms of an
    analysis) just before freeing it."""
    gc.freeze()


# The methods @dataclass writes for each class (__init__, __repr__, __eq__, __hash__, a frozen class's __setattr__
# and __delattr__) are source text it compiles one by one: ~0.35 ms a class, ~40 ms of `analyze`'s start for its
# ~110 classes. Their compiled code is kept beside the package's bytecode, keyed by that very text (so a changed
# class can only miss, never get another's code), for this interpreter build alone; a cache that cannot be read or
# written is only not used.
_CODE_CACHE = Path(__file__).parent / "__pycache__" / f"dataclass-methods.{sys.implementation.cache_tag}.marshal"
_CODE_CACHE_HEADER = f"stepscope dataclass methods, Python {sys.version}\n".encode()
MAX_CACHED_CODE = 4096  # entries; beyond, the cache starts again from what the last verb used


def _cached_code() -> dict[str, object]:
    try:
        data = _CODE_CACHE.read_bytes()
        if data.startswith(_CODE_CACHE_HEADER):
            cached = marshal.loads(memoryview(data)[len(_CODE_CACHE_HEADER):])
            if isinstance(cached, dict):
                return cached
    except (OSError, ValueError, EOFError, TypeError):
        pass
    return {}


@contextmanager
def dataclass_code_cached() -> Iterator[None]:
    """While the verb's modules load, in a process set up for reading: each dataclass method's code compiled once
    for all runs (exactly what compiling its text gives: the same text, no inherited flags, as dataclasses does)."""
    if not _reading or sys.implementation.cache_tag is None or hasattr(dataclasses, "exec"):
        yield
        return
    cached = _cached_code()
    used: dict[str, object] = {}

    def compiled_exec(source: object, globals: dict | None = None, locals: dict | None = None) -> None:
        code = cached.get(source) if isinstance(source, str) else None
        if code is None:
            code = compile(source, "<string>", "exec", dont_inherit=True)  # type: ignore[call-overload]
        if isinstance(source, str):
            used[source] = code
        exec(code, globals, locals)  # what dataclasses does with the text, compiled already

    dataclasses.exec = compiled_exec  # type: ignore[attr-defined]  # found before the builtin by dataclasses
    try:
        yield
    finally:
        del dataclasses.exec  # type: ignore[attr-defined]
    if used.keys() - cached.keys() and not sys.dont_write_bytecode:
        _write_code_cache(used if len(cached) + len(used) > MAX_CACHED_CODE else {**cached, **used})


def _write_code_cache(code: dict[str, object]) -> None:
    temp = _CODE_CACHE.with_name(f"{_CODE_CACHE.name}.{os.getpid()}.tmp")
    try:
        temp.write_bytes(_CODE_CACHE_HEADER + marshal.dumps(code))
        os.replace(temp, _CODE_CACHE)  # whole or not at all, for a process reading it at the same time
    except (OSError, ValueError):
        temp.unlink(missing_ok=True)
