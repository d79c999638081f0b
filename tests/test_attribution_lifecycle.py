"""Attribution's start/stop contract: safe where capture calls it, never breaks the program, leaves
nothing installed once stopped, and keeps away from torch.compile's guards."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.nn.modules import module as module_mod  # noqa: E402
from torch.utils.data.dataloader import _BaseDataLoaderIter  # noqa: E402

from stepscope.attribution import Attribution, enable  # noqa: E402


def nothing_installed() -> bool:
    wrapped = [_BaseDataLoaderIter.__next__, torch.optim.Optimizer.zero_grad, torch.optim.SGD.step,
               torch.autograd.Function.apply]
    return (torch._C._len_torch_function_stack() == 0 and not module_mod._global_forward_pre_hooks
            and not module_mod._global_forward_hooks
            and not any(hasattr(f, "__stepscope_wrapper__") for f in wrapped))


def test_start_stop_are_idempotent_and_leave_nothing() -> None:
    attribution = Attribution(compiled=False)
    attribution.stop()
    attribution.start()
    attribution.start()
    assert attribution.active and torch._C._len_torch_function_stack() == 1
    attribution.stop()
    attribution.stop()
    assert not attribution.active and attribution.error is None and nothing_installed()
    with enable(code_root="/nonexistent", compiled=False) as again:
        torch.ones(2).sum()
    assert again.error is None and nothing_installed()


def test_stop_inside_a_dataloader_step_and_start_inside_an_optimizer_hook() -> None:
    """Capture detects steps from these places: the mode is off the stack inside them."""
    attribution = Attribution(compiled=False)

    class Data(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> torch.Tensor:
            if i == 2:
                attribution.stop()
            return torch.ones(2) * i

    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    handle = opt.register_step_post_hook(lambda *_: attribution.start())
    try:
        for x in torch.utils.data.DataLoader(Data(), batch_size=1):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
    finally:
        handle.remove()
        attribution.stop()
    assert attribution.error is None and nothing_installed()


def test_a_failure_to_install_costs_the_program_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import stepscope.attribution.module_ranges as modules

    def broken(self: object) -> None:
        raise RuntimeError("no hooks today")

    monkeypatch.setattr(modules.ModuleRanges, "install", broken)
    attribution = Attribution(compiled=False)
    attribution.start()
    assert attribution.error is not None and "no hooks today" in attribution.error
    assert not attribution.active and nothing_installed()
    assert torch.nn.Linear(2, 2)(torch.ones(1, 2)).shape == (1, 2)


def test_torch_compile_is_not_recompiled() -> None:
    from torch._dynamo.utils import counters

    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), backend="eager")
    x = torch.randn(4, 8)
    model(x).sum().backward()
    graphs = counters["stats"]["unique_graphs"]
    with Attribution() as attribution:
        for _ in range(2):
            model(x).sum().backward()
    assert attribution.note is not None and counters["stats"]["unique_graphs"] == graphs
    model(x).sum().backward()
    assert counters["stats"]["unique_graphs"] == graphs and nothing_installed()
    torch._dynamo.reset()
    counters.clear()  # this process has compiled nothing as far as later tests (and their runs) know


def test_a_window_begun_inside_a_forward_names_modules_by_their_path(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """With the model's forward as the step, recording begins in its pre-hook: the blocks it then calls have
    no range open above them. They are named by their path under the model, not the loop variable."""
    from torch.profiler import ProfilerActivity, profile

    from stepscope.analysis.facts import compute_facts
    from stepscope.analysis.time_by_module import module_summary
    from stepscope.trace.kineto import read_kineto

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                x = block(x)
            return x

    model = Net()
    attribution = Attribution(compiled=False)
    handle = model.register_forward_pre_hook(lambda module, args: attribution.start())
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(torch.randn(2, 4))
    handle.remove()
    attribution.stop()
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    facts = compute_facts(read_kineto(path))
    summary = module_summary(facts.trace, facts.steps)
    assert summary is not None
    assert {m.path for m in summary.modules} == {"model.blocks.0", "model.blocks.1"}


def test_a_mode_stopped_inside_its_own_handler_comes_off_at_the_next_sweep() -> None:
    """torch takes a mode off its stack while the mode handles a call and puts it back after: a stop made then
    (a step boundary inside `loss.backward()`) cannot pop it. Left there it would see every later call, and send
    each through functions others patched a second time (a tune patch of Tensor.to converted a batch twice)."""
    from torch.overrides import TorchFunctionMode

    from stepscope.attribution.line_ranges import sweep, take_off

    class StopsItself(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.taken = take_off(self)
            return func(*args, **(kwargs or {}))

    mode = StopsItself()
    mode.__enter__()
    torch.ones(1).add(1)
    assert mode.taken is False and torch._C._len_torch_function_stack() == 1  # torch put it back
    sweep()
    assert torch._C._len_torch_function_stack() == 0

    # A mode pushed above ours stays, in its place.
    ours, theirs = TorchFunctionMode(), TorchFunctionMode()
    ours.__enter__()
    theirs.__enter__()
    assert take_off(ours) and torch._C._len_torch_function_stack() == 1
    assert torch._C._get_function_stack_at(0) is theirs
    theirs.__exit__(None, None, None)
    assert nothing_installed()
