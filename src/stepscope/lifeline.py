"""No capture outlives the front end that started it (`stepscope watch`, `stepscope lsp`), even one killed with
SIGKILL, whose cleanup never runs. The front end holds the write end of a pipe that nothing ever writes; each
capture (a `stepscope run` child, leading its own session) gets the read end and waits on it in a thread: when
the front end is gone, by any death, the kernel closes the write end, the read returns, and the capture kills its
own process group (the user's program and its workers with it). A pipe rather than PR_SET_PDEATHSIG: that one
fires when the *thread* that started the child ends (the engine's threads come and go), and it is Linux only."""

from __future__ import annotations

import contextlib
import os
import signal
import threading

ENV = "STEPSCOPE_LIFELINE_FD"
_pipe: tuple[int, int] | None = None
_lock = threading.Lock()


def for_child() -> tuple[int, dict[str, str]]:
    """The descriptor a child must inherit (Popen's pass_fds) and its environment entry; the pipe is made once per
    front-end process, and its write end is never inherited (os.pipe's descriptors are not)."""
    global _pipe
    with _lock:
        if _pipe is None:
            _pipe = os.pipe()
        read_end = _pipe[0]
    return read_end, {ENV: str(read_end)}


def follow_parent() -> None:
    """In the child: when the environment names a lifeline, end this process group once it breaks. The entry is
    taken out, so the user's program and what it starts do not see it."""
    value = os.environ.pop(ENV, None)
    if value is None or not value.isdigit():
        return
    fd = int(value)
    try:
        os.set_inheritable(fd, False)  # not for the program's own subprocesses
    except OSError:
        return  # not open here (the variable leaked from elsewhere): nothing to follow
    threading.Thread(target=_wait, args=(fd,), daemon=True, name="stepscope-lifeline").start()


def _wait(fd: int) -> None:
    with contextlib.suppress(OSError):
        while os.read(fd, 1):
            pass
    # The front end is gone: nobody will read this capture. The whole group goes when this process leads it.
    with contextlib.suppress(OSError):
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
