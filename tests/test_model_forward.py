"""Watching the model's calls leaves nothing on the model: `torch.save(model)` and `copy.deepcopy(model)` work under
the step meter and the step detection (a hook on the model broke the first and was copied by the second), a copy's
calls are not the model's, and the class is put back."""

from __future__ import annotations

import copy
import io

import pytest

torch = pytest.importorskip("torch")

from stepscope.capture.meter import StepMeter  # noqa: E402
from stepscope.capture.model_forward import watch_forward  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


class Wider(Net):  # inherits Net's forward
    pass


class Failing(Net):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("planted")


def train(model: torch.nn.Module, steps: int) -> torch.optim.Optimizer:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
    return opt


def test_the_whole_model_saves_and_copies_under_the_meter() -> None:
    model = Net()
    meter = StepMeter(None, live=False, syncs=False).install()
    try:
        train(model, 4)
        assert meter._hooks is not None and meter._hooks.model_found
        buf = io.BytesIO()
        torch.save(model, buf)  # raised AttributeError (a local hook function) before
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)
        assert not loaded._forward_pre_hooks and not loaded._forward_hooks
        assert torch.equal(loaded.lin.weight, model.lin.weight)
        ema = copy.deepcopy(model)
        meter.catch_up()  # the hooks' events replayed into the steps and totals
        forwards = meter.logs["forward"].count if "forward" in meter.logs else 0
        totals = list(meter.clock.totals)
        for _ in range(5):
            ema(torch.randn(3, 4))  # the copy's calls: no forward step, no forward time
        meter.catch_up()
        assert (meter.logs["forward"].count if "forward" in meter.logs else 0) == forwards
        assert meter.clock.totals[1] == totals[1]
    finally:
        meter.remove()
    assert Net.__dict__["forward"].__qualname__ == "Net.forward"  # the class is back as it was


def test_the_step_detection_leaves_the_model_picklable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from stepscope.capture.hooks import StepHooks
    from stepscope.capture.options import CaptureOptions
    from stepscope.capture.session import CaptureSession

    session = CaptureSession(CaptureOptions(skip=1000, calibrate=False), tmp_path)  # no profiler: only the hooks
    hooks = StepHooks(session)
    hooks.install()
    model = Net()
    try:
        train(model, 3)
        assert hooks.known_model() is model
        torch.save(model, io.BytesIO())
    finally:
        hooks.remove()
        session.close()
    assert Net.__dict__["forward"].__qualname__ == "Net.forward"


def test_an_inherited_forward_is_wrapped_on_the_subclass_and_removed_again() -> None:
    model, calls = Wider(), []
    stop = watch_forward(model, lambda: calls.append("in"), lambda: calls.append("out"))
    assert "forward" in Wider.__dict__
    model(torch.randn(1, 4))
    Net()(torch.randn(1, 4))  # the base class's other instances are not watched
    stop()
    stop()  # twice is harmless
    assert calls == ["in", "out"]
    assert "forward" not in Wider.__dict__ and Wider.forward is Net.forward


def test_a_forward_that_raises_still_leaves_its_phase() -> None:
    model, calls = Failing(), []
    stop = watch_forward(model, lambda: calls.append("in"), lambda: calls.append("out"))
    with pytest.raises(ValueError, match="planted"):
        model(torch.randn(1, 4))
    stop()
    assert calls == ["in", "out"]


def test_two_watchers_of_one_model_come_off_in_either_order() -> None:
    model, calls = Net(), []
    first = watch_forward(model, lambda: calls.append("a+"), lambda: calls.append("a-"))
    second = watch_forward(model, lambda: calls.append("b+"), lambda: calls.append("b-"))
    model(torch.randn(1, 4))
    first()
    model(torch.randn(1, 4))
    second()
    model(torch.randn(1, 4))
    assert calls == ["a+", "b+", "b-", "a-", "b+", "b-"]
    assert Net.__dict__["forward"].__qualname__ == "Net.forward"


def test_a_forward_set_on_the_instance_is_watched_by_its_hooks() -> None:
    model, calls = Net(), []
    model.forward = model.lin  # the instance's own forward shadows the class's
    stop = watch_forward(model, lambda: calls.append("in"), lambda: calls.append("out"))
    assert "forward" not in Net.__dict__ or Net.__dict__["forward"].__qualname__ == "Net.forward"
    model(torch.randn(1, 4))
    stop()
    model(torch.randn(1, 4))
    assert calls == ["in", "out"] and not model._forward_pre_hooks


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit's own
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_scripting_tracing_and_exporting_the_watched_model_work() -> None:
    """The class's forward is our wrapper while the meter runs: torch.jit, torch.export and torch.fx read the
    original."""
    model = Net()
    meter = StepMeter(None, live=False, syncs=False).install()
    try:
        train(model, 3)
        x = torch.randn(2, 4)
        expected = model.lin(x)
        assert torch.allclose(torch.jit.script(model)(x), expected)
        assert torch.allclose(torch.jit.trace(model, x)(x), expected)
        meter.catch_up()
        exported = torch.export.export(model, (x,))  # traces the model by running it (non-strict): not a call of it
        assert meter.clock.events == []
        assert torch.allclose(exported.module()(x), expected)
        assert torch.allclose(torch.fx.symbolic_trace(model)(x), expected)
        import inspect

        assert list(inspect.signature(model.forward).parameters) == ["x"]  # Hugging Face reads it
        meter.catch_up()
        assert meter.clock._stack == [5]  # every phase entered was left (5: OTHER)
    finally:
        meter.remove()


COMPILED = """
import torch
from stepscope.capture.meter import StepMeter
meter = StepMeter(None, live=False, syncs=False).install()
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)
    def forward(self, x):
        return self.lin(x).relu() * 2
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
def train(m, steps):
    for _ in range(steps):
        opt.zero_grad(); m(torch.randn(3, 4)).sum().backward(); opt.step()
train(model, 3)  # the model found: its class's forward is the watch's wrapper
explained = torch._dynamo.explain(model)(torch.randn(3, 4))
train(torch.compile(model), 2)
meter.catch_up()
print("GRAPHS", explained.graph_count, "BREAKS", explained.graph_break_count, "STACK", meter.clock._stack)
"""


def test_torch_compile_traces_none_of_the_watch() -> None:
    """In a process of its own: once torch.compile has compiled anything, the line attribution stays off for the
    process (a mode would make compiled code recompile), which the other tests of a worker must not inherit."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", COMPILED], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "GRAPHS 1 BREAKS 0 STACK [5]" in done.stdout  # one graph, no break at our wrapper, every phase left
