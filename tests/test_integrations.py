"""The trainer callbacks, each in a real run of its library's trainer on the CPU for a few steps."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset, TensorDataset  # noqa: E402


@pytest.fixture(autouse=True)
def quiet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # a callback without out= writes stepscope-runs/ in the working folder
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing to download: the model is built here


def test_lightning_callback(tmp_path: Path) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from stepscope.integrations.lightning import StepscopeCallback

    class Classifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = TensorDataset(torch.randn(12 * 8, 16), torch.randint(0, 2, (12 * 8,)))
    callback = StepscopeCallback(skip=2, warmup=1, steps=3, out=tmp_path / "stepscope", print_report=False)
    trainer = pl.Trainer(max_steps=12, accelerator="cpu", devices=1, callbacks=[callback], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path)
    trainer.fit(Classifier(), DataLoader(data, batch_size=8))
    report = callback.report
    assert report is not None and [s.id for s in report.steps] == ["3", "4", "5"]
    assert report.run is not None and report.run.step_source == "lightning"
    assert (report.run.batch_size, report.run.batch_size_source) == (8, "trainer")
    assert report.summary.samples_per_s == pytest.approx(8 * report.summary.steps_per_s, rel=1e-3)
    # The batch is fetched inside the step (between two on_train_batch_end calls).
    assert report.summary.breakdown_us["dataloader"] > 0
    assert sorted(p.name for p in (tmp_path / "stepscope").iterdir()) == [
        "calibration.json", "census.json", "meter.json", "report.html", "report.json", "report.txt",
        "telemetry.json", "timing.json.gz", "trace.json.gz"]
    # Lightning runs forward and backward in a closure inside optimizer.step(): the training_step's line and
    # the model's modules still carry their time, forward and backward, as in a plain loop.
    assert report.lines is not None and report.modules is not None
    step_line = next(r for r in report.lines.rows if "cross_entropy(self.net(x), y)" in r.code)
    assert step_line.cpu_fwd_us > 0 and step_line.cpu_bwd_us > 0
    net = next(m for m in report.modules.rows if m.path.endswith("net"))
    assert net.cpu_fwd_us > 0 and net.cpu_bwd_us > 0


def test_lightning_callback_can_stop_training(tmp_path: Path) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from stepscope.integrations.lightning import StepscopeCallback

    class Regressor(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    callback = StepscopeCallback(skip=1, warmup=1, steps=2, stop=True, print_report=False)
    trainer = pl.Trainer(max_steps=1000, accelerator="cpu", devices=1, callbacks=[callback], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path)
    trainer.fit(Regressor(), DataLoader(TensorDataset(torch.randn(4000, 4)), batch_size=4))
    # Skip 1, the timing pass (1 + 2), the recorded pass (1 + 2), a settling step and 5 reference steps: 13 of 1000.
    assert trainer.global_step <= 14
    assert callback.report is not None and len(callback.report.steps) == 2
    # The framework's fixes go on this test's own Trainer( (line 78), not the file's first one (line 39).
    settings = callback.report.run.settings if callback.report.run is not None else None
    fw = settings.framework if settings is not None else None
    assert fw is not None and fw.name == "lightning" and fw.config is not None and fw.call is not None
    assert (fw.config.line, fw.call.line) == (78, 81)


class Pairs(Dataset):
    def __init__(self, n: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 16, generator=g), torch.randint(0, 2, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.y[i]}


class TinyModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = self.net(x)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out


def test_huggingface_callback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from stepscope.integrations.huggingface import StepscopeCallback

    callback = StepscopeCallback(skip=2, warmup=1, steps=3)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=12, per_device_train_batch_size=4, gradient_accumulation_steps=2,
        learning_rate=1e-3, report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
        use_cpu=True, dataloader_num_workers=0,
    )
    trainer = transformers.Trainer(model=TinyModel(), args=args, train_dataset=Pairs(12 * 8),
                                   callbacks=[callback])
    trainer.train()
    report = callback.report
    assert report is not None and [s.id for s in report.steps] == ["3", "4", "5"]
    assert report.run is not None and report.run.step_source == "huggingface"
    assert (report.run.batch_size, report.run.batch_size_source) == (8, "trainer")  # 4 per device x 2 accumulated
    fw = report.run.settings.framework if report.run.settings is not None else None  # fixes go on TrainingArguments(
    assert fw is not None and fw.name == "huggingface" and fw.config is not None and fw.call is not None
    assert (fw.config.line, fw.config.function, fw.call.line) == (123, "test_huggingface_callback", 130)
    assert report.summary.breakdown_us["dataloader"] > 0  # the fetch happens before on_step_begin: inside the step
    out = capsys.readouterr().out
    assert "Step-time breakdown" in out  # printed at the end of training
    # No out=: a run folder as `stepscope run` writes it, kept after training, and the printed report says so.
    (folder,) = (tmp_path / "stepscope-runs").iterdir()
    assert {p.name for p in folder.iterdir()} >= {"trace.json.gz", "report.json", "report.txt", "report.html"}
    assert f"stepscope: wrote {Path('stepscope-runs') / folder.name}/" in out
