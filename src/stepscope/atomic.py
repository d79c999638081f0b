"""Every file stepscope writes goes through here: into a temporary file in the same folder, then renamed
over the target. A full disk, a read-only folder or a kill mid-write leaves the earlier file (or none),
never half of one, and no temporary file; the error names the file and says why."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from stepscope.errors import StepscopeError

_NO_ACCESS = (errno.EACCES, errno.EPERM, errno.EROFS)


def write_atomic(path: str | Path, data: bytes | str, *, what: str, hint: str | None = None) -> Path:
    """Write `data` (str as UTF-8) to `path` atomically; a StepscopeError naming the file if it cannot be."""
    with atomic_file(path, what=what, hint=hint) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


@contextmanager
def atomic_file(path: str | Path, *, what: str, hint: str | None = None) -> Iterator[IO[bytes]]:
    """A binary file to write `path` through: it appears, complete, only when the block ends without error."""
    path = Path(path)
    tmp = path.with_name(f".{path.name[:200]}.{os.getpid()}.tmp")  # within NAME_MAX however long the name
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise _error(path, what, exc, hint) from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())  # a write the disk could not take fails here, before the rename
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _error(path, what, exc, hint) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _error(path: Path, what: str, exc: OSError, hint: str | None) -> StepscopeError:
    reason = exc.strerror or str(exc)
    if hint is None and exc.errno in _NO_ACCESS:
        hint = "write it somewhere you can (another folder or file name)"
    if hint is None and exc.errno == errno.ENOSPC:
        hint = "free some space on that disk, or write somewhere else"
    return StepscopeError(f"{path}: cannot write the {what} ({reason.lower()})", hint=hint)
