"""A trace recorded here, now, with torch's CPU profiler analyses cleanly (no GPU on the test machine)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


def test_cpu_profiler_trace(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile, schedule

    from stepscope import analyze

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(256, 64), torch.randint(0, 10, (256,)))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    path = tmp_path / "cpu_trace.json"
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=4),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for step, (x, y) in enumerate(loader):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            prof.step()
            if step == 6:
                break
    report = analyze(path, batch_size=16)
    assert report.device is not None and report.device.kind == "cpu"
    assert len(report.steps) == 4 and report.summary.step_source == "ProfilerStep"
    assert report.summary.gpu_utilization is None
    b = report.summary.breakdown_us
    assert b["dataloader"] > 0 and b["cpu_exec"] > 0
    assert b["kernel"] == b["memcpy"] == b["runtime"] == 0
    assert sum(b.values()) == pytest.approx(report.summary.step_time_us, rel=1e-3)
    assert report.summary.samples_per_s == pytest.approx(16 * report.summary.steps_per_s, rel=1e-3)
