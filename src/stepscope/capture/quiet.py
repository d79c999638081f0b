"""Keep the profiler's own native chatter out of the user's terminal.

torch's profiler writes to file descriptor 2 from C++ when it starts and stops (`USDT: ...
profiler_start`/`profiler_stop`) and when it closes ranges still open at its stop (`collection.cpp:...
Warning: Optimizer.step#...`: the window ends inside the optimizer step's own hook). Around those calls
stderr is caught; every line but those is written back, so the program's own output remains.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress

PROFILER_NOISE = re.compile(r"^USDT:.*\bprofiler_(?:start|stop)\b|collection\.cpp:\d+\] Warning: ")


@contextmanager
def profiler_stderr() -> Iterator[None]:
    """Run the block with fd 2 caught; write back every line that is not the profiler's noise."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no real stderr (embedded, closed): nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            with suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [line for line in caught.read().decode(errors="replace").splitlines(keepends=True)
                    if not PROFILER_NOISE.search(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
