"""`%%stepscope` in one long-lived IPython process: ten captures in a row leave it as it was (no mode, hook or patch
left, no change in its own speed), the report names the steps the loop ran, and a second run shows the diff."""

from __future__ import annotations

import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("IPython")

from IPython.core.interactiveshell import InteractiveShell  # noqa: E402

from live_scripts import NET_CLASS  # noqa: E402
from stepscope.attribution import Attribution  # noqa: E402

SETUP = """
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
""" + NET_CLASS + """model = Net(HIDDEN)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(8 * 20, 128), torch.randint(0, 4, (8 * 20,))), batch_size=8)
"""
# 20 batches of 8: enough for skip 2 + warm-up 1 + 3 recorded (twice: the timing pass) + the reference steps.
LOOP = """%%stepscope --skip 2 --warmup 1 --steps 3
for xb, yb in loader:
    loss = torch.nn.functional.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def process_state(ns: dict[str, Any]) -> dict[str, Any]:
    """Everything a capture installs in the process, by identity or count."""
    from torch.nn.modules import module as m
    from torch.optim import optimizer as o
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    from stepscope.capture.session import active

    model, opt = ns["model"], ns["opt"]
    patched = [(_BaseDataLoaderIter, "__next__"), (DataLoader, "__init__"), (DataLoader, "_get_iterator"),
               (torch.optim.Optimizer, "__init__"), (torch.optim.Optimizer, "zero_grad"), (torch.optim.SGD, "step"),
               (torch.autograd.Function, "apply")]
    return {
        "torch function modes": torch._C._len_torch_function_stack(),
        "profiler on": torch.autograd.profiler._is_profiler_enabled,
        "global module hooks": [len(d) for d in (m._global_forward_pre_hooks, m._global_forward_hooks,
                                                 m._global_backward_hooks, m._global_backward_pre_hooks)],
        "global optimizer hooks": [len(o._global_optimizer_pre_hooks), len(o._global_optimizer_post_hooks)],
        "model hooks": sum(len(x._forward_pre_hooks) + len(x._forward_hooks) + len(x._backward_hooks)
                           for x in model.modules()),
        "optimizer hooks": len(opt._optimizer_step_pre_hooks) + len(opt._optimizer_step_post_hooks),
        "patched": {f"{owner.__name__}.{name}": owner.__dict__.get(name) for owner, name in patched},
        "model's class forward": type(model).__dict__.get("forward"),  # the meter watches the model through it
        "autograd.backward": torch.autograd.backward,
        "sys profile/trace": (sys.getprofile(), sys.gettrace()),
        "SIGTERM handler": signal.getsignal(signal.SIGTERM),
        "threads": threading.active_count(),
        "stepscope session": active(),
    }


def plain_loop_ms(ns: dict[str, Any], repeats: int = 15) -> float:
    """The fastest of `repeats` runs of 30 training steps without stepscope: the process's own speed (the minimum,
    because other processes on a loaded machine only ever add time; the median moved 3x between runs here)."""
    model, opt, x, y = ns["model"], ns["opt"], *next(iter(ns["loader"]))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(30):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        times.append((time.perf_counter() - t) * 1e3)
    return min(times)


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[InteractiveShell]:
    monkeypatch.chdir(tmp_path)
    torch.set_num_threads(1)
    ip = InteractiveShell.instance()
    shown: list[dict[str, str]] = []
    monkeypatch.setattr("stepscope.live.notebook.display", lambda bundle, raw: shown.append(bundle))
    ip.shown = shown  # type: ignore[attr-defined]
    assert ip.run_cell("%load_ext stepscope").success
    yield ip
    ip.run_cell("%unload_ext stepscope")
    InteractiveShell.clear_instance()


def test_ten_captures_in_one_process_leave_it_as_it_was(shell: InteractiveShell) -> None:
    assert shell.run_cell(SETUP.replace("HIDDEN", "32")).success
    ns = shell.user_ns
    before = process_state(ns)
    plain_loop_ms(ns, repeats=2)  # first calls: allocator and dispatch caches warm up
    base_ms = plain_loop_ms(ns)
    # The detector can fail: attribution left installed (a mode, patches, module hooks) is seen.
    planted = Attribution()
    planted.start()
    try:
        assert process_state(ns) != before
        leaked_ms = plain_loop_ms(ns)
    finally:
        planted.stop()
    assert process_state(ns) == before
    base_ms = min(base_ms, plain_loop_ms(ns))

    for i in range(10):
        result = shell.run_cell(LOOP)
        assert result.success, result.error_in_exec
        assert process_state(ns) == before, f"capture {i + 1} left something behind"
    after_ms = plain_loop_ms(ns)
    print(f"30 plain steps: {base_ms:.2f} ms before, {after_ms:.2f} ms after ten captures, "
          f"{leaked_ms:.2f} ms with attribution left installed")
    # The speeds are printed, not asserted: on the shared 2-core machine the planted leak read 1.17x to 1.94x and
    # ten clean captures 0.89x to 1.40x in alternating runs (2026-12-07), so no threshold tells them apart;
    # process_state, compared after every capture, is the check.

    texts = [b["text/plain"] for b in shell.shown]  # type: ignore[attr-defined]
    assert len(texts) == 10
    # Every run recorded the 3 optimizer steps after 2 skipped and 1 warm-up, with the loader's batch of 8.
    assert all("optimizer steps, 3 of 3 recorded after 2 skipped and 1 warm-up" in t for t in texts)
    assert all("batch size: 8 (from the dataloader)" in t for t in texts)
    assert "compared with" not in texts[0] and all("compared with this cell's run" not in t for t in texts)
    # No cell id from this shell: each run is compared with the last %%stepscope run, the one before it.
    assert [f"run {i + 1}, compared with the last %%stepscope run {i}" in t for i, t in enumerate(texts)] == \
        [False] + [True] * 9


def test_a_wider_layer_shows_as_slower_on_its_line(shell: InteractiveShell) -> None:
    assert shell.run_cell(SETUP.replace("HIDDEN", "8")).success
    assert shell.run_cell(LOOP.replace("--steps 3", "--steps 3 --name mlp")).success
    # fc1 4096x wider: 8 x 128 x 32768 multiply-adds forward (67 MFLOP) and as many backward, several ms each here:
    # more than the one-off of a few ms a line's time can carry from the first recorded step.
    assert shell.run_cell("model = Net(32768)\nopt = torch.optim.SGD(model.parameters(), lr=0.01)").success
    assert shell.run_cell(LOOP.replace("--steps 3", "--steps 3 --name mlp")).success
    first, second = (b["text/plain"] for b in shell.shown)  # type: ignore[attr-defined]
    assert "compared with" not in first
    diff = second.split("stepscope: run 2 of this cell")[0]
    assert "run 2, compared with this cell's run 1" in diff
    assert "x slower" in diff.splitlines()[3], diff
    # The line table of the diff holds the forward line of the model, in the cell's own file name, grown.
    grown = [line for line in diff.splitlines() if "h = self.fc1(x).relu()" in line]
    assert grown and re.search(r"\+[\d.]+ (µs|ms)\s*$", grown[0]), diff


def test_a_cell_that_raises_shows_its_error_and_leaves_nothing(shell: InteractiveShell) -> None:
    assert shell.run_cell(SETUP.replace("HIDDEN", "8")).success
    before = process_state(shell.user_ns)
    result = shell.run_cell(LOOP.replace("opt.step()", "opt.step()\n    raise ValueError('planted')"))
    assert isinstance(result.error_in_exec, ValueError)
    assert process_state(shell.user_ns) == before
    shown = [b["text/plain"] for b in shell.shown]  # type: ignore[attr-defined]
    assert len(shown) == 1 and shown[0].startswith("stepscope: the cell raised")
    from stepscope.live.notebook import _loaded

    runs = _loaded[id(shell)].runs
    assert runs._temp is not None and list(Path(runs._temp.name).iterdir()) == []  # its run folder removed


def test_each_cell_is_compared_with_its_own_last_run(shell: InteractiveShell) -> None:
    """JupyterLab sends each cell's id: two profiled cells keep two histories."""
    assert shell.run_cell(SETUP.replace("HIDDEN", "8")).success
    for cell_id in ("cell-a", "cell-b", "cell-a"):
        assert shell.run_cell(LOOP, cell_id=cell_id).success
    a1, b1, a2 = (b["text/plain"] for b in shell.shown)  # type: ignore[attr-defined]
    assert "compared with" not in a1 and "compared with" not in b1  # b's first run: nothing of its own to compare
    assert a2.startswith("stepscope: run 2, compared with this cell's run 1")


def test_bad_options_say_so_in_one_line_and_run_nothing(shell: InteractiveShell, tmp_path: Any) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("the user's")
    shell.user_ns["ran"] = 0
    for line in ("--steps 0", f"-o {tmp_path / 'full'}"):
        assert shell.run_cell(f"%%stepscope {line}\nran += 1\n").success
    assert shell.user_ns["ran"] == 0
    said = [b["text/plain"] for b in shell.shown]  # type: ignore[attr-defined]
    assert said[0].startswith("stepscope: skip, warmup and reference_steps must be >= 0 and steps >= 1")
    assert said[1].startswith(f"stepscope: {tmp_path / 'full'}: already exists and is not an empty folder")
    assert (tmp_path / "full" / "keep.txt").read_text() == "the user's"
    result = shell.run_cell("%%stepscope --no-such-option\nran += 1\n")  # IPython's own usage error
    assert shell.user_ns["ran"] == 0 and result.error_in_exec is not None
