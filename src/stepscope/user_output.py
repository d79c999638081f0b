"""A file the user names for an output (--json, --html, --perfetto): a regular file (or a link to one) is written
atomically, on the link's target so the link stays a link; anything else (a device such as /dev/null, a FIFO, a
terminal, a process's descriptor such as /proc/self/fd/1 or /dev/stdout) is opened and written in place, the
way a shell's `>` does, and never renamed over, chmodded or deleted: replacing /dev/null with a regular file
breaks every other process of the machine."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from stepscope.atomic import write_atomic
from stepscope.errors import StepscopeError

NAME_MAX = 255  # bytes in one path component on Linux and macOS filesystems
_LINK_HOPS = 40  # the kernel's own limit on a chain of links (ELOOP)


def write_user_output(target: str, data: bytes, what: str) -> Path:
    """Write `data` to the path `target` names; a one-line StepscopeError (exit 2) when it cannot be."""
    path = check_name(target, what)
    try:
        st = os.stat(path)  # follows links: what would be written
    except (FileNotFoundError, NotADirectoryError):  # a new file (its folder is made, or said to be unmakeable)
        st = None
    except OSError as exc:
        raise _error(path, what, exc) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise StepscopeError(f"{path}: is a folder; give a file name for the {what}")
    through_proc = _through_proc(path)
    if st is not None and (not stat.S_ISREG(st.st_mode) or through_proc):
        _write_in_place(path, data, what, append=stat.S_ISREG(st.st_mode))
        return path
    if st is not None and not st.st_mode & 0o222:
        raise StepscopeError(f"{path}: is read-only; the {what} was not written over it",
                             hint="give another file name, or make it writable (chmod u+w) if it may be replaced")
    real = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StepscopeError(f"{real.parent}: cannot create the folder for the {what} ({_reason(exc)})",
                             hint="give a file name in a folder you can write to") from None
    write_atomic(real, data, what=what)
    return path


def check_name(target: str, what: str) -> Path:
    """The path of `target`, or a one-line error for a name no file can have (before any work is done)."""
    if not target:
        raise StepscopeError(f"an empty file name was given for the {what}",
                             hint="give a file name, or '-' for stdout")
    too_long = next((part for part in Path(target).parts if len(os.fsencode(part)) > NAME_MAX), None)
    if too_long is not None:
        raise StepscopeError(f"{target[:60]}...: a name in this path is {len(os.fsencode(too_long))} bytes long, "
                             f"over the {NAME_MAX} a file name can have; the {what} was not written",
                             hint="give a shorter file name")
    if os.path.isdir(target):
        raise StepscopeError(f"{target}: is a folder; give a file name for the {what}")
    return Path(target)


def _through_proc(path: Path) -> bool:
    """Whether the path, or a link on its way, is a process's descriptor (/proc/self/fd/N, /dev/stdout, /dev/fd/N):
    its target is an open file of some process, written where it is (renaming over it would cut it off)."""
    current = os.path.abspath(path)
    for _ in range(_LINK_HOPS):
        if os.path.realpath(os.path.dirname(current)).startswith("/proc/"):
            return True
        if not os.path.islink(current):
            return False
        current = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
    return False


def _write_in_place(path: Path, data: bytes, what: str, *, append: bool) -> None:
    """Open the existing file for writing, as `>` does (a FIFO waits for its reader), and write all of `data`.
    A regular file reached through a descriptor is appended to: the shell that opened it has truncated it."""
    flags = os.O_WRONLY | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0) | (os.O_APPEND if append else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise _error(path, what, exc) from None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BrokenPipeError:
        pass  # its reader left early (`head`): what it did not read goes nowhere, as for stdout
    except OSError as exc:
        raise _error(path, what, exc) from None
    finally:
        os.close(fd)


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


def _error(path: Path, what: str, exc: OSError) -> StepscopeError:
    hint = None
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = "write it somewhere you can (another folder or file name)"
    elif exc.errno == errno.ENOSPC:
        hint = "free some space on that disk, or write somewhere else"
    elif exc.errno == errno.ENXIO:
        hint = "nothing is there to take the output (a socket or a device with no driver)"
    return StepscopeError(f"{path}: cannot write the {what} ({_reason(exc)})", hint=hint)
