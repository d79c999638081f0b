"""`stepscope run` under a launcher: a real 2-rank DDP job (gloo, CPU) under torchrun, one rank slowed, with the
default options. The job must not be broken (every rank's program runs to its end), and the ranks must record the
same steps, chosen without any collective of stepscope's own."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

from stepscope.capture.launcher import launched  # noqa: E402
from stepscope.capture.options import skipping  # noqa: E402
from stepscope.capture.runfolder import rank_folder  # noqa: E402
from stepscope.commands.run_job import job_report  # noqa: E402
from stepscope.errors import StepscopeError  # noqa: E402
from stepscope.pipeline import analyze  # noqa: E402
from stepscope.ranks.engines import InProcess  # noqa: E402

SLOW_RANK = 1  # not rank 0: a report that named rank 0 by default would not pass
STEPS = 48  # skip 10, two passes of 2 + 5 with a step between, 1 + 5 reference steps: 31; the rest runs on

# The job: a 3-layer MLP under DDP; the slowed rank's collate sleeps 30 ms per batch. Each rank writes
# done-rank<N> after the program's last collective (a barrier): the program ran to its end.
TRAIN = f"""
import os, sys, time
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset, default_collate

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = TensorDataset(torch.randn(32 * {STEPS}, 64), torch.randint(0, 10, (32 * {STEPS},)))

def collate(items):
    if rank == {SLOW_RANK}:
        time.sleep(0.03)
    return default_collate(items)

for x, y in DataLoader(data, batch_size=32, collate_fn=collate):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.barrier()
open(f"done-rank{{rank}}", "w").close()
dist.destroy_process_group()
"""


def profiler_steps(trace: Path) -> list[int]:
    """The ProfilerStep#N numbers in the raw trace file."""
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    return sorted({int(e["name"].split("#")[1]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")})


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One torchrun job of two ranks, each under `stepscope run` with the default options, in a fresh folder."""
    cwd = tmp_path_factory.mktemp("torchrun")
    (cwd / "train.py").write_text(textwrap.dedent(TRAIN))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path), COLUMNS="100")
    # --no-python: the launcher runs `python -m stepscope run train.py` for each rank, as `torchrun --no-python
    # stepscope run train.py` does with the console script.
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--no-python",
               sys.executable, "-m", "stepscope", "run", "train.py"]
    # A session of its own, so that a job that hangs is ended whole (the launcher and both ranks), not left behind.
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"the job did not end in 240 s:\n{err[-3000:]}")
    return subprocess.CompletedProcess(command, proc.returncode, out, err), cwd


def test_the_job_is_not_broken(job: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, cwd = job
    assert done.returncode == 0, done.stderr[-3000:]
    # Both programs ran past their last collective: no rank was stopped after its window.
    assert (cwd / "done-rank0").exists() and (cwd / "done-rank1").exists()
    firsts = [line for line in done.stderr.splitlines() if "running train.py" in line]
    assert len(firsts) == 2
    for rank in (0, 1):
        line = next(line for line in firsts if f"rank {rank} of 2" in line)
        assert "run on to its end" in line and "skip 10 (exactly" in line


def test_every_rank_records_the_same_steps_in_one_job_folder(
        job: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    cwd = job[1]
    jobs = list((cwd / "stepscope-runs").iterdir())
    assert len(jobs) == 1 and jobs[0].name.startswith("train-"), jobs
    folders = sorted(p.name for p in jobs[0].iterdir() if p.is_dir())
    assert folders == ["rank0", "rank1"]
    steps = [profiler_steps(jobs[0] / f"rank{rank}" / "trace.json.gz") for rank in (0, 1)]
    timing = [profiler_steps(jobs[0] / f"rank{rank}" / "timing.json.gz") for rank in (0, 1)]
    assert steps[0] == steps[1] and timing[0] == timing[1]
    # skip 10 exactly, then the timing pass (2 warm-up + 5 steps), a step between, the recorded pass's 2 warm-up
    assert len(steps[0]) == 5 and steps[0][0] == timing[0][-1] + 4


def test_rank_0_prints_the_report_across_the_ranks(job: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    done, cwd = job
    job_folder = next((cwd / "stepscope-runs").iterdir())
    # Printed once, by rank 0, after both ranks' folders were there: the slowed rank and its cause.
    assert done.stdout.count("The job: 2 of 2 ranks in") == 1, done.stdout[-3000:]
    across = done.stdout[done.stdout.index("The job: 2 of 2 ranks"):]
    assert f"Straggler: rank {SLOW_RANK} arrived last" in across
    assert "its DataLoader wait took" in across  # the collate's sleep runs inside the DataLoader's next()
    assert (job_folder / "report.txt").is_file() and (job_folder / "report.html").is_file()
    assert not (job_folder / "report.json").exists()  # a .json there would pass for a rank's trace


def test_the_job_folder_analysed_gives_each_rank_its_own_folders_figures(
        job: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """`stepscope analyze JOB`: the ranks found in the job folder, and each diagnosed rank's step time and fixes the
    ones its own run folder gives (its step meter's, not the trace's alone)."""
    job_folder = next((job[1] / "stepscope-runs").iterdir())
    with InProcess() as engine:
        report = analyze(job_folder, engine=engine)
    assert report.cross_rank is not None and report.cross_rank.ranks == 2
    assert report.cross_rank.straggler is not None and report.cross_rank.straggler.rank == SLOW_RANK
    for diagnosis in report.cross_rank.diagnoses:
        own = json.loads((job_folder / f"rank{diagnosis.rank}" / "report.json").read_text())
        assert own["meter"] is not None  # the rank's folder measured its steps unprofiled
        assert diagnosis.step_time_us == pytest.approx(own["summary"]["step_time_us"])
        assert [(r.id, r.estimated_speedup) for r in diagnosis.recommendations] == \
            [(r["id"], r["estimated_speedup"]) for r in own["recommendations"]]


def test_the_launcher_is_read_from_the_environment() -> None:
    torchrun = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "my-job",
                "TORCHELASTIC_RESTART_COUNT": "0"}
    launch = launched(torchrun)
    assert launch is not None and (launch.rank, launch.world_size, launch.job) == (1, 2, "my-job")
    assert launched({**torchrun, "TORCHELASTIC_RESTART_COUNT": "2"}).job == "my-job-restart2"  # type: ignore[union-attr]
    assert launched({"RANK": "0", "WORLD_SIZE": "1"}) is None  # one rank: a plain run
    assert launched({}) is None
    # torchrun on one node makes up a uuid as the run id: the job is named after the launcher's start instead
    uuid = {**torchrun, "TORCHELASTIC_RUN_ID": "678b18c2-864b-4b68-90ce-7f2c23b54429"}
    assert "678b18c2" not in launched(uuid).job  # type: ignore[union-attr]


def test_the_default_skip_is_exact_under_a_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert skipping(None)["settle"] is True
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert skipping(None) == {"skip": 10, "settle": False}
    assert skipping(3) == {"skip": 3, "settle": False}


def test_rank_0_waits_a_bounded_time_for_the_other_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A rank that never writes its folder (it failed, or writes on another node's disk) costs rank 0 the wait's bound,
    then one line saying how to get the report later; never a hang."""
    rank0 = tmp_path / "job" / "rank0"
    rank0.mkdir(parents=True)
    (rank0 / "trace.json.gz").write_bytes(b"")
    (rank0 / "report.json").write_text("{}")
    started = time.monotonic()
    job_report(tmp_path / "job", 2, None, wait_s=0.6)
    assert 0.6 <= time.monotonic() - started < 5
    err = capsys.readouterr().err
    assert "waiting up to 0.6 s" in err
    assert f"no report across the ranks: rank1 wrote no report in {tmp_path / 'job'} within 0.6 s" in err
    assert f"stepscope analyze {tmp_path / 'job'}" in err


def test_each_rank_writes_its_folder_in_the_job_folder(tmp_path: Path) -> None:
    expected = tmp_path / "my-train-20261207-120000" / "rank3"
    assert rank_folder("my train", "20261207-120000", 3, base=tmp_path) == expected
    assert rank_folder("train", "j", 1, tmp_path / "out") == tmp_path / "out" / "rank1"  # --out names the job folder
    (tmp_path / "file").write_text("")
    with pytest.raises(StepscopeError, match="is a file"):
        rank_folder("train", "j", 0, tmp_path / "file")
