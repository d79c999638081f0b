"""Lines and modules fitted inside the step meter's phases (issue 40.3): a line's host time never exceeds the phase
it ran in, and the lines add up to no more than the step. Hand-computed factors, then a real run whose raw profiled
`opt.step()` line is above the meter's optimizer phase."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stepscope.analysis.time_by_line import Cost
from stepscope.model.meter import Meter, MeterPhase
from stepscope.pipeline.fit_lines import phase_fit


def meter(**phases_us: float) -> Meter:
    step = sum(phases_us.values())
    return Meter(source="optimizer", steps_measured=20, basis="before the profiler", steps=8, step_us=step,
                 median_us=step, p10_us=step, p90_us=step,
                 phases=[MeterPhase(name=k, mean_us=v, share=v / step) for k, v in phases_us.items()])


def test_each_part_is_scaled_into_its_phase_and_never_up() -> None:
    # One step. Line A: 800 µs forward, 600 of it inside the optimizer step's range, 300 backward; line B: 500 µs
    # forward in the rest of the step. The meter: optimizer 150, backward 200, forward 100, other 50, no data wait.
    # optimizer 150 / 600 = 0.25; backward 200 / 300; the rest (A's 200 + B's 500) into forward + other 150: 150 / 700.
    a = Cost(cpu_fwd_ns=800_000, cpu_bwd_ns=300_000, cpu_fwd_optimizer_ns=600_000)
    b = Cost(cpu_fwd_ns=500_000)
    fit = phase_fit([a, b], 1, meter(data=0.0, forward=100.0, backward=200.0, optimizer=150.0, sync=0.0, other=50.0))
    assert fit is not None
    assert (fit.optimizer, fit.backward, fit.rest) == pytest.approx((0.25, 200 / 300, 150 / 700))
    fa, fb = fit.apply(a), fit.apply(b)
    assert fa.cpu_fwd_optimizer_ns == 150_000 and fa.cpu_bwd_ns == 200_000
    assert fa.cpu_fwd_ns == pytest.approx(150_000 + 200_000 * 150 / 700, abs=1)
    assert fb.cpu_fwd_ns == pytest.approx(500_000 * 150 / 700, abs=1)
    # All of the step's anchors fit its 500 µs exactly here (each phase was over-full).
    assert fa.cpu_ns + fb.cpu_ns == pytest.approx(500_000, abs=2)
    # A phase the profile shows shorter than measured is not scaled up: factor 1.
    roomy = phase_fit([a, b], 1, meter(data=0.0, forward=5000.0, backward=5000.0, optimizer=5000.0, sync=0.0,
                                       other=0.0))
    assert roomy is not None and (roomy.optimizer, roomy.backward, roomy.rest) == (1.0, 1.0, 1.0)
    # A phase the meter saw nothing of (backward 0: not hooked) is pooled with the rest, not zeroed.
    pooled = phase_fit([a, b], 1, meter(data=0.0, forward=300.0, backward=0.0, optimizer=150.0, sync=0.0, other=0.0))
    assert pooled is not None and pooled.backward == pooled.rest == pytest.approx(300 / 1000)
    assert phase_fit([a, b], 1, None) is None


TRAIN = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(8)])
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(64, 32)
for step in range(40):
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.usefixtures("one_torch_thread")
def test_a_real_runs_lines_fit_its_phases(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(TRAIN))
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "stepscope", "run", "--out", str(run), "--skip", "10", str(script)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((run / "report.json").read_text())
    lines, phases = report["lines"], {p["name"]: p["mean_us"] for p in report["meter"]["phases"]}
    assert lines["fitted"] == "step meter" and report["modules"]["fitted"] == "step meter"
    rows = {r["code"].strip(): r for r in lines["rows"]}
    opt_line = rows["opt.step()"]
    assert opt_line["cpu_fwd_us"] <= phases["optimizer"] * 1.001 + 0.01
    assert rows["loss.backward()"]["cpu_fwd_us"] + sum(r["cpu_bwd_us"] for r in lines["rows"]) <= \
        phases["backward"] + phases["forward"] + phases["other"] + phases["sync"] + 0.01
    every = [*lines["rows"], *lines["unattributed"]]
    assert sum(r["cpu_fwd_us"] + r["cpu_bwd_us"] for r in every) <= report["meter"]["step_us"] * 1.001
    # Not vacuous: the trace analysed alone (no meter) gives the raw profiled line, above the measured phase.
    raw = tmp_path / "raw.json"
    trace = next(p for p in run.iterdir() if p.name.startswith("trace") and p.name.endswith(".json.gz"))
    done = subprocess.run([sys.executable, "-m", "stepscope", "analyze", str(trace), "--json", str(raw), "-q"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    raw_rows = {r["code"].strip(): r for r in json.loads(raw.read_text())["lines"]["rows"]}
    assert json.loads(raw.read_text())["lines"]["fitted"] == ""
    # Never scaled up: each fitted line is at most its raw profiled time. (Whether the raw optimizer line is above
    # the meter's phase is the machine's timing: it was on a quiet machine, 1.76 ms against 2.67 ms once under CI
    # load; the hand-computed test above is what shows the scaling.)
    for code, row in rows.items():
        assert row["cpu_fwd_us"] <= raw_rows[code]["cpu_fwd_us"] + 0.01 and \
            row["cpu_bwd_us"] <= raw_rows[code]["cpu_bwd_us"] + 0.01, code
    if raw_rows["opt.step()"]["cpu_fwd_us"] > phases["optimizer"]:
        assert opt_line["cpu_fwd_us"] < raw_rows["opt.step()"]["cpu_fwd_us"]  # it was fitted down
