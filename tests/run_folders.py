"""A good run folder and `stepscope analyze` on copies of it, for the tests that mangle its files
(test_run_folder_files.py, test_fuzz_run_folder.py): in this process, under an alarm that turns a hang into an
error."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stepscope.cli import main as cli_main
from test_run import TRAIN, write

HANG_S = 60  # a FIFO or /dev/zero read blocks forever: anything near this is a hang


def make_run(base: Path) -> Path:
    """`stepscope run` of a small CPU training loop (about 10 s of CPU), on one torch thread."""
    import torch

    script = write(base / "train.py", TRAIN)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert cli_main(["run", "--out", str(base / "run"), str(script)]) == 0
    finally:
        torch.set_num_threads(threads)
    folder = base / "run"
    (folder / "report.html").unlink()  # no reader of the folder takes it
    return folder


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Raise in the main thread after `seconds` (a blocking open or read is interrupted by the signal)."""
    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"analyze still running after {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def analyze_cli(folder: Path, capfd: pytest.CaptureFixture[str]) -> tuple[int, dict | None, str]:
    """`stepscope analyze FOLDER --json OUT` in this process: its exit code, its report, what it printed on
    stderr."""
    out = folder.parent / f"{folder.name}.report.json"
    out.unlink(missing_ok=True)
    capfd.readouterr()
    with deadline(HANG_S):
        code = cli_main(["analyze", str(folder), "--json", str(out)])
    _, err = capfd.readouterr()
    return code, json.loads(out.read_text()) if code == 0 else None, err


def copy(good: Path, where: Path, name: str = "run") -> Path:
    folder = where / name
    shutil.copytree(good, folder, symlinks=True)
    return folder
