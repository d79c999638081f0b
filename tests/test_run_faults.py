"""`stepscope run` and the writers when the world misbehaves: SIGTERM (what timeout, SLURM and Kubernetes send)
during and after the window, a full disk, a read-only folder. What was recorded is kept, every file is whole
or absent, and the message names the file that could not be written. Runs in child processes (signals)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("torch")

from builder import TraceBuilder

# A training loop that sends itself SIGTERM after step `--kill-at`, as `timeout` would send it.
TRAIN = """
import os, signal, sys
import torch
from torch.utils.data import DataLoader, TensorDataset

args = sys.argv[1:]
opt_value = lambda name, default: type(default)(args[args.index(name) + 1]) if name in args else default
n, kill_at = opt_value("--n", 40), opt_value("--kill-at", -1)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(n * 16, 32), torch.randint(0, 4, (n * 16,)))
for i, (x, y) in enumerate(DataLoader(data, batch_size=16)):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i == kill_at:
        os.kill(os.getpid(), signal.SIGTERM)
print("program finished")
"""

API = """
import os, signal, sys
import torch
import stepscope

model = torch.nn.Linear(8, 8)


def train(p):
    for i in range(20):
        model(torch.randn(4, 8)).sum().backward()
        p.step()
        if i == 4:
            os.kill(os.getpid(), signal.SIGTERM)


if sys.argv[2] == "with":
    with stepscope.profile(skip=1, warmup=1, steps=5, out=sys.argv[1], attribution=False) as p:
        train(p)
else:  # started and never stopped, as a trainer callback without an exception hook leaves it
    p = stepscope.profile(skip=1, warmup=1, steps=5, out=sys.argv[1], attribution=False)
    p.start()
    train(p)
print("not reached")
"""


def run_with(tmp_path: Path, options: list[str], program: list[str], cwd: Path | None = None,
             ) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(TRAIN))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "stepscope", "run", *options, str(script), *program],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".") or p.name.endswith((".tmp", ".part.json"))]


# -- SIGTERM ----------------------------------------------------------------------------------------------


def test_sigterm_during_the_window_keeps_the_capture(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # The window: step 2 warms up, steps 3-7 are recorded; SIGTERM comes after step 5.
    done = run_with(tmp_path, ["--out", str(out), "--skip", "2", "--warmup", "1", "--steps", "5"], ["--kill-at", "5"])
    assert done.returncode == 143, done.stderr
    assert "terminated (SIGTERM)" in done.stderr and "Traceback" not in done.stderr
    assert "program finished" not in done.stdout
    report = json.loads((out / "report.json").read_bytes())
    assert report["run"]["status"] == "terminated" and report["run"]["exit_code"] == 143
    assert 1 <= report["run"]["steps_recorded"] < 5
    assert {"trace.json.gz", "report.txt", "report.html", "telemetry.json"} <= {p.name for p in out.iterdir()}
    assert not leftovers(out)


def test_sigterm_after_the_window_with_full_writes_the_reports(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_with(tmp_path, ["--out", str(out), "--skip", "1", "--warmup", "1", "--steps", "3", "--full"],
                    ["--kill-at", "20"])
    assert done.returncode == 143, done.stderr
    report = json.loads((out / "report.json").read_bytes())
    assert report["run"]["status"] == "terminated" and report["run"]["steps_recorded"] == 3
    assert (out / "report.html").stat().st_size > 0 and not leftovers(out)


@pytest.mark.parametrize("how", ["with", "start"])
def test_sigterm_under_the_api_keeps_the_trace(tmp_path: Path, how: str) -> None:
    script = tmp_path / "api.py"
    script.write_text(textwrap.dedent(API))
    out = tmp_path / "api-out"
    done = subprocess.run([sys.executable, str(script), str(out), how], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 143, done.stderr
    assert "not reached" not in done.stdout and "Traceback" not in done.stderr
    assert (out / "trace.json.gz").stat().st_size > 0


# -- full disks and read-only folders ----------------------------------------------------------------------


@contextmanager
def small_disk(path: Path, size: str, *, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` (root only); the test is skipped where none can be mounted."""
    path.mkdir()
    options = f"size={size}" + (",ro" if read_only else "")
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs (a disk to fill) needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_run_on_a_disk_without_room_for_the_page(tmp_path: Path) -> None:
    # Room for the profiler's raw export (~300 KB, removed once compressed), the trace (~25 KB), report.json,
    # report.txt, census.json and telemetry.json; not for report.html (~5 MB, plotly inlined).
    with small_disk(tmp_path / "disk", "1m") as disk:
        out = disk / "run"
        done = run_with(tmp_path, ["--out", str(out), "--skip", "1", "--warmup", "1", "--steps", "3"], [])
        assert done.returncode == 0, done.stderr  # the program succeeded, and the report was printed
        assert "Traceback" not in done.stderr
        assert f"{out / 'report.html'}: cannot write the report (no space left on device)" in done.stderr
        names = {p.name for p in out.iterdir()}
        assert "report.html" not in names and not leftovers(out)
        run = json.loads((out / "report.json").read_bytes())["run"]
        assert run["status"] == "window recorded"
        # the run's list of files names only what is in the folder (it listed the page that was never written)
        assert set(run["files"]) <= names and {"report.json", "report.txt", "trace.json.gz"} <= set(run["files"])
        listed = re.search(r"run folder: [^(]*\(([^)]*)\)", (out / "report.txt").read_text())
        assert listed is not None
        assert set(re.split(r",\s*", listed.group(1).strip())) == set(run["files"])  # (wrapped over lines)
        assert json.loads((out / "telemetry.json").read_bytes())["schema"].startswith("stepscope.telemetry/")


def test_run_on_a_disk_without_room_for_the_trace(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "8k") as disk:
        out = disk / "run"
        done = run_with(tmp_path, ["--out", str(out), "--skip", "1", "--warmup", "1", "--steps", "3",
                                   "--telemetry-interval", "0"], [])
        assert done.returncode == 2 and "Traceback" not in done.stderr
        # Each capture cycle exports to its own trace-N file before the chosen one becomes trace.json.gz.
        assert re.search(rf"nothing was written to {re.escape(str(out))}/trace(-\d+)?\.json\.gz\.part\.json: "
                         "the disk holding it has", done.stderr), done.stderr
        assert not leftovers(out) and not (out / "trace.json.gz").exists()


def test_analyze_output_on_a_full_disk_keeps_the_earlier_file(tmp_path: Path) -> None:
    trace = TraceBuilder()
    trace.step(0, 0, 100)
    trace.launch("gemm", (10, 15), (20, 60))
    path = trace.write(tmp_path / "t.json")
    with small_disk(tmp_path / "disk", "1m") as disk:
        page = disk / "report.html"
        page.write_bytes(b"an earlier page")
        done = subprocess.run([sys.executable, "-m", "stepscope", "analyze", "-q", str(path), "--html", str(page)],
                              capture_output=True, text=True)
        assert done.returncode == 2
        assert done.stderr.startswith(f"stepscope: error: {page}: cannot write the HTML report (no space left")
        assert page.read_bytes() == b"an earlier page" and not leftovers(disk)


def test_run_from_a_read_only_folder_says_to_use_out(tmp_path: Path) -> None:
    with small_disk(tmp_path / "ro", "64k", read_only=True) as folder:
        done = run_with(tmp_path, [], [], cwd=folder)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert "cannot create the run folder (read-only file system)" in done.stderr.lower()
        assert "hint: give --out a folder you can write to" in done.stderr
