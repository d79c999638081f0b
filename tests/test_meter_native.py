"""The step meter's C hooks (capture/meter/_native.c) against the Python hooks they stand in for: the same clock, the
same events in the same order for a loop that crosses every branch (a validation loader, an epoch's end, a backward
pass that raises, a subclass's nested step, a second optimizer, steps on another thread), the same relays, and the
wrapped functions still look like themselves."""

from __future__ import annotations

import inspect
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from conftest import built_native_hooks  # noqa: E402
from stepscope.capture.meter import StepMeter  # noqa: E402
from stepscope.capture.meter.native import OFF_SWITCH  # noqa: E402
from stepscope.capture.meter.phases import CODE  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def native(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.delenv(OFF_SWITCH, raising=False)
    return built_native_hooks()


def test_the_c_clock_is_time_perf_counter_ns(native) -> None:  # type: ignore[no-untyped-def]
    for _ in range(100):
        before = time.perf_counter_ns()
        now = native.now()
        after = time.perf_counter_ns()
        assert before <= now <= after


class Nested(torch.optim.SGD):
    def step(self, closure=None):  # type: ignore[no-untyped-def,override]
        return super().step(closure)  # the global step hooks fire twice, nested: one step


class Raises(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def]
        return x * 1.0

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        raise RuntimeError("planted")


def events_of_a_loop(monkeypatch: pytest.MonkeyPatch, python_hooks: bool) -> tuple[list[int], list[str]]:
    """The event codes the hooks append over a loop that crosses each of their branches, and the relays heard.
    The replays are switched off, so every event stays in the list."""
    monkeypatch.setenv(OFF_SWITCH, "1" if python_hooks else "0")
    monkeypatch.setattr(StepMeter, "catch_up", lambda self: None)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    opt, other_opt = Nested(model.parameters(), lr=0.01), torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    train = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(6, 4)), batch_size=2)
    validation = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(2, 4)), batch_size=2)
    relayed: list[str] = []
    meter = StepMeter(None, live=False, syncs=False).install()
    assert meter.layer is not None
    meter.layer.subscribe(relay_optimizer=relayed.append, relay_backward=relayed.append,
                          relay_dataloader=relayed.append, relay_batch=lambda batch: relayed.append("batch"),
                          relay_forward=lambda source: relayed.append("F"))
    try:
        for epoch in range(2):
            for i, (x,) in enumerate(train):  # 3 batches, then StopIteration
                loss = model(x).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                other_opt.step()  # a second optimizer: its phase, never its steps
                if i == 1:
                    for (v,) in validation:  # another dataset: its fetches are data, not steps
                        model(v)
            with pytest.raises(RuntimeError, match="planted"):  # a backward pass that raises ends no step
                Raises.apply(model(torch.ones(1, 4))).sum().backward()
            if epoch == 0:  # steps on another thread: not measured, relayed
                def elsewhere() -> None:
                    model(torch.ones(1, 4)).sum().backward()
                    opt.step()

                thread = threading.Thread(target=elsewhere)
                thread.start()
                thread.join()
        codes = [event & CODE for event in meter.clock.events]
        times = [event >> 5 for event in meter.clock.events]
        assert times == sorted(times)  # one clock, read in order
    finally:
        meter.remove()
    return codes, relayed


def test_the_c_hooks_append_what_the_python_hooks_append(native, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    c_codes, c_relayed = events_of_a_loop(monkeypatch, python_hooks=False)
    py_codes, py_relayed = events_of_a_loop(monkeypatch, python_hooks=True)
    assert c_codes == py_codes
    assert c_relayed == py_relayed
    # Independently of either: 6 training steps, each fetch entering and leaving DATA (ENTER 0 / LEAVE 8), 2
    # optimizer phases a step (the pinned one and the other), 6 optimizer marks (MARK 16 + 3) and 6 backward marks
    # (16 + 2), plus the thread's step relayed but not measured.
    assert py_codes.count(16 + 3) == 6 and py_codes.count(16 + 2) == 6
    assert py_codes.count(0 + 3) == 12 and py_codes.count(8 + 3) == 12  # two optimizers x 6 steps, one phase each
    assert py_codes.count(0 + 2) == 8  # 6 backward passes and the 2 that raised
    # Per epoch 4 fetches of the training loader (3 batches, then its end) and 2 of validation (1 batch, its end).
    assert py_codes.count(0 + 0) == py_codes.count(8 + 0) == 2 * (4 + 2)
    # Relayed, per epoch: each training batch; each fetch after one (the 2nd, the 3rd, the epoch's end) ends a
    # dataloader step; each model call after the very first (validation's and the raising one's included); the
    # backward and optimizer steps; in the first epoch the other thread's call, backward and step.
    step = ["backward", "optimizer"]
    first = ["batch", *step, "dataloader", "batch", "F", *step, "F", "dataloader", "batch", "F", *step, "dataloader",
             "F", "F", *step]
    second = ["batch", "F", *step, "dataloader", "batch", "F", *step, "F", "dataloader", "batch", "F", *step,
              "dataloader", "F"]
    assert py_relayed == first + second


def test_the_wrapped_functions_keep_their_names_and_signatures(native, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    original_backward, original_next = torch.autograd.backward, _BaseDataLoaderIter.__next__
    meter = StepMeter(None, live=False, syncs=False).install()
    try:
        wrapped = torch.autograd.backward
        assert wrapped is not original_backward and type(wrapped).__module__ == "stepscope.capture.meter._native"
        assert wrapped.__name__ == "backward" and wrapped.__wrapped__ is original_backward
        assert inspect.signature(wrapped) == inspect.signature(original_backward)
        assert _BaseDataLoaderIter.__next__.__name__ == "__next__"
        it = iter(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(2, 4)), batch_size=2))
        assert it.__next__.__self__ is it  # bound as a method
        (x,) = it.__next__()
        assert x.shape == (2, 4)
    finally:
        meter.remove()
    assert torch.autograd.backward is original_backward and _BaseDataLoaderIter.__next__ is original_next


def test_a_forked_child_is_not_measured(native, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The hooks act only in the process that installed them; a forked child (a DataLoader worker) inherits them.
    import os

    meter = StepMeter(None, live=False, syncs=False).install()
    try:
        before = len(meter.clock.events)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a backward pass and an optimizer step, then how many events it appended
            try:
                lin = torch.nn.Linear(2, 1)
                lin(torch.ones(1, 2)).sum().backward()
                torch.optim.SGD(lin.parameters(), lr=0.1).step()
                os.write(write, str(len(meter.clock.events) - before).encode())
            finally:
                os._exit(0)
        os.close(write)
        appended = int(os.read(read, 32).decode())
        os.waitpid(pid, 0)
        assert appended == 0
    finally:
        meter.remove()


def test_a_hook_whose_state_lost_its_members_still_calls_through(native) -> None:  # type: ignore[no-untyped-def]
    # What the collector clears at interpreter exit, or a member deleted from Python, reads as None: the hook does
    # less, and never reads freed memory (a crash in the user's process).
    events: list[int] = []
    state = native.State(events, lambda: None, lambda iterator, dataset: True, lambda optimizer: None)
    timed = native.timed(state, lambda x, *, y: x + y, 2, source=2, marks_device=True, relays=True)
    before, after = native.optimizer_hooks(state)
    assert timed(1, y=2) == 3 and len(events) == 3  # enter, leave, mark
    for name in ("device", "relay_backward", "relay_optimizer", "dataset", "optimizer"):
        delattr(state, name)
    assert timed(1, y=2) == 3 and len(events) == 6
    lin = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    assert before(opt, (), {}) is None and after(opt, (), {}) is None and len(events) == 9  # enter, leave, mark
    fetch = native.data_next(state, lambda iterator: 42, 0)

    class Iterator:
        _dataset = None

    assert fetch(Iterator()) == 42 and len(events) == 11  # enter, leave: the first batch ends no step


def test_both_hook_sets_read_and_write_one_state(native) -> None:  # type: ignore[no-untyped-def]
    """No mirror: the C hooks' State has every field of the Python hooks' HookState, the meter writes its due times,
    muted sources and device into the state the installed set reads, and the subscribers are slots of it too."""
    from stepscope.capture.meter.hooks import HOOKED, SUBSCRIBERS, HookState

    meter = StepMeter(None, live=False, syncs=False).install()
    try:
        state = meter.state
        assert type(state).__module__ == "stepscope.capture.meter._native"
        assert all(hasattr(state, name) for name in HookState.__slots__)
        assert set(SUBSCRIBERS) <= set(HookState.__slots__)
        meter.muted = {"forward", "optimizer"}
        assert state.muted == (1 << HOOKED.index("forward")) | (1 << HOOKED.index("optimizer")) == 0b1010
        meter.due = 12345
        assert state.due == 12345 and meter.due == 12345
        heard: list[str] = []
        assert meter.layer is not None
        meter.layer.subscribe(relay_backward=heard.append)
        assert state.relay_backward == heard.append
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum().backward()
        assert heard == ["backward"]
        with pytest.raises(TypeError, match="no subscriber"):
            meter.layer.subscribe(relay_everything=print)
    finally:
        meter.remove()
