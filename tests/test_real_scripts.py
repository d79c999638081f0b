"""`stepscope run` on small scripts shaped like the public training scripts where it misled (issue: right on
real training scripts): an evaluation pass before training, gradient accumulation, a closure optimizer,
workers already on, a storage-bound loader whose profiled compute is inflated. Each runs on the CPU, in this
process."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from stepscope.cli import main as cli_main  # noqa: E402
from stepscope.model.report import Report, from_json  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run(tmp_path: Path, source: str, *options: str, capfd: pytest.CaptureFixture[str] | None = None) -> Report:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / "run"
    assert cli_main(["run", "-o", str(out), *options, "--", str(script)]) == 0
    return from_json((out / "report.json").read_bytes())


EVAL_THEN_TRAIN = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(80 * 16, 32), torch.randint(0, 4, (80 * 16,)))

    @torch.no_grad()
    def evaluate():  # an evaluation pass at iteration 0, as nanoGPT's train.py does before it trains
        model.eval()
        for _ in range(20):  # more than the two passes' 1 + 5 steps each, after --skip 2
            model(torch.randn(16, 32))
        model.train()

    evaluate()
    for x, y in DataLoader(data, batch_size=16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("trained to the end")
"""


def test_an_evaluation_pass_before_training_is_not_the_window(tmp_path: Path,
                                                                capfd: pytest.CaptureFixture[str]) -> None:
    report = run(tmp_path, EVAL_THEN_TRAIN)
    assert report.run is not None and report.run.step_source == "optimizer" and report.run.phase == "training"
    assert report.run.steps_recorded == 5
    assert any("earlier window recorded" in n and "forward" in n for n in report.notes)
    assert "trained to the end" not in capfd.readouterr().out  # stopped once the training window was recorded


def test_forward_steps_chosen_are_kept_and_said_to_be_evaluation(tmp_path: Path,
                                                                  capfd: pytest.CaptureFixture[str]) -> None:
    report = run(tmp_path, EVAL_THEN_TRAIN, "--step-on", "forward", "--skip", "2", "--reference-steps", "0")
    assert report.run is not None and report.run.step_source == "forward" and report.run.step_on == "forward"
    assert report.run.first_recorded_step == 4  # --skip counts the chosen steps: forward calls 2, 3 warm up
    assert report.run.phase == "inference or evaluation only"  # all five under no_grad, no backward pass
    out = capfd.readouterr().out
    assert "phase: inference or evaluation only" in out and "trained to the end" not in out


ACCUMULATION = """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for it in range(40):
        for micro in range(8):  # gradient accumulation: 8 micro-batches of 8 samples per optimizer step
            x, y = torch.randn(8, 32), torch.randint(0, 4, (8,))
            loss = torch.nn.functional.cross_entropy(model(x), y) / 8
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
"""


def test_gradient_accumulation_steps_are_optimizer_steps(tmp_path: Path) -> None:
    report = run(tmp_path, ACCUMULATION)
    assert report.run is not None and report.run.step_source == "optimizer"
    assert report.run.grad_accumulation == 8 and report.run.batch_size == 8 and report.run.samples_per_step == 64
    assert report.summary.samples_per_s == pytest.approx(64 * report.summary.steps_per_s, rel=1e-3)
    assert all(s.breakdown_us["cpu_exec"] > 0 for s in report.steps)
    # The first window's steps were backward passes: its line mode was stopped inside `loss.backward()`, while
    # torch had it off the stack; it comes off afterwards all the same (an in-process run leaves no mode behind).
    assert torch._C._len_torch_function_stack() == 0


CLOSURE = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = DataLoader(TensorDataset(torch.randn(640, 32), torch.randint(0, 4, (640,))), batch_size=16)
    for x, y in data:
        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            return loss
        opt.step(closure)
"""


def test_a_closure_optimizer_keeps_lines_and_modules(tmp_path: Path) -> None:
    report = run(tmp_path, CLOSURE)
    assert report.lines is not None and report.modules is not None
    loss = next(r for r in report.lines.rows if r.line == 11)
    assert loss.cpu_fwd_us > 0 and loss.cpu_bwd_us > 0  # forward and backward of the closure's line
    step = next(r for r in report.lines.rows if r.line == 14)
    assert step.cpu_bwd_us == 0  # the backward is the closure's line's, not collapsed onto opt.step(closure)
    modules = {m.path: m for m in report.modules.rows}
    assert modules["model.0"].cpu_fwd_us > 0 and modules["model.0"].cpu_bwd_us > 0
    text = (tmp_path / "run" / "report.txt").read_text()
    assert "Time by source line" in text  # and no GPU tables or columns on a CPU run:
    assert not any(gpu in text for gpu in ("wait for the GPU", "gpu fwd", "GPU util", "syncs by line"))


WORKERS = """
    import time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 8 * 400  # one epoch is far longer than the window
        def __getitem__(self, i):
            time.sleep(0.004)  # storage latency: a batch of 8 takes ~32 ms in a worker
            return torch.randn(32), i % 4

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Slow(), batch_size=8, num_workers=4)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_workers_already_on_get_no_advice_for_what_is_set(tmp_path: Path) -> None:
    # Four workers finish their batches together: one long wait, then three batches ready. No epoch begins in
    # the window, so the workers never restart: persistent_workers would buy nothing.
    report = run(tmp_path, WORKERS)
    settings = report.run.settings if report.run else None
    assert settings is not None and settings.dataloader is not None
    assert settings.dataloader.num_workers == 4 and settings.dataloader.iterators_started == 0
    assert settings.dataloader.location is not None and "DataLoader(" in settings.dataloader.location.code
    assert "persistent_workers" not in {r.id for r in report.recommendations}
    for rec in report.recommendations:
        if rec.id == "dataloader_workers":
            # The step meter saw the loop wait, and the workers' side shows them waiting on storage (a sleep), not
            # computing: more of them help without a free core. Bounded by the workers' ratio all the same.
            w = report.meter.workers if report.meter is not None else None
            assert rec.evidence["measured_by"] == "step meter" and w is not None
            assert w.batch_cpu_us is not None and w.batch_cpu_us < 0.5 * w.batch_us
            assert rec.estimated_speedup <= rec.evidence["suggested_workers"] / 4 + 1e-9
            assert rec.location == settings.dataloader.location


STORAGE = """
    import time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Storage(Dataset):
        def __len__(self):
            return 16 * 60
        def __getitem__(self, i):
            time.sleep(0.001)  # reading a sample from slow storage: 16 ms or more per batch of 16
            return torch.randn(16), i % 4

    layers = [m for _ in range(48) for m in (torch.nn.Linear(16, 16), torch.nn.ReLU())]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(16, 4))  # many tiny ops, inflated by the profiler
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(Storage(), batch_size=16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_a_storage_bound_loader_stays_input_bound_under_the_profiler(tmp_path: Path) -> None:
    # Unprofiled, each step waits for storage about as long as it computes or longer. Under the profiler and
    # the line ranges the tiny ops cost several times more (the waits do not), so as recorded the compute
    # looked like the cost (python_overhead 40% over input_bound 37% in one run of an earlier main). The replay
    # takes the profiler's cost out of the timing pass's steps and checks itself against the unprofiled steps.
    report = run(tmp_path, STORAGE)
    assert report.run is not None and report.run.reference is not None and report.replay is not None
    assert report.patterns[0].id == "input_bound"
    if report.replay.replayed:
        # The replayed step is the one the verdict reads; the replay is the one correction, so the run section's
        # overhead correction is the replay's figures, not a second cut.
        c = report.run.overhead_correction
        assert c is not None and c.applied and c.removed_us_per_step == report.replay.removed_us_per_step
        assert any(n.startswith("replay: ") and "measured unprofiled" in n for n in report.notes)
        # 16 samples of at least 1 ms of sleep per batch: the wait is at least 16 ms of each replayed step.
        assert report.patterns[0].share >= 16_000 / report.replay.replayed_step_us - 0.02


TRAINER_LIBRARY = """
    import torch

    def train(steps):
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(steps):
            x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
"""


def test_one_line_that_runs_everything_is_opened_up(tmp_path: Path) -> None:
    # A trainer from an installed library (`trainer.train()`): every torch call comes from that one line of
    # the user's script, so its lines below, in the library, are shown instead.
    library = tmp_path / "site-packages"
    library.mkdir()
    (library / "mytrainer.py").write_text(textwrap.dedent(TRAINER_LIBRARY))
    report = run(tmp_path, f"""
        import sys
        sys.path.insert(0, {str(library)!r})
        import mytrainer
        mytrainer.train(60)
    """)
    assert report.lines is not None
    labels = [r.label for r in report.lines.rows]
    assert any(label.startswith("mytrainer.py:") for label in labels), labels
    assert not any(label.endswith("train.py:5") for label in labels)
    assert any("made" in n and "lines below it" in n for n in report.notes)
