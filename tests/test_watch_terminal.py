"""`stepscope watch` in a real terminal (tmux): the first run's figures, then after widening a layer the forward
line shows as slower beyond noise; Ctrl-C during a capture leaves no process behind. Skips without tmux."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ON_CI
from live_scripts import FORWARD_LINE, WIDE, alive, descendants, wait_for, write_script

psutil = pytest.importorskip("psutil")
TMUX = shutil.which("tmux")
# Without tmux the test skips, except under CI (CI set): there it fails, so that CI cannot pass without it.
pytestmark = pytest.mark.skipif(TMUX is None and not ON_CI, reason="tmux is not installed (apt-get install tmux)")


@pytest.fixture(autouse=True)
def tmux_under_ci() -> None:
    if TMUX is None:
        pytest.fail("tmux is not installed, and CI is set: CI must run the terminal test (scripts/test installs it)",
                    pytrace=False)


def screen(session: str) -> str:
    return subprocess.run([TMUX, "capture-pane", "-p", "-J", "-t", session], capture_output=True, text=True).stdout


def save_svg(session: str, path: Path) -> None:
    from rich.console import Console
    from rich.text import Text

    ansi = subprocess.run([TMUX, "capture-pane", "-p", "-e", "-t", session], capture_output=True, text=True).stdout
    with open(os.devnull, "w") as sink:
        console = Console(record=True, width=160, file=sink, force_terminal=True)
        console.print(Text.from_ansi(ansi.rstrip()))
    console.save_svg(str(path), title="stepscope watch")


def table_row(text: str, start: str) -> str:
    """The table row that starts with `start`, with its wrapped continuation lines joined to it."""
    lines = text.splitlines()
    at = next((i for i, ln in enumerate(lines) if ln.startswith(start)), None)
    assert at is not None, text
    end = next((j for j in range(at + 1, len(lines)) if not lines[j].startswith(" ")), len(lines))
    return " ".join(" ".join(ln.replace("│", " ").split()) for ln in lines[at:end])


def test_watch_shows_the_change_and_ctrl_c_leaves_nothing(tmp_path: Path) -> None:
    script = write_script(tmp_path)
    session = f"stepscope-watch-{tmp_path.name}"[:60]
    # COLUMNS from the test's own environment would override the pane's width for rich
    cmd = (f"cd {shlex.quote(str(tmp_path))} && unset COLUMNS LINES && OMP_NUM_THREADS=1 "
           f"{shlex.quote(sys.executable)} -m stepscope watch --polling --runs-dir runs train.py; "
           "echo WATCH-EXIT=$?; sleep 60")
    subprocess.run([TMUX, "new-session", "-d", "-s", session, "-x", "160", "-y", "60", cmd], check=True)
    try:
        # A screen is read whole only once rich has drawn the finished run's frame: a capture can land mid-redraw,
        # so the same screen twice, 0.3 s apart.
        def drawn(finished: str) -> str | None:
            text = screen(session)
            if not (re.search(finished, text) and "step time" in text and f"train.py:{FORWARD_LINE} " in text):
                return None
            time.sleep(0.3)
            return text if screen(session) == text else None

        wait_for(lambda: drawn(r"run 1 \(start\): finished"), 90, "the first run's frame")
        script.write_text(WIDE)  # the forward line now multiplies by a 16384-wide layer instead of a 64-wide one
        text = wait_for(lambda: drawn(r"run 2 \(saved train\.py\): finished"), 90, "the second run's frame")
        row = table_row(str(text), f"train.py:{FORWARD_LINE} ")
        assert "out = model(x)" in row
        assert re.search(r"fwd \+[\d.]+ (ms|µs) \(\+\d+%\) slower", row), row  # vs previous, beyond noise
        if images := os.environ.get("STEPSCOPE_DOCS_IMAGES"):  # docs/watch.md's picture
            save_svg(session, Path(images) / "watch-terminal.svg")
        # Ctrl-C while a capture runs: touch the script, wait for its `stepscope run` child, then interrupt.
        pane_pid = int(subprocess.run([TMUX, "display-message", "-p", "-t", session, "#{pane_pid}"],
                                      capture_output=True, text=True).stdout)
        script.write_text(WIDE + "\n")
        children = wait_for(lambda: [p for p in alive(descendants(pane_pid)) if "run" in p.cmdline()
                                     and "stepscope" in p.cmdline()], 30, "the third capture")
        everything = alive(descendants(pane_pid))
        time.sleep(0.5)
        subprocess.run([TMUX, "send-keys", "-t", session, "C-c"], check=True)
        wait_for(lambda: "WATCH-EXIT=0" in screen(session), 30, "watch to end")
        assert "stepscope: watch ended" in screen(session)
        left = [p for p in alive(everything) if p.name() != "sleep" and "bash" not in p.name()]
        assert children and not left, [p.cmdline() for p in left]
    finally:
        subprocess.run([TMUX, "kill-session", "-t", session], capture_output=True)
