"""`stepscope run`: real runs of small scripts on the CPU, in this process (torch loads once) and, for the
entry point and exit codes, in a child process."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import stepscope  # noqa: E402
from stepscope.cli import main as cli_main  # noqa: E402
from stepscope.model.report import from_json  # noqa: E402

# A training loop: DataLoader (batch 16) + optimizer; `--n` steps in all, and ways to fail at step `--fail-at`.
TRAIN = """
import json, sys
import torch
from torch.utils.data import DataLoader, TensorDataset

args = sys.argv[1:]
opt_value = lambda name, default: type(default)(args[args.index(name) + 1]) if name in args else default
n, fail_at, how = opt_value("--n", 40), opt_value("--fail-at", -1), opt_value("--how", "raise")
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(n * 16, 32), torch.randint(0, 4, (n * 16,)))
for i, (x, y) in enumerate(DataLoader(data, batch_size=16)):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i == fail_at:
        if how == "raise":
            raise ZeroDivisionError("boom")
        if how == "exit":
            sys.exit(3)
        raise KeyboardInterrupt
print("program finished")
"""


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def run(capfd: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = cli_main(["run", *map(str, args)])
    out, err = capfd.readouterr()
    return code, out, err


def profiler_steps(folder: Path) -> list[str]:
    with gzip.open(folder / "trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    return sorted({e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")},
                  key=lambda n: int(n.split("#")[1]))


def test_run_writes_the_run_folder(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    script = write(tmp_path / "train.py", TRAIN)
    out_dir = tmp_path / "out"
    code, out, err = run(capfd, "--out", out_dir, "--width", "120", "--skip", "10", script)  # exactly 10
    assert code == 0, err
    assert sorted(p.name for p in out_dir.iterdir()) == ["calibration.json", "census.json", "meter.json",
                                                         "report.html", "report.json", "report.txt", "telemetry.json",
                                                         "timing.json.gz", "trace.json.gz"]
    assert "program finished" not in out  # stopped once the window was recorded
    assert out.strip().splitlines()[-1] == (
        f"stepscope: wrote {out_dir}/: calibration.json, census.json, meter.json, report.html, report.json, "
        "report.txt, telemetry.json, timing.json.gz, trace.json.gz")
    # Skip 10; the timing pass warms up 2 and records the program's steps 12 to 16 (named by its own step numbers),
    # step 17 runs between the passes, the recorded pass warms up on 18-19 and records 20 to 24. The report's steps
    # are the timing pass's.
    assert profiler_steps(out_dir) == [f"ProfilerStep#{i}" for i in range(20, 25)]
    report = from_json((out_dir / "report.json").read_bytes())
    assert [s.id for s in report.steps] == ["12", "13", "14", "15", "16"]
    assert report.replay is not None and report.replay.replayed and report.replay.unprofiled_step_us
    assert report.summary.step_time_us == report.run.reference.step_us  # the headline is the unprofiled step
    run_info = report.run
    assert run_info is not None
    assert (run_info.step_source, run_info.status, run_info.exit_code) == ("optimizer", "window recorded", 0)
    assert (run_info.batch_size, run_info.batch_size_source) == (16, "dataloader")
    assert run_info.steps_recorded == 5 and run_info.first_recorded_step == 12
    assert run_info.profiled_device == "cpu" and "profiled the CPU only" in out
    assert run_info.profiler_overhead is not None and run_info.unprofiled_step_us > 0
    assert report.summary.samples_per_s == pytest.approx(16 * report.summary.steps_per_s, rel=1e-3)
    assert report.device is not None and report.device.kind == "cpu"
    text = (out_dir / "report.txt").read_text()
    assert "Step-time breakdown" in text and "run: window recorded" in text
    telemetry = json.loads((out_dir / "telemetry.json").read_text())
    assert telemetry["schema"] == "stepscope.telemetry/1" and telemetry["samples"]
    page = (out_dir / "report.html").read_text()
    assert page.lower().startswith("<!doctype html>") and "fig-run" in page and "Step-time breakdown" in page
    assert telemetry["window"]["cpu_util_per_core"] and telemetry["gpus"] == []


def test_trace_reads_back_with_the_analyzer(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from stepscope import analyze

    script = write(tmp_path / "train.py", TRAIN)
    code, _, err = run(capfd, "--out", tmp_path / "out", "--skip", "2", "--warmup", "1", "--steps", "3", script)
    assert code == 0, err
    report = analyze(tmp_path / "out" / "trace.json.gz", batch_size=16)
    # Skip 2, the timing pass (warm-up 2, records 3-5), step 6 between, the recorded pass (warm-up 7, records 8-10):
    # this file.
    assert report.summary.step_source == "ProfilerStep" and [s.id for s in report.steps] == ["8", "9", "10"]
    b = report.summary.breakdown_us
    assert b["dataloader"] > 0 and b["cpu_exec"] > 0
    assert sum(b.values()) == pytest.approx(report.summary.step_time_us, rel=1e-3)


def test_argv_and_path_are_the_programs(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    script = write(tmp_path / "sub" / "show.py", """
        import json, os, sys
        import torch
        json.dump({"argv": sys.argv, "path0": sys.path[0], "name": __name__, "file": __file__},
                  open(os.environ["SHOW_OUT"], "w"))
        """)
    shown = tmp_path / "shown.json"
    os.environ["SHOW_OUT"] = str(shown)
    try:
        args = ["-m", "torch.distributed.run", "--nproc-per-node", "8", "--skip", "3", "--no", "--s=1", "--", "x y"]
        code, _, err = run(capfd, "--out", tmp_path / "out", script, *args)
    finally:
        del os.environ["SHOW_OUT"]
    assert code == 2, err  # no steps: nothing recorded, said so
    assert "no steps were detected" in err
    seen = json.loads(shown.read_text())
    assert seen["argv"] == [str(script), *args]
    assert seen["path0"] == str(script.parent.resolve()) and seen["name"] == "__main__"
    assert seen["file"] == str(script.resolve())
    assert sys.argv[0] != str(script)  # put back afterwards


def test_module_mode_with_relative_imports(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "pkg" / "__init__.py", "")
    write(tmp_path / "pkg" / "helper.py", "BATCH = 16\n")
    write(tmp_path / "pkg" / "train.py", "from .helper import BATCH\n" + TRAIN.replace(
        'print("program finished")', 'print("module", BATCH, sys.argv, sys.path[0], __name__)'))
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capfd, "--out", "out", "--skip", "10", "--full", "-m", "pkg.train", "--n", "12", "--extra")
    assert code == 0, err
    line = next(line for line in out.splitlines() if line.startswith("module"))
    assert "16" in line and "'--n', '12', '--extra'" in line and "__main__" in line
    assert str(tmp_path / "pkg" / "train.py") in line and f" {tmp_path} " in line  # argv[0], then sys.path[0]
    assert (tmp_path / "out" / "report.json").is_file()
    report = from_json((tmp_path / "out" / "report.json").read_bytes())
    assert report.run is not None and report.run.command[:2] == ["-m", "pkg.train"]
    # --full ran all 12 steps; the steps after the window were timed unprofiled as well.
    assert report.run.profiler_overhead is not None


@pytest.mark.parametrize(("how", "code", "says"), [
    ("raise", 1, "raised ZeroDivisionError: boom"),
    ("exit", 3, "exited with code 3"),
    ("interrupt", 130, "was interrupted (KeyboardInterrupt)"),
])
def test_program_failure_keeps_results_and_exit_code(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                     how: str, code: int, says: str) -> None:
    script = write(tmp_path / "train.py", TRAIN)
    out_dir = tmp_path / "out"
    got, out, err = run(capfd, "--out", out_dir, "--skip", "5", script, "--fail-at", "9", "--how", how)
    assert got == code
    assert f"stepscope: the program {says}; kept what was captured before it ended" in err
    if how == "raise":
        assert "Traceback" in err and 'train.py", line' in err and "runpy" not in err
    # The failure came right after step 9's optimizer step: steps 7-9 are whole, step 10 is left out.
    report = from_json((out_dir / "report.json").read_bytes())
    assert [s.id for s in report.steps] == ["7", "8", "9"]
    assert report.run is not None and report.run.exit_code == code and report.run.steps_recorded == 3
    assert report.run.status == ("interrupted" if how == "interrupt" else "failed")
    assert any("step 10 was cut short" in n for n in report.notes)
    assert out.strip().splitlines()[-1].startswith(f"stepscope: wrote {out_dir}/")


# Fails inside the recorded window: in a DataLoader worker (the error comes back through the DataLoader's
# __next__, which attribution wraps) or in a torch call (which attribution's mode sees first).
FAIL_IN_WINDOW = """
import sys
import torch
from torch.utils.data import DataLoader, Dataset

class Data(Dataset):
    def __len__(self):
        return 16 * 40
    def __getitem__(self, i):
        if i == 16 * 9 and sys.argv[1] == "worker":
            raise ValueError("bad sample 144")
        return torch.randn(32), 1

model = torch.nn.Linear(32, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
if __name__ == "__main__":
    for i, (x, y) in enumerate(DataLoader(Data(), batch_size=16, num_workers=1)):
        loss = model(x if i != 9 or sys.argv[1] == "worker" else x[:, :3]).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


@pytest.mark.parametrize(("where", "frames_of_the_program"), [
    ("worker", ((17, "<module>"), (11, "__getitem__"))), ("op", ((18, "<module>"),))])
def test_the_programs_traceback_holds_no_stepscope_frame(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                          where: str, frames_of_the_program: tuple) -> None:
    script = write(tmp_path / "train.py", FAIL_IN_WINDOW)
    code, _, err = run(capfd, "--out", tmp_path / "out", script, where)
    assert code == 1 and "Traceback" in err
    frames = [line.strip() for line in err.splitlines() if line.strip().startswith('File "')]
    assert [f for f in frames if "train.py" in f] == [f'File "{script}", line {n}, in {fn}'
                                                       for n, fn in frames_of_the_program]
    # stepscope's own frames are those in its package folder; the clone's folder name (a checkout named
    # stepscope, its .venv inside) says nothing.
    package = Path(stepscope.__file__).resolve().parent
    files = [Path(f.split('"')[1]).resolve() for f in frames]
    assert not [f for f in files if f.is_relative_to(package)], frames
    assert "runpy" not in err


def test_failure_before_the_window_writes_what_there_is(tmp_path: Path,
                                                       capfd: pytest.CaptureFixture[str]) -> None:
    script = write(tmp_path / "train.py", TRAIN)
    code, out, err = run(capfd, "--out", tmp_path / "out", script, "--fail-at", "1")
    assert code == 1
    assert "needs at least 13" in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["meter.json", "telemetry.json"]
    assert out.strip().splitlines()[-1] == f"stepscope: wrote {tmp_path / 'out'}/: meter.json, telemetry.json"


def test_too_few_steps_says_what_to_change(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    script = write(tmp_path / "train.py", TRAIN)
    code, out, err = run(capfd, "--out", tmp_path / "out", script, "--n", "4")
    assert code == 2 and "program finished" in out
    assert "the program ran 4 steps (optimizer)" in err


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_dataloader_workers(tmp_path: Path, capfd: pytest.CaptureFixture[str], method: str) -> None:
    script = write(tmp_path / "workers.py", f"""
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Numbers(Dataset):  # defined in __main__: spawn workers must find it there
            def __len__(self):
                return 256

            def __getitem__(self, i):
                return torch.full((8,), float(i)), i % 2

        if __name__ == "__main__":
            loader = DataLoader(Numbers(), batch_size=8, num_workers=2, multiprocessing_context="{method}")
            model = torch.nn.Linear(8, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            for x, y in loader:
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
        """)
    code, _, err = run(capfd, "--out", tmp_path / "out", "--skip", "3", "--warmup", "1", "--steps", "3", script)
    assert code == 0, err
    report = from_json((tmp_path / "out" / "report.json").read_bytes())
    assert report.run is not None and report.run.steps_recorded == 3 and report.run.batch_size == 8


def test_inference_steps_from_the_models_forward(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    script = write(tmp_path / "infer.py", """
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
        relu = torch.nn.ReLU()  # a module without parameters, called first: not taken for the model
        with torch.no_grad():
            for _ in range(30):
                model(relu(torch.randn(6, 16))).argmax(1).tolist()
        """)
    code, _, err = run(capfd, "--out", tmp_path / "out", script)
    assert code == 0, err
    run_info = from_json((tmp_path / "out" / "report.json").read_bytes()).run
    assert run_info is not None and run_info.step_source == "forward"
    assert (run_info.batch_size, run_info.batch_size_source) == (6, "model input")
    assert run_info.phase == "inference or evaluation only"  # said plainly: no backward pass was recorded


def test_inference_steps_from_the_dataloader(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    script = write(tmp_path / "infer.py", """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        model = torch.nn.Linear(16, 4).eval()
        with torch.no_grad():
            for epoch in range(2):  # an epoch's end is no extra step
                for (x,) in DataLoader(TensorDataset(torch.randn(80, 16)), batch_size=10):
                    model(x)
        """)
    code, _, err = run(capfd, "--out", tmp_path / "out", "--skip", "6", "--warmup", "1", "--steps", "4", script)
    assert code == 0, err
    report = from_json((tmp_path / "out" / "report.json").read_bytes())
    assert report.run is not None and report.run.step_source == "dataloader"
    assert [s.id for s in report.steps] == ["7", "8", "9", "10"]  # step 7 is the epoch's last batch
    assert all(s.breakdown_us["dataloader"] > 0 for s in report.steps)


def test_explicit_steps_win(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    script = write(tmp_path / "manual.py", """
        import torch
        from stepscope.api import step
        model = torch.nn.Linear(8, 8)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(40):
            for _ in range(3):  # three optimizer steps to one of the program's steps
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
            step()
        """)
    code, _, err = run(capfd, "--out", tmp_path / "out", script)
    assert code == 0, err
    report = from_json((tmp_path / "out" / "report.json").read_bytes())
    assert report.run is not None and report.run.step_source == "manual" and len(report.steps) == 5


def test_with_stack_export_failure_falls_back(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The profiler's UnicodeDecodeError with with_stack=True (simulated): the window is recorded again."""
    from torch.profiler import profile

    real_export = profile.export_chrome_trace

    def export(self, path: str, *args: object, **kwargs: object) -> None:
        if self.with_stack:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
        real_export(self, path, *args, **kwargs)

    monkeypatch.setattr(profile, "export_chrome_trace", export)
    script = write(tmp_path / "train.py", TRAIN)
    code, _, err = run(capfd, "--out", tmp_path / "out", "--with-stack", "--skip", "2", "--warmup", "1",
                       "--steps", "3", script)
    assert code == 0, err
    report = from_json((tmp_path / "out" / "report.json").read_bytes())
    assert any("could not be written (UnicodeDecodeError" in n and "recorded again without" in n
               for n in report.notes)
    # The first window: a timing pass (warm-up 2, records 3-5), step 6 between, and the recorded pass with stacks
    # (warm-up 7, records 8-10), whose export fails at the end of step 10; step 11 runs unprofiled (no profiler
    # starts in the boundary that stopped one) and the window again without stacks starts at the end of it: its
    # timing pass warms up on 12, records 13-15.
    assert [s.id for s in report.steps] == ["13", "14", "15"]


def test_refuses_what_python_would_refuse(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert run(capfd, "--out", tmp_path / "a", tmp_path / "missing.py")[0] == 2
    code, _, err = run(capfd, "--out", tmp_path / "b", "-m", "no_such_module_here")
    assert code == 1 and "No module named no_such_module_here" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    busy = tmp_path / "busy"
    write(busy / "keep.txt", "mine")
    code, _, err = run(capfd, "--out", busy, write(tmp_path / "t.py", TRAIN))
    assert code == 2 and "already exists" in err and (busy / "keep.txt").read_text() == "mine"
    assert run(capfd)[0] == 2


def test_entry_point_exit_code_in_a_child_process(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", TRAIN)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "stepscope", "run", script, "--fail-at", "8", "--how", "exit"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 3, done.stderr
    folders = list((tmp_path / "stepscope-runs").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("train-")
    assert done.stdout.strip().splitlines()[-1].startswith(f"stepscope: wrote stepscope-runs/{folders[0].name}/")
    # torch's own native chatter (USDT profiler_start/stop, collection.cpp warnings) stays out of the terminal
    assert "USDT" not in done.stderr and "collection.cpp" not in done.stderr, done.stderr


def test_out_force_and_double_dash(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """-o/--out, -f/--force (nothing is overwritten unless asked), `--` before the script; everything after
    the script is the script's, `--` and `-o` included."""
    script = write(tmp_path / "echo.py", """
        import sys
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        print("argv", sys.argv[1:])
        model = torch.nn.Linear(8, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for (x,) in DataLoader(TensorDataset(torch.randn(128, 8)), batch_size=4):
            model(x).sum().backward()
            opt.step()
        """)
    out = tmp_path / "out"
    code, stdout, err = run(capfd, "-o", out, "--skip", "1", "--warmup", "0", "--steps", "2", "--", script,
                            "-o", "mine", "--", "-f")
    assert code == 0, err
    assert "argv ['-o', 'mine', '--', '-f']" in stdout
    first = (out / "report.json").read_bytes()
    code, _, err = run(capfd, "-o", out, script)
    assert code == 2 and "already exists" in err and (out / "report.json").read_bytes() == first
    code, _, err = run(capfd, "--out", out, "--force", "--skip", "1", "--warmup", "0", "--steps", "3", script)
    assert code == 0, err
    assert len(from_json((out / "report.json").read_bytes()).steps) == 3
