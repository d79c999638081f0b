"""The verdict corrected for the profiler's own cost (the replay, replay/deperturb.py: here without a calibration, so
the default cost per event sized to the gap), and one-off steps set aside, on our real H100 traces.

The unprofiled references are plain runs of the same scripts on the same machine, without stepscope
(tests/data/gpu_h100/plain_timings.txt): an independent figure of what a step takes. run.json beside each
trace is the run section the GPU machine wrote, whose host-clock "unprofiled" step measured how fast the host
queued work, not the step (gpu_compute_bound: 5.5 ms host clock against 17.1 ms per step in a plain run).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stepscope.model import report as s
from stepscope.pipeline import analyze
from stepscope.trace.kineto import read_kineto

H100 = Path(__file__).parent / "data" / "gpu_h100"
PLAIN_MS = {"gpu_compute_bound": 17.1, "sync_bound": 7.6, "cifar_rung4": 44.1}  # from plain_timings.txt


def plain_ms(name: str) -> float:
    """The plain run's ms/step, read from plain_timings.txt (gpu_compute_bound prints samples/s: batch 1024)."""
    key = name.removeprefix("cifar_")
    for line in (H100 / "plain_timings.txt").read_text().splitlines():
        if line.startswith(f"{key}:"):
            if "ms/step" in line:
                return float(line.rsplit("(", 1)[1].split(" ms/step")[0])
            return 1024 / float(line.split(": ")[-1].split(" samples/s")[0].split()[-1]) * 1e3
    raise KeyError(name)


def run_with(reference_ms: float, method: str = "synchronized slices", noise: float = 0.02) -> s.Run:
    return s.Run(command=[], status="window recorded", exit_code=0, step_source="optimizer", skip=5, warmup=2,
                 steps_requested=5, steps_recorded=5, first_recorded_step=7, batch_size=None, batch_size_source=None,
                 profiled_device="cuda", profiler_overhead=None, unprofiled_step_us=reference_ms * 1e3,
                 recorded_step_us=None,
                 reference=s.Reference(method=method, step_us=reference_ms * 1e3, values_us=[reference_ms * 1e3],
                                       steps=30, noise=noise))


def report(name: str, run: s.Run | None = None) -> s.Report:
    return analyze([read_kineto(H100 / name / "trace.json.gz")], run=run)


def test_plain_timings_are_read_as_written() -> None:
    assert {name: round(plain_ms(name), 1) for name in PLAIN_MS} == PLAIN_MS  # 1024 / 59936.5 samples/s = 17.1 ms


def test_gpu_compute_bound_despite_a_one_off_first_step() -> None:
    # Steps 8-11 keep the GPU busy 97% each; step 7 carries a 9 ms one-time gap (the profiler's first active
    # step), which pulled the mean to 84% and made a 10% cpu_compute_bound the verdict.
    raw = report("gpu_compute_bound")
    assert raw.patterns[0].id == "gpu_compute_bound" and raw.patterns[0].share >= 0.9
    assert any(n.startswith("step 7 (") and "one-off" in n for n in raw.notes)
    assert raw.steps[0].gpu_utilization < 0.6  # the step table keeps the one-off step's own figures
    # With the plain run as reference: the profiler cost nothing measurable on this GPU-bound job.
    corrected = report("gpu_compute_bound", run_with(plain_ms("gpu_compute_bound")))
    c = corrected.run.overhead_correction if corrected.run else None
    assert c is not None and c.within_noise and not c.applied
    assert corrected.patterns[0].id == "gpu_compute_bound"


def test_a_host_clock_reference_is_not_compared_with_a_gpu_step() -> None:
    # big_matmul's run.json: "unprofiled" 876 µs on the host clock, while each step keeps the GPU busy ~21.7 ms.
    recorded = json.loads((H100 / "big_matmul" / "run.json").read_text())
    r = report("big_matmul", run_with(recorded["unprofiled_step_us"] / 1e3, method="host clock"))
    c = r.run.overhead_correction if r.run else None
    assert c is not None and not c.applied and c.overhead is None
    assert r.run.profiler_overhead is None
    assert any("host clock" in n and "nothing taken out" in n for n in r.notes)
    assert r.patterns[0].id == "gpu_compute_bound" and r.patterns[0].share > 0.99


def test_sync_bound_corrected_for_the_profilers_cost() -> None:
    # The profiled steps took a median 20.7 ms where a plain run takes 7.6: the host's work was inflated ~3x.
    raw = report("sync_bound")
    corrected = report("sync_bound", run_with(plain_ms("sync_bound")))
    c = corrected.run.overhead_correction if corrected.run else None
    assert c is not None and c.applied and c.overhead == pytest.approx(20.75 / 7.6 - 1, abs=0.01)
    # The replay's median step comes down to the top of the reference's spread, 7.6 x 1.02 ms, within the fit's 1% of
    # what comes off (20.75 - 7.75 ms).
    replay = corrected.replay
    assert replay is not None and replay.replayed and replay.cost_source == "fitted"
    assert replay.replayed_step_us == pytest.approx(7_600 * 1.02, abs=0.01 * (20_750 - 7_600 * 1.02) + 1)
    # A cost inside a step lengthens it at most one for one: at least those 13.0 ms per step came out, all of it from
    # host work (one figure: the run section's is the replay's).
    assert 20_750 - 7_600 * 1.02 <= c.removed_us_per_step < c.host_work_us_per_step
    assert c.removed_us_per_step == replay.removed_us_per_step
    launch_raw = next(p for p in raw.patterns if p.id == "launch_bound")
    launch = next(p for p in corrected.patterns if p.id == "launch_bound")
    assert launch_raw.share > 0.5 and launch.share < 0.5 * launch_raw.share
    assert raw.patterns[0].id == "launch_bound" and corrected.patterns[0].id != "launch_bound"
    assert any("profiler overhead +173%" in n and "taken out" in n for n in corrected.notes)


def test_a_negative_overhead_is_noise() -> None:
    # cifar_rung4: the plain run's 44.1 ms/step includes its workers' start-up over 80 steps; the recorded steps
    # took 29.3 ms. A profiler cannot make a job faster: nothing is corrected.
    r = report("cifar_rung4", run_with(plain_ms("cifar_rung4")))
    c = r.run.overhead_correction if r.run else None
    assert c is not None and c.overhead is not None and c.overhead < -0.3 and not c.applied
    assert any("is noise" in n for n in r.notes)
    assert [p.id for p in r.patterns] == [p.id for p in report("cifar_rung4").patterns]


def test_the_line_table_fits_an_80_column_terminal() -> None:
    """Paths are cut on the left (the file and line stay), code with an ellipsis, less useful columns give
    way: no table row folds into a tall row or runs past the width (it used to fold the path over 4 lines)."""
    import io

    from rich.console import Console

    from stepscope.report import render

    console = Console(file=io.StringIO(), width=80, record=True)
    console.print(render("terminal", report("cifar_rung4")))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    table = text[text.index("Time by source line"):text.index("Time no line can take")]
    rows = [line for line in table.splitlines() if re.match(r"^\s*…\S*\.py:\d+ ", line)]
    assert len(rows) >= 10  # every path keeps its file's end and its line number
    assert all(line.rstrip().endswith("%") for line in rows)  # the share column is still there


def test_the_fix_table_shares_an_80_column_terminal_with_its_locations() -> None:
    """The fixes' prose has the width of the terminal beside their gain, with each location on a line of its own,
    so the fix text is not squeezed into a few letters a line beside a wide location column (it was 6 letters wide
    at 80 columns on this trace, then 17 in a five-column table)."""
    import io

    from rich.console import Console

    from stepscope import analyze
    from stepscope.report import render

    r = analyze(H100 / "r4_runs" / "sync_bound" / "trace.json.gz")
    console = Console(file=io.StringIO(), width=80, record=True)
    console.print(render("terminal", r))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    table = text[text.index("Recommendations"):text.index("Step-time breakdown")]
    first = next(line for line in table.splitlines() if re.match(r"^1\. ", line))
    assert re.match(r"^1\. ~[\d.]+x [A-Z][a-z]+ (?:[a-z]+ ){3}", first), first  # the title's words fit a line
    # examples/pattern_sync_bound.py:54 is the DataLoader loop and :70 the .item() of the sync fix
    where = re.compile(r"at examples/pattern_sync_bound\.py:\d+ \(main\)")
    located = [line for line in table.splitlines() if where.search(line)]
    assert {re.search(r"\.py:(\d+)", line).group(1) for line in located} >= {"54", "70"}  # type: ignore[union-attr]
