"""No crash of stepscope's making in DataLoader workers: under every fix's patch, a dataset whose transform calls
`.to(...)`, `.float()` and `torch.as_tensor` in forked workers loads its batches, and nothing of ours touches
CUDA there (a forked process that does fails with "CUDA error: initialization error", which is what the
`non_blocking_copy` patch did by asking `is_pinned()` in a worker). A failure in stepscope's own patch code is
reported as stepscope's, naming the fix, also when it happens in a worker."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset, get_worker_info  # noqa: E402

from stepscope.tune.child import install, run_trial  # noqa: E402
from stepscope.tune.fixes import FIXES  # noqa: E402
from stepscope.tune.points import Points  # noqa: E402
from stepscope.tune.points.copy import CopyPatch  # noqa: E402
from stepscope.tune.points.failure import PatchFailure, failures_since, owned_by  # noqa: E402
from stepscope.tune.trial import _classify  # noqa: E402
from stepscope.tune.wire import TrialSpec  # noqa: E402

# The settings each fix is tried with; a new fix must add its own (and so be tried here).
PARAMS = {"dataloader_workers": {"num_workers": 2}, "larger_batch": {"factor": 2}, "amp": {"dtype": "bfloat16"},
          "cpu_threads": {"threads": 2},
          "fused_optimizer": {"mode": "foreach"}, "cuda_graphs": {"mode": "reduce-overhead"}}
CUDA_ENTRY_POINTS = [(torch.Tensor, "is_pinned"), (torch.Tensor, "pin_memory"), (torch.cuda, "is_available"),
                     (torch.cuda, "init"), (torch.cuda, "_lazy_init"), (torch.cuda, "current_device"),
                     (torch.cuda, "device_count"), (torch.cuda, "synchronize")]
INIT_ERROR = "CUDA error: initialization error"


@pytest.fixture
def cuda_forbidden_in_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a CUDA machine does to a forked worker that touches CUDA, on this CPU machine: each entry into CUDA
    raises in a DataLoader worker (installed before the patches, so their calls reach it)."""
    for owner, name in CUDA_ENTRY_POINTS:
        original = getattr(owner, name)

        def guarded(*args, _original=original, _name=name, **kwargs):
            if get_worker_info() is not None:
                raise RuntimeError(f"{INIT_ERROR} ({_name} in a forked DataLoader worker)")
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, name, guarded)


class Images(Dataset):
    """A transform as scripts write them, run in the workers: `.to(...)`, `.float()`, `torch.as_tensor`."""

    def __init__(self, probe: str = "") -> None:
        self.probe = probe

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int):
        pixels = np.full((3, 4, 4), i, dtype=np.uint8)
        x = torch.as_tensor(pixels).to(torch.float32).div(255)
        x = x.to("cpu").float()
        if self.probe == "is_pinned":
            x.is_pinned()
        return x, torch.as_tensor(i % 2)


def load_and_train(dataset: Dataset) -> list[int]:
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    loader = DataLoader(dataset, batch_size=4, num_workers=2, multiprocessing_context="fork")
    for i, (x, y) in enumerate(loader):
        seen += y.tolist()
        if i == 0:  # one step: the model is found at its first forward (a compile would only come at the second)
            loss = torch.nn.functional.cross_entropy(model(x.to("cpu")), y)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
    return seen


def test_the_probe_catches_cuda_touched_in_a_worker(cuda_forbidden_in_workers) -> None:
    """The instrument works: what the old non_blocking_copy patch did in a worker fails as on a CUDA machine."""
    with pytest.raises(RuntimeError, match=INIT_ERROR):
        load_and_train(Images(probe="is_pinned"))


@pytest.mark.parametrize("fixes", [[f] for f in FIXES] + [list(FIXES)], ids=[*FIXES, "all"])
def test_every_patch_leaves_the_workers_alone(fixes: list[str], cuda_forbidden_in_workers) -> None:
    assert set(PARAMS) <= set(FIXES)
    before = len(PatchFailure.recorded)
    points = install({f: PARAMS.get(f, {}) for f in fixes}, Points(lambda: 0))
    try:
        seen = load_and_train(Images())
    finally:
        points.undo()
    factor = PARAMS["larger_batch"]["factor"] if "larger_batch" in fixes else 1
    assert sorted(seen) == sorted(i % 2 for i in range(16)) and len(seen) == 16  # every sample, once
    assert points.settings.loaders[0].batch_size == 4 * factor
    assert failures_since(before) == []


def test_a_failure_in_our_code_in_a_worker_is_reported_as_ours_naming_the_fix() -> None:
    class Broken(Images):
        def __getitem__(self, i: int):
            with owned_by("uint8_transfer"):
                raise ValueError("boom")

    before = len(PatchFailure.recorded)
    with pytest.raises(PatchFailure):
        list(DataLoader(Broken(), batch_size=4, num_workers=1, multiprocessing_context="fork"))
    # Re-raised in this process from the worker's message: recorded here, with the fix and where it failed.
    assert failures_since(before)[0] == (
        "uint8_transfer", "stepscope tune's patch for uint8_transfer failed in a DataLoader worker: ValueError: boom")


def test_a_trial_whose_patch_fails_leaves_the_fix_untried_and_does_not_blame_the_program(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch
        try:  # a program that swallows errors does not hide ours
            torch.ones(2).to("cpu")
        except Exception:
            pass
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(8):
            model(torch.ones(1, 2)).sum().backward()
            opt.step()
    """))

    def bug(*args: object) -> bool:
        raise KeyError("a bug in stepscope")

    monkeypatch.setattr(CopyPatch, "_make_non_blocking", staticmethod(bug))
    result = run_trial(TrialSpec(target=str(script), args=[], fixes={"non_blocking_copy": {}}, warmup=2, steps=3,
                                 min_seconds=0.0))
    assert result.status == "patch failed" and result.failed_fix == "non_blocking_copy"
    assert result.detail == "stepscope tune's patch for non_blocking_copy failed: KeyError: 'a bug in stepscope'"
    run = _classify(result, 1, 1.0, tmp_path / "x.log", 60.0)
    assert run.status == "stepscope failed" and "not the program's" in run.problem and "left untried" in run.problem
