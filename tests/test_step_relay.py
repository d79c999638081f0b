"""The step detection hears of steps from the instrumentation layer, the step meter's hooks (one layer of hooks, not
two): optimizer steps and backward passes on the training thread and on any other, the main DataLoader's fetches and
batches, the model's calls; none once dropped; with no meter running, through a meter of its own."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

from stepscope.capture.hooks import StepHooks
from stepscope.capture.meter import StepMeter

pytestmark = pytest.mark.usefixtures("hook_set")  # each test with the C hooks and with the Python ones


class Marks:
    """Stands in for the capture session: the marks the step detection reports."""

    def __init__(self, batch_size_source: str | None = "user") -> None:
        self.marks: list[str] = []
        self.batch_size_source = batch_size_source
        self.batch_sizes: list[tuple[int | None, str]] = []

    def mark(self, source: str) -> None:
        self.marks.append(source)

    def set_batch_size(self, size: int | None, source: str) -> None:
        self.batch_sizes.append((size, source))
        if size and source == "dataloader":
            self.batch_size_source = source


def train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        opt.step()


@pytest.fixture
def relayed():  # type: ignore[no-untyped-def]
    pre, post = len(_global_optimizer_pre_hooks), len(_global_optimizer_post_hooks)
    session, meter = Marks(), StepMeter(None, live=False, syncs=False).install()
    hooks = StepHooks(session)
    hooks.install(meter)
    try:
        yield session, meter, hooks, (pre, post)
    finally:
        hooks.remove()
        meter.remove()


def test_the_meters_hooks_relay_every_optimizer_step_and_backward_pass(relayed) -> None:  # type: ignore[no-untyped-def]
    session, meter, hooks, (pre, post) = relayed
    # One layer: the meter's two optimizer hooks, none of the step detection's own.
    assert len(_global_optimizer_pre_hooks) == pre + 1 and len(_global_optimizer_post_hooks) == post + 1
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, opt, 5)
    assert session.marks.count("optimizer") == 5 and session.marks.count("backward") == 5
    assert session.marks[-2:] == ["backward", "optimizer"]
    assert hooks.pinned_optimizer() is opt
    assert meter.record("optimizer").steps.wall_ns  # and the meter measured them


def test_a_backward_pass_that_raises_is_no_step(relayed) -> None:  # type: ignore[no-untyped-def]
    session, *_ = relayed
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError):
        (x * 2).backward()  # not a scalar: torch raises
    assert session.marks == []


def test_a_loop_on_another_thread_is_still_found(relayed) -> None:  # type: ignore[no-untyped-def]
    session, meter, *_ = relayed
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    worker = threading.Thread(target=train, args=(model, opt, 3))
    worker.start()
    worker.join()
    assert session.marks.count("optimizer") == 3 and session.marks.count("backward") == 3
    assert meter.record().steps.wall_ns == []  # the meter measures its own thread only


def test_no_optimizer_step_is_relayed_once_a_marker_leads_nor_anything_once_removed(  # type: ignore[no-untyped-def]
        relayed) -> None:
    session, meter, hooks, _ = relayed
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hooks.drop_weaker_than("manual")  # stepscope.step() leads: optimizer steps are no longer steps
    train(model, opt, 2)
    assert session.marks == ["backward", "backward"]
    hooks.remove()
    train(model, opt, 2)
    assert session.marks == ["backward", "backward"]
    assert meter.record("optimizer").steps.wall_ns  # the meter still measures, for itself


def test_the_fetch_is_the_layers_alone_and_relays_each_step_and_the_batch_size() -> None:
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    plain_next = _BaseDataLoaderIter.__next__
    session, meter = Marks(batch_size_source=None), StepMeter(None, live=False, syncs=False).install()
    layer_next = _BaseDataLoaderIter.__next__
    hooks = StepHooks(session)
    hooks.install(meter)
    try:
        assert _BaseDataLoaderIter.__next__ is layer_next  # not wrapped a second time
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(12, 3)), batch_size=4)
        for (x,) in loader:  # 3 batches: the 2nd and 3rd fetches and the end each end a step
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        assert session.marks.count("dataloader") == 3 and session.marks.count("optimizer") == 3
        # The loader's first batch tells the loader's batch size (then no batch is relayed any more), the model's
        # first call the model input's.
        assert session.batch_sizes == [(4, "dataloader"), (4, "model input")]
        assert hooks.main_loader() is loader and hooks.known_model() is model and hooks.pinned_optimizer() is opt
        hooks.drop_weaker_than("optimizer")  # the optimizer leads: fetches and model calls are no longer relayed
        session.marks.clear()
        for (x,) in loader:
            model(x).sum().backward()
        assert session.marks == ["backward"] * 3
    finally:
        hooks.remove()
        meter.remove()
    assert _BaseDataLoaderIter.__next__ is plain_next
    # What the layer pinned still answers once the hooks are off (the report's settings and census ask late).
    assert hooks.main_loader() is loader and hooks.known_model() is model and hooks.pinned_optimizer() is opt


def test_without_a_meter_the_step_detection_runs_one_of_its_own() -> None:
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    pre, plain_next = len(_global_optimizer_pre_hooks), _BaseDataLoaderIter.__next__
    session = Marks()
    hooks = StepHooks(session)
    hooks.install()
    try:
        assert len(_global_optimizer_pre_hooks) == pre + 1  # the layer's, once
        assert _BaseDataLoaderIter.__next__ is not plain_next
        model = torch.nn.Linear(3, 2)
        train(model, torch.optim.SGD(model.parameters(), lr=0.1), 2)
        assert session.marks.count("optimizer") == 2 and session.marks.count("backward") == 2
        assert session.marks.count("forward") == 1  # the model's calls after its first
    finally:
        hooks.remove()
    assert len(_global_optimizer_pre_hooks) == pre and _BaseDataLoaderIter.__next__ is plain_next
