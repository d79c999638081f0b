"""The live engine with real captures: a new submit cancels the one in flight (its whole process group goes, and
it sends nothing more), a finished capture's report has the script's lines, a script that raises gives a one-line
error, close() leaves no process behind; the debouncer calls once per burst."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from live_scripts import ENV, FORWARD_LINE, alive, descendants, wait_for, write_script
from stepscope.live.engine import Debouncer, Finished, Reprofiler, Started, Target

psutil = pytest.importorskip("psutil")

# Spawns a grandchild (a sleeping process in the program's group) and then trains for minutes: only a kill of
# the whole group ends both.
SPAWNS_AND_HANGS = """\
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
import torch
for step in range(100000):
    torch.ones(8).sum()
    time.sleep(0.01)
"""


class Recorder:
    def __init__(self) -> None:
        self.events: list[object] = []
        self.done = threading.Event()

    def __call__(self, event: object) -> None:
        self.events.append(event)
        if isinstance(event, Finished):
            self.done.set()


def engine(tmp_path: Path, recorder: Recorder, argv: tuple[str, ...]) -> Reprofiler:
    return Reprofiler(Target(argv, tmp_path, env=ENV), on_event=recorder, workdir=tmp_path / "work")


def test_a_new_submit_cancels_the_capture_in_flight(tmp_path: Path) -> None:
    (tmp_path / "hang.py").write_text(SPAWNS_AND_HANGS)
    write_script(tmp_path)
    rec = Recorder()
    me = psutil.Process()
    before = frozenset(p.pid for p in descendants(me.pid))
    rp = engine(tmp_path, rec, ("hang.py",))
    try:
        first = rp.submit()
        # the capture, its program and the program's own child: wait for the sleeping grandchild to exist
        wait_for(lambda: any("time.sleep(120)" in " ".join(p.cmdline())
                             for p in alive(descendants(me.pid, before))), 60, "the program's child process")
        doomed = alive(descendants(me.pid, before))
        rp.target = Target(("train.py",), tmp_path, env=ENV)
        second = rp.submit()
        assert not alive(doomed), f"left running after cancel: {[p.cmdline() for p in alive(doomed)]}"
        assert rec.done.wait(90), "the second capture never finished"
    finally:
        rp.close()
    assert (first, second) == (1, 2)
    finished = [e for e in rec.events if isinstance(e, Finished)]
    assert [e.run_id for e in finished] == [2]  # the cancelled capture sent nothing after its Started
    assert [e.run_id for e in rec.events if isinstance(e, Started)] == [1, 2]
    result = finished[0].result
    assert result.error is None and result.report is not None
    lines = {(r.file, r.line) for r in result.report.lines.rows}
    assert ("train.py", FORWARD_LINE) in lines
    assert result.started <= (result.first_figures or 0) <= result.finished
    assert not alive(descendants(me.pid, before))


def test_a_script_that_raises_gives_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("raise ValueError('planted failure 42')\n")
    rec = Recorder()
    rp = engine(tmp_path, rec, ("bad.py",))
    try:
        rp.submit()
        assert rec.done.wait(60)
    finally:
        rp.close()
    result = next(e for e in rec.events if isinstance(e, Finished)).result
    assert result.report is None or not result.report.summary.step_time_us
    assert result.error is not None and "planted failure 42" in result.error and "\n" not in result.error


def test_close_kills_the_capture_and_its_children(tmp_path: Path) -> None:
    (tmp_path / "hang.py").write_text(SPAWNS_AND_HANGS)
    rec = Recorder()
    me = psutil.Process()
    before = frozenset(p.pid for p in descendants(me.pid))
    rp = engine(tmp_path, rec, ("hang.py",))
    rp.submit()
    wait_for(lambda: any("time.sleep(120)" in " ".join(p.cmdline()) for p in alive(descendants(me.pid, before))),
             60, "the program's child process")
    procs = alive(descendants(me.pid, before))
    assert len(procs) >= 2  # stepscope run (the program runs in it) and the program's own child
    rp.close()
    assert not alive(procs)
    assert not [e for e in rec.events if isinstance(e, Finished)]
    with pytest.raises(RuntimeError):
        rp.submit()


def test_debouncer_calls_once_per_burst() -> None:
    calls: list[float] = []
    d = Debouncer(0.2, lambda: calls.append(time.monotonic()))
    start = time.monotonic()
    for _ in range(5):  # five saves 50 ms apart: one call, 0.2 s after the last
        d()
        time.sleep(0.05)
    wait_for(lambda: calls, 2, "the debounced call")
    time.sleep(0.3)
    assert len(calls) == 1
    assert calls[0] - start >= 0.2 + 4 * 0.05 - 0.01
    d()
    d.cancel()
    time.sleep(0.3)
    assert len(calls) == 1
