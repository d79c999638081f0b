"""Traces that carry the profiler's own Python stacks (with_stack=True) and no stepscope annotations: time
by function (a frame names its function's first line), and module paths from with_modules frames."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


def heavy(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.mm(x, w)


def light(x: torch.Tensor) -> torch.Tensor:
    return x.mul(0.5)


def test_function_granularity_from_python_stacks(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile, schedule

    from stepscope import analyze

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU())
    x, w = torch.randn(256, 512), torch.randn(512, 64, requires_grad=True)
    path = tmp_path / "stacks.json"
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=2),
                 with_stack=True, with_modules=True,
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(3):
            loss = model(light(heavy(x, w))).sum()
            loss.backward()
            prof.step()
    report = analyze(path)
    lines = report.lines
    assert lines is not None and lines.source == "python stacks" and lines.granularity == "function"
    by_function = {r.function: r for r in lines.rows}
    here = Path(__file__).name
    assert by_function["heavy"].file.endswith(here) and by_function["heavy"].line == heavy.__code__.co_firstlineno
    assert by_function["heavy"].cpu_fwd_us > 0 and by_function["heavy"].cpu_bwd_us > 0
    assert by_function["light"].cpu_fwd_us > 0 and by_function["light"].cpu_bwd_us > 0
    paths = {m.path for m in report.modules.rows}
    assert any(p.endswith("Linear_0") for p in paths) and any("." in p for p in paths)
