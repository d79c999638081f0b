"""However `stepscope watch` or `stepscope lsp` ends, no capture outlives it: SIGTERM and SIGHUP end either as
Ctrl-C does (the capture stopped, the temporary folder removed); SIGKILL, whose cleanup never runs, leaves the
captures to end themselves on their broken lifeline (stepscope/lifeline.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
psutil = pytest.importorskip("psutil")

# The program runs far longer than any test waits: a capture still alive after its front end is gone is seen.
LONG = """import torch
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(10**6):
    model(torch.randn(8, 64)).sum().backward()
    opt.step()
"""
CAPTURE_OPTIONS = ["--skip", "100000", "--warmup", "1", "--steps", "3", "--no-timing-pass"]  # never reaches it


def _captures(pid: int, timeout: float = 240) -> list[Any]:
    """The processes under `pid` once one is a `stepscope run` capture that has loaded torch: past its start-up
    (which, on a loaded machine, can take longer than the wait below), so the capture itself is under way."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            children = psutil.Process(pid).children(recursive=True)
            if any("run" in c.cmdline() and any("libtorch" in m.path for m in c.memory_maps()) for c in children):
                return children
        except psutil.Error:
            pass
        time.sleep(0.1)
    raise AssertionError(f"no capture got under way under {pid} in {timeout} s")


def _watch(tmp_path: Path) -> subprocess.Popen[bytes]:
    script = tmp_path / "train.py"
    script.write_text(LONG)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    return subprocess.Popen([sys.executable, "-m", "stepscope", "watch", *CAPTURE_OPTIONS, str(script)],
                            cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


@pytest.mark.parametrize("how", [signal.SIGHUP, signal.SIGKILL])
def test_no_capture_outlives_watch(tmp_path: Path, how: int) -> None:
    proc = _watch(tmp_path)
    try:
        children = _captures(proc.pid)
        proc.send_signal(how)
        code = proc.wait(60)
        _, alive = psutil.wait_procs(children, timeout=3)  # the program runs for hours if left
        assert alive == [], [c.cmdline() for c in alive]
        if how == signal.SIGHUP:
            assert code == 0 and b"Traceback" not in proc.stderr.read()  # type: ignore[union-attr]
            assert not list(tmp_path.glob("stepscope-watch-*"))  # its temporary folder removed
    finally:
        if proc.poll() is None:
            proc.kill()


async def _lsp_ended_by(tmp_path: Path, how: int) -> tuple[int, list[Any]]:
    from lsprotocol import types as t
    from pygls.lsp.client import LanguageClient
    from pygls.uris import from_fs_path

    script = tmp_path / "train.py"
    script.write_text(LONG)
    client = LanguageClient("stepscope-test", "1")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}
    await client.start_io(sys.executable, "-m", "stepscope", "lsp", cwd=str(tmp_path), env=env)
    await client.initialize_async(t.InitializeParams(
        capabilities=t.ClientCapabilities(), root_uri=from_fs_path(str(tmp_path)), process_id=os.getpid(),
        initialization_options={"runOptions": CAPTURE_OPTIONS, "debounce": 0}))
    client.initialized(t.InitializedParams())
    client.text_document_did_save(t.DidSaveTextDocumentParams(t.TextDocumentIdentifier(
        uri=from_fs_path(str(script)) or "")))
    server = client._server
    assert server is not None
    children = await asyncio.to_thread(_captures, server.pid)
    server.send_signal(how)
    code = await asyncio.wait_for(server.wait(), 60)
    with contextlib.suppress(Exception):  # the server is gone: the client's own teardown may complain
        await asyncio.wait_for(client.stop(), 10)
    return code, children


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_no_capture_outlives_the_language_server(tmp_path: Path, how: int) -> None:
    pytest.importorskip("pygls")
    code, children = asyncio.run(_lsp_ended_by(tmp_path, how))
    _, alive = psutil.wait_procs(children, timeout=3)
    assert alive == [], [c.cmdline() for c in alive]
    if how != signal.SIGKILL:
        assert code == 0, code
        assert not list(tmp_path.glob("stepscope-lsp-*"))  # its temporary folder removed


def test_watch_ends_cleanly_when_its_terminal_closes(tmp_path: Path) -> None:
    """The terminal closes, then the hangup comes (as the kernel sends it): watch ends as on Ctrl-C, where its last
    lines to the gone terminal raised an OSError (EIO) traceback."""
    script = tmp_path / "train.py"
    script.write_text(LONG)
    master, slave = pty.openpty()
    err = tmp_path / "stderr.txt"
    with err.open("wb") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "stepscope", "watch", *CAPTURE_OPTIONS, str(script)],
                                cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path),
                                                   "TERM": "xterm"},  # a terminal rich redraws (not "dumb")
                                stdin=subprocess.DEVNULL, stdout=slave, stderr=err_file)
    os.close(slave)
    stop = threading.Event()
    drain = threading.Thread(target=_drain, args=(master, stop), daemon=True)
    drain.start()
    try:
        children = _captures(proc.pid)
        stop.set()
        drain.join(10)  # no read in flight: a read holds the terminal open past its close
        os.close(master)  # the terminal is gone: every write to it fails with EIO from now on
        time.sleep(0.5)
        proc.send_signal(signal.SIGHUP)
        code = proc.wait(60)
        _, alive = psutil.wait_procs(children, timeout=3)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0 and "Traceback" not in err.read_text(), err.read_text()
    assert alive == [], [c.cmdline() for c in alive]
    assert not list(tmp_path.glob("stepscope-watch-*"))


def _drain(fd: int, stop: threading.Event) -> None:
    """Read what watch draws (a terminal that is not read fills, and its writer blocks) until told to stop."""
    with contextlib.suppress(OSError):
        while not stop.is_set():
            if select.select([fd], [], [], 0.1)[0] and not os.read(fd, 65536):
                return
