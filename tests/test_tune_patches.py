"""The fixes applied from outside, in this process: each patch changes what it owns, records what the program
used and where, and `undo()` puts torch back as it was. Also the step clock the trials time steps with."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from stepscope.tune.child import install  # noqa: E402
from stepscope.tune.fixes import CODE_CHANGES, FIXES  # noqa: E402
from stepscope.tune.points import Points  # noqa: E402


def here() -> int:
    return inspect.currentframe().f_back.f_lineno  # type: ignore[union-attr]


@pytest.fixture
def patches():
    made: list[Points] = []

    def make(fixes: dict) -> Points:
        p = install(fixes, Points(lambda: 0))
        made.append(p)
        return p

    yield make
    for p in made:
        p.undo()


def test_every_fix_applied_from_outside_has_one_installer_and_the_rest_need_code() -> None:
    assert all(callable(f.install) for f in FIXES.values())
    assert not set(CODE_CHANGES) & set(FIXES)


def test_dataloader_overrides_are_recorded_at_the_users_line_and_undone(patches) -> None:
    original = DataLoader.__init__
    p = patches({"dataloader_workers": {"num_workers": 3}, "persistent_workers": {}})
    data = TensorDataset(torch.zeros(10, 2))
    line, loader = here(), DataLoader(data, batch_size=5)
    assert (loader.num_workers, loader.persistent_workers, loader.batch_size) == (3, True, 5)
    site = p.settings.loaders[0]
    assert (site.file, site.line, site.num_workers, site.batches) == (__file__, line, 3, 2)
    assert p.applied == {"dataloader_workers": 1, "persistent_workers": 1}
    p.undo()
    assert DataLoader.__init__ is original and DataLoader(data, batch_size=5).num_workers == 0


def test_no_workers_drops_what_a_dataloader_refuses_without_them(patches) -> None:
    p = patches({"dataloader_workers": {"num_workers": 0}})
    loader = DataLoader(TensorDataset(torch.zeros(10, 2)), batch_size=5, num_workers=2, persistent_workers=True,
                        prefetch_factor=4, multiprocessing_context="fork")  # each raises with num_workers=0
    assert (loader.num_workers, loader.persistent_workers, len(list(loader))) == (0, False, 2)
    assert p.applied == {"dataloader_workers": 1}


def test_a_bigger_batch_multiplies_the_batch_the_program_asked_for(patches) -> None:
    patches({"larger_batch": {"factor": 2}})
    assert DataLoader(TensorDataset(torch.zeros(10, 2)), 4).batch_size == 8  # positional, as some scripts write it


def test_pin_memory_is_left_alone_without_cuda(patches) -> None:
    p = patches({"pin_memory": {}})
    assert not DataLoader(TensorDataset(torch.zeros(4, 2))).pin_memory and not p.applied


def test_zero_grad_set_to_none_forced_and_the_callers_value_recorded(patches) -> None:
    p = patches({"set_to_none": {}})
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    line = here() + 1
    opt.zero_grad(set_to_none=False)
    assert all(q.grad is None for q in model.parameters())
    assert [(s.line, s.value) for s in p.settings.zero_grad] == [(line, False)]
    assert p.applied["set_to_none"] == 1


def test_foreach_optimizer_and_what_the_program_built(patches) -> None:
    p = patches({"fused_optimizer": {"mode": "foreach"}})
    params = (q for q in nn.Linear(2, 1).parameters())  # a generator, as model.parameters() is
    opt = torch.optim.AdamW(params, lr=0.1)
    assert opt.defaults["foreach"] is True and len(opt.param_groups[0]["params"]) == 2
    site = p.settings.optimizers[0]
    assert (site.cls, site.foreach, site.supports_fused) == ("AdamW", True, True)
    plain = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1, foreach=False)  # the user's choice stands
    assert plain.defaults["foreach"] is False and p.applied["fused_optimizer"] == 1


class Probe(nn.Module):
    """A conv net that notes whether its forward ran under autocast."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.seen: list[bool] = []

    def forward(self, x):
        self.seen.append(torch.is_autocast_enabled("cpu"))
        return self.conv(x).mean((2, 3))


def test_model_found_at_its_first_forward_then_channels_last_and_autocast(patches) -> None:
    p = patches({"channels_last": {}, "amp": {"dtype": "bfloat16"}})
    model = Probe()
    x = torch.randn(2, 3, 8, 8)
    line, first = here(), model(x)
    second = model(x)
    info = p.settings.model
    assert info is not None and (info.cls, info.conv, info.dtype, info.compiled, info.autocast) == (
        "Probe", True, "float32", False, False)
    assert p.settings.model_site is not None and p.settings.model_site.line == line
    # The first call had resolved its forward before the model was found; from the second on, autocast.
    assert model.seen == [False, True]
    assert first.dtype == torch.float32 and second.dtype == torch.float32  # half outputs come back as float32
    assert model.conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert p.applied == {"channels_last": 1, "amp": 1}
    p.undo()
    assert "forward" not in vars(model) and model.conv.weight.is_contiguous()


def test_loss_per_step_from_backward() -> None:
    step = [0]
    p = install({}, Points(lambda: step[0]))
    try:
        w = torch.ones(2, requires_grad=True)
        for i in range(3):
            step[0] = i
            (w.sum() * (i + 1)).backward()
            (w.sum() * 10).backward()  # a second backward in the same step is not the step's loss
        step[0] = 4
        (w * 2).backward(torch.ones(2))  # not a scalar: not a loss
    finally:
        p.undo()
    assert p.losses.values() == [2.0, 4.0, 6.0]


def test_float16_autocast_scales_the_loss_and_skips_a_step_that_overflowed() -> None:
    # Run in a fresh process, as every tune trial is: after some earlier tests in the same process the first
    # float16 step overflows even on these hand-set values (the cause is not pinned down; leftover global
    # optimizer hooks were removed and were not it).
    if os.environ.get("STEPSCOPE_TEST_ISOLATED") != "1":
        name = "test_float16_autocast_scales_the_loss_and_skips_a_step_that_overflowed"
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"{__file__}::{name}"],
                              env={**os.environ, "STEPSCOPE_TEST_ISOLATED": "1"}, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stdout[-3000:]
        return
    # Set by hand, not drawn: outputs of at most 0.2, so the scaled float16 gradients (65,536 x 2 x out / 8,
    # summed over 8 samples for the bias: at most ~26,000) stay well inside float16's 65,504.
    weight = torch.tensor([[0.1, -0.2, 0.3, -0.4]])
    x = torch.tensor([[0.1 * ((i + j) % 5 - 2) for j in range(4)] for i in range(8)])

    def fresh() -> nn.Linear:
        model = nn.Linear(4, 1)
        with torch.no_grad():
            model.weight.copy_(weight)
            model.bias.fill_(0.05)
        return model

    def train(fixes: dict, poison: bool = False) -> tuple[torch.Tensor, Points]:
        p = install(fixes, Points(lambda: 0))
        try:
            model = fresh()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model(x)  # the first forward finds the model
            loss = model(x).float().pow(2).mean()
            if poison:
                loss = loss * float("inf")
            opt.zero_grad()
            loss.backward()
            opt.step()
            return model.weight.detach().clone(), p
        finally:
            p.undo()

    before = fresh().weight.detach().clone()
    scaled, p = train({"amp": {"dtype": "float16"}})
    plain, _ = train({})
    assert p.losses.scaler is not None and p.losses.scaler.get_scale() == 65536.0
    # Gradients were unscaled before the step: the update is the float32 one within float16 rounding.
    assert torch.allclose(scaled, plain, rtol=1e-2, atol=1e-3) and not torch.equal(scaled, before)
    skipped, p = train({"amp": {"dtype": "float16"}}, poison=True)
    assert torch.equal(skipped, before) and p.losses.scaler.get_scale() == 32768.0


def test_backend_flags_set_and_restored(patches) -> None:
    before = torch.backends.cuda.matmul.allow_tf32
    p = patches({"tf32": {}})
    assert torch.backends.cuda.matmul.allow_tf32 is True and p.applied["tf32"] >= (0 if before else 1)
    p.undo()
    assert torch.backends.cuda.matmul.allow_tf32 == before


def test_non_blocking_leaves_pageable_copies_alone_and_is_undone(patches) -> None:
    original = torch.Tensor.to
    p = patches({"non_blocking_copy": {}})
    assert torch.ones(2).to("cpu", torch.float64).dtype == torch.float64 and not p.applied
    p.undo()
    assert torch.Tensor.to is original


def test_torch_compile_is_set_on_the_model_found_and_undone(patches) -> None:
    model = nn.Linear(4, 2)
    p = patches({"torch_compile": {"mode": "default"}})
    model(torch.randn(3, 4))  # the first forward finds the model and compiles it from then on
    assert p.applied["torch_compile"] == 1 and model._compiled_call_impl is not None
    p.undo()
    assert model._compiled_call_impl is None
