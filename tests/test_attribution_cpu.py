"""Source attribution on real CPU runs of a model whose per-line ops are known by construction.

Each marked line (`# LINE:name`) issues ops we know by name, so the truth is computed from the raw trace
alone (op names, nesting and order), without stepscope's annotations, and compared with the line and
module stepscope charges each of those ops to.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from stepscope.trace.model import Trace  # noqa: E402

STEPS = 3


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x.pow(2)  # LINE:square_forward

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * 2 * x


class Net(nn.Module):
    def __init__(self, width: int = 128, big: int = 1024) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(big, width) / big**0.5)
        self.shared = nn.Linear(width, width)  # one module, called from two lines

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.mm(x, self.weight)  # LINE:matmul
        h = h.mul(0.5)  # LINE:small
        h = self.shared(h)  # LINE:shared_first
        h = self.shared(h)  # LINE:shared_second
        return Square.apply(h)  # LINE:custom


def train(model: nn.Module, loader: Any, opt: Any, steps: int, on_step: Callable[[], None]) -> None:
    for i, (x,) in enumerate(loader):  # LINE:loader
        opt.zero_grad()  # LINE:zero_grad
        loss = model(x).sum()  # LINE:loss
        loss.backward()
        opt.step()  # LINE:step
        loss.item()  # LINE:item
        on_step()
        if i + 1 == steps:
            return


def marked_lines() -> dict[str, int]:
    lines = Path(__file__).read_text().splitlines()
    return {m.group(1): i for i, text in enumerate(lines, 1) if (m := re.search(r"# LINE:(\w+)$", text))}


def record(path: Path, *, modules: bool = True) -> Path:
    """Profile: one unrecorded step, one warm-up, STEPS recorded, attribution on for the recorded ones."""
    from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule

    from stepscope.attribution import Attribution

    torch.manual_seed(0)
    model = Net()
    data = torch.utils.data.TensorDataset(torch.randn(512 * (STEPS + 3), 1024))
    loader = torch.utils.data.DataLoader(data, batch_size=512)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    attribution = Attribution(modules=modules, compiled=False)  # whatever other tests compiled before
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=STEPS),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:

        def on_step() -> None:  # what capture does at each step boundary
            prof.step()
            if prof.current_action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
                attribution.start()
            else:
                attribution.stop()

        train(model, loader, opt, STEPS + 2, on_step)
    attribution.stop()
    assert attribution.error is None
    return path


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("attribution") / "trace.json")


FORWARD_TRUTH = {"aten::mm": "matmul", "aten::mul": "small", "Square": "custom", "aten::sum": "loss",
                 "aten::item": "item"}
BACKWARD_TRUTH = {"MmBackward0": "matmul", "MulBackward0": "small", "SquareBackward": "custom",
                  "SumBackward0": "loss"}
UNIT_TRUTH = {"enumerate(DataLoader)": "loader", "Optimizer.zero_grad": "zero_grad", "Optimizer.step": "step"}
MODULE_TRUTH = {"matmul": "model", "small": "model", "custom": "model", "square_forward": "model",
                "shared_first": "model.shared", "shared_second": "model.shared"}


def truth(trace: Trace) -> dict[int, tuple[str, str, int]]:
    """row -> (true line name, "fwd"/"bwd", ns it owns), from op names, nesting and order only."""
    ev = trace.events
    out: dict[int, tuple[str, str, int]] = {}
    steps = np.flatnonzero(trace.names_where(lambda s: s.startswith("ProfilerStep#")))
    plain = ~trace.names_where(lambda s: s.startswith("stepscope."))
    for step in steps:
        inside = np.flatnonzero(plain & (ev.start >= ev.start[step]) & (ev.end <= ev.end[step]) & (ev.device < 0))
        unit_names = trace.names_where(lambda s: any(s.startswith(k) for k in UNIT_TRUTH))
        ops = inside[(ev.kind[inside] == 0) | unit_names[inside]]  # ops and units, in start order
        top, running_end = [], -1
        for row in ops:
            if ev.start[row] >= running_end:
                top.append(row)
                running_end = ev.end[row]
        linears = backward_addmm = backward_t = 0
        for row in top:
            name = trace.name_of(row)
            node = name.removeprefix("autograd::engine::evaluate_function: ")
            unit = next((v for k, v in UNIT_TRUTH.items() if name.startswith(k)), None)
            if unit:
                out[row] = (unit, "fwd", int(ev.dur[row]))
            elif name in FORWARD_TRUTH:
                own = int(ev.dur[row])
                if name == "Square":  # its forward's own op belongs to the line inside forward
                    pow_rows = [r for r in ops if trace.name_of(r) == "aten::pow"
                                and ev.start[row] <= ev.start[r] and ev.end[r] <= ev.end[row]]
                    for r in pow_rows:
                        out[r] = ("square_forward", "fwd", int(ev.dur[r]))
                        own -= int(ev.dur[r])
                out[row] = (FORWARD_TRUTH[name], "fwd", own)
            elif name == "aten::linear":
                out[row] = (("shared_first", "shared_second")[linears], "fwd", int(ev.dur[row]))
                linears += 1
            elif node in BACKWARD_TRUTH:
                out[row] = (BACKWARD_TRUTH[node], "bwd", int(ev.dur[row]))
            elif node in ("AddmmBackward0", "TBackward0"):  # backward runs the second call first
                k = backward_addmm if node == "AddmmBackward0" else backward_t
                out[row] = (("shared_second", "shared_first")[k], "bwd", int(ev.dur[row]))
                if node == "AddmmBackward0":
                    backward_addmm += 1
                else:
                    backward_t += 1
    return out


def test_each_line_gets_its_own_ops_forward_and_backward(trace_path: Path) -> None:
    from stepscope.analysis.source_map import source_map
    from stepscope.trace.kineto import read_kineto

    trace = read_kineto(trace_path)
    sm = source_map(trace)
    assert sm is not None and sm.source == "stepscope annotations"
    marks = marked_lines()
    name_of_line = {v: k for k, v in marks.items()}
    right: dict[tuple[str, str], int] = defaultdict(int)
    total: dict[tuple[str, str], int] = defaultdict(int)
    module_right: dict[tuple[str, str], int] = defaultdict(int)
    for row, (line, direction, ns) in truth(trace).items():
        total[(line, direction)] += ns
        anchor = sm.row_anchor[row]
        assert anchor >= 0 and sm.anchors[anchor] == row, trace.name_of(row)
        found = sm.lines[sm.line[anchor]] if sm.line[anchor] >= 0 else None
        if found is not None and found.file.endswith("test_attribution_cpu.py") and \
                name_of_line.get(found.line) == line:
            right[(line, direction)] += ns
        module = sm.modules[sm.module[anchor]] if sm.module[anchor] >= 0 else None
        if module == MODULE_TRUTH.get(line):
            module_right[(line, direction)] += ns
    expected = {(k, "fwd") for k in marks} | {(k, "bwd") for k in (*BACKWARD_TRUTH.values(), "shared_first",
                                                                   "shared_second")}
    assert set(total) == expected
    for key in expected:
        assert right[key] >= 0.9 * total[key], (key, right[key], total[key])
        if key[0] in MODULE_TRUTH:
            assert module_right[key] >= 0.9 * total[key], (key, module_right[key], total[key])


def test_line_table_and_module_table(trace_path: Path) -> None:
    from stepscope import analyze

    report = analyze(trace_path)
    marks = marked_lines()
    assert report.lines is not None and report.lines.granularity == "line"
    rows = {r.line: r for r in report.lines.rows if r.file and r.file.endswith("test_attribution_cpu.py")}
    assert set(marks.values()) <= set(rows)
    matmul, small = rows[marks["matmul"]], rows[marks["small"]]
    assert matmul.code == "h = torch.mm(x, self.weight)  # LINE:matmul"
    assert min(matmul.cpu_fwd_us, matmul.cpu_bwd_us, small.cpu_fwd_us, small.cpu_bwd_us) > 0
    cost = [max(r.cpu_fwd_us + r.cpu_bwd_us, r.gpu_fwd_us + r.gpu_bwd_us) for r in report.lines.rows]
    assert cost == sorted(cost, reverse=True)
    assert rows[marks["custom"]].cpu_bwd_us > 0 and rows[marks["square_forward"]].cpu_bwd_us == 0
    assert rows[marks["loader"]].cpu_fwd_us > 0 and rows[marks["step"]].cpu_fwd_us > 0
    # AccumulateGrad has no forward op: shown as such, not spread over the lines.
    assert any(u.label.startswith("backward: forward op not found") for u in report.lines.unattributed)
    assert report.lines.attributed_share > 0.9
    # The .item() sync is blamed on its line.
    sync = report.lines.syncs[0]
    assert (sync.line, sync.op) == (marks["item"], "aten::item") and sync.count_per_step == 1
    modules = {m.path: m for m in report.modules.rows}
    assert set(modules) == {"model", "model.shared"}
    assert modules["model.shared"].calls == 2 and modules["model"].calls == 1
    shared, model = modules["model.shared"], modules["model"]
    assert model.cpu_fwd_us >= shared.cpu_fwd_us > 0 and model.cpu_bwd_us >= shared.cpu_bwd_us > 0
    assert model.own_cpu_us == pytest.approx(model.cpu_fwd_us + model.cpu_bwd_us - shared.own_cpu_us, abs=0.01)


def test_terminal_shows_lines_and_modules(trace_path: Path) -> None:
    from io import StringIO

    from rich.console import Console

    from stepscope import analyze
    from stepscope.report.terminal import render_terminal

    console = Console(file=StringIO(), width=160, highlight=False)
    render_terminal(analyze(trace_path), console)
    text = console.file.getvalue()
    assert "Time by source line" in text and "Time by module" in text
    assert "torch.mm(x, self.weight)" in text and "model.shared" in text and "loss.item()" in text


def test_without_modules_and_outside_the_window(tmp_path: Path) -> None:
    from stepscope import analyze

    report = analyze(record(tmp_path / "trace.json", modules=False))
    assert report.lines is not None and report.modules is None
    # Nothing is left installed once stopped.
    from torch.nn.modules import module as module_mod
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    assert torch._C._len_torch_function_stack() == 0
    assert not module_mod._global_forward_pre_hooks and not module_mod._global_forward_hooks
    assert not hasattr(_BaseDataLoaderIter.__next__, "__stepscope_wrapper__")
    assert not hasattr(torch.optim.Optimizer.zero_grad, "__stepscope_wrapper__")
    assert not hasattr(torch.autograd.Function.apply, "__stepscope_wrapper__")
