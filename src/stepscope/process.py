"""The CLI's own process, set up for a verb that only reads files (`analyze`, `report`, `diff`, `predict`): it runs
none of the user's code, so its libraries can be tuned for the analysis alone. Each setting is measured on
`stepscope analyze` of the V100 DDP trace (benchmarks/README.md)."""

from __future__ import annotations

import gc
import os
import sys

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
