"""SIGHUP (a closed terminal, a dropped ssh session) in the window keeps what was captured, as SIGTERM does: the
run is started on a pseudo-terminal, the terminal is closed (writes to it fail with EIO from then on) and the
run is sent SIGHUP, as the kernel does when a terminal goes."""

from __future__ import annotations

import gzip
import json
import os
import pty
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

TRAIN = """
import sys, time
import torch

model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(40):
    loss = model(torch.randn(16, 32)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i == 5:
        print("HANGUP-NOW", flush=True)
        time.sleep(30)  # in the window (steps 3-7 recorded): the hangup comes here
print("program finished", flush=True)
"""


def _read_until(fd: int, marker: bytes, seen: bytearray, found: threading.Event) -> None:
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            return
        if not chunk:
            return
        seen.extend(chunk)
        if marker in seen:
            found.set()


def test_sighup_during_the_window_keeps_the_capture(tmp_path: Path) -> None:
    script, out = tmp_path / "train.py", tmp_path / "run"
    script.write_text(textwrap.dedent(TRAIN))
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "stepscope", "run", "--out", str(out), "--skip", "2", "--warmup",
                             "1", "--steps", "5", "--telemetry-interval", "0", str(script)],
                            stdin=slave, stdout=slave, stderr=slave, env={**os.environ, "OMP_NUM_THREADS": "1"})
    os.close(slave)
    seen, found = bytearray(), threading.Event()
    reader = threading.Thread(target=_read_until, args=(master, b"HANGUP-NOW\r\n", seen, found), daemon=True)
    reader.start()
    try:
        assert found.wait(240), seen.decode(errors="replace")
        time.sleep(0.5)  # the program is in its sleep, in the window
        os.close(master)  # the terminal is gone: the run's writes to it fail with EIO from now on
        time.sleep(0.2)
        proc.send_signal(signal.SIGHUP)
        code = proc.wait(240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 129, seen.decode(errors="replace")  # 128 + SIGHUP, once everything was written
    report = json.loads((out / "report.json").read_bytes())
    assert report["run"]["status"] == "terminated" and report["run"]["exit_code"] == 129
    assert 1 <= report["run"]["steps_recorded"] <= 5  # the window was cut short, not empty
    assert {"trace.json.gz", "report.txt", "report.html"} <= {p.name for p in out.iterdir()}
    events = json.loads(gzip.decompress((out / "trace.json.gz").read_bytes()))["traceEvents"]
    assert any(e.get("name", "").startswith("ProfilerStep#") for e in events)  # the raw trace holds the steps
