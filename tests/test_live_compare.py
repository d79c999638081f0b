"""live.compare on hand-built reports: which line changes are beyond the runs' noise (hand-computed
thresholds), the fixed threshold without per-step figures, phases and verdicts."""

from __future__ import annotations

import math
from types import SimpleNamespace

import msgspec
import pytest

from stepscope.live.compare import compare, phases_us, run_noise
from stepscope.model import report as s
from stepscope.model.usage import ActivationLine, DeviceMemoryUsage, MemoryUsage
from stepscope.noise import headline_noise
from stepscope.pipeline.batch_sizes import batch_sizes


def line(n: int, fwd: float, bwd: float = 0.0, code: str = "") -> s.LineCost:
    return s.LineCost(file="train.py", line=n, code=code or f"line {n}", label=f"train.py:{n}", cpu_fwd_us=fwd,
                      cpu_bwd_us=bwd, gpu_fwd_us=0.0, gpu_bwd_us=0.0, kernels=0.0, share=0.1)


def report(steps: list[float], lines: list[s.LineCost], *, pattern: str = "python_overhead",
           memory: MemoryUsage | None = None, recs: list[s.Recommendation] | None = None,
           breakdown: dict[str, float] | None = None, samples_per_s: float | None = None) -> s.Report:
    mean = sum(steps) / len(steps)
    device = s.Device(name="CPU", kind="cpu")
    summary = s.Summary(step_time_us=mean, breakdown_us=breakdown or {"cpu_exec": mean * 0.75, "other": mean / 4},
                        gpu_utilization=None, samples_per_s=samples_per_s,
                        steps_per_s=1e6 / mean if samples_per_s else None, step_count=len(steps),
                        batch_size=round(samples_per_s * mean / 1e6) if samples_per_s else None,
                        noise=headline_noise(None, steps))
    return s.Report(
        source=s.Source(paths=["t"], format="live"), device=device,
        steps=[s.StepRow(id=str(i), duration_us=d, breakdown_us={}, gpu_utilization=None) for i, d in enumerate(steps)],
        summary=summary,
        patterns=[s.Pattern(id=pattern, share=0.9, evidence={}, title=pattern)],
        lines=s.Lines(source="stepscope annotations", granularity="line", attributed_share=1.0, rows=lines),
        memory_usage=memory, recommendations=recs or [],
        batch_sizes=batch_sizes(summary, recs or [], memory, device))  # as the pipeline computes it


def test_line_changes_against_hand_computed_noise() -> None:
    # Steps 90, 100, 110 in both runs (no meter: the recorded steps): median 100, median absolute deviation 10; the
    # standard error of a mean of 3 steps is 1.4826 x 10 / 100 / sqrt 3 of the value, per run; two runs combined,
    # times Z = 2, on the log scale: a change is real when the smaller value is under the larger x e^-(that), about
    # 0.785.
    rel = 1.4826 * 10 / 100 / math.sqrt(3)
    threshold = 1 - math.exp(-2 * math.hypot(rel, rel))
    before = report([90, 100, 110], [line(10, 100, 50), line(11, 100), line(12, 40)])
    after = report([110, 90, 100], [line(10, 200, 50), line(11, 105), line(13, 30)], pattern="cpu_compute_bound")
    c = compare(after, before, before)
    assert c.noise.basis == "recorded steps" and c.noise.relative == pytest.approx(rel, abs=5e-5)  # to 4 places
    by = {d.line: d for d in c.lines}
    fwd10 = by[10].since_previous["forward_us"]
    assert (fwd10.before, fwd10.after, fwd10.delta) == (100, 200, 100)
    assert fwd10.threshold == pytest.approx(threshold * 200, rel=5e-3) and fwd10.beyond_noise  # 100 > 43.0
    assert not by[10].since_previous["backward_us"].beyond_noise  # 50 -> 50
    fwd11 = by[11].since_previous["forward_us"]
    assert fwd11.threshold == pytest.approx(threshold * 105, rel=5e-3) and not fwd11.beyond_noise  # 5 < 22.6
    assert by[12].now is None and by[12].since_previous == {}  # gone
    assert by[13].previous is None and by[13].now is not None  # new
    assert c.lines[0].line == 10  # the change beyond noise comes first
    assert (c.verdict_previous.pattern, c.verdict_now.pattern) == ("python_overhead", "cpu_compute_bound")
    assert c.step["previous"].delta == pytest.approx(0.0) and not c.step["previous"].beyond_noise
    assert c.diff_previous is not None and c.diff_previous.step_time_ratio == pytest.approx(1.0)
    assert c.phase_source == "breakdown" and {p.name for p in c.phases} == {"cpu_exec", "other"}


def test_fixed_threshold_without_per_step_figures() -> None:
    # Two steps per run: too few for a spread, so a ratio within e^0.1 stands in for the two runs together: the
    # smaller value above the larger x e^-0.1 (0.905) is noise.
    before = report([100, 100], [line(10, 100), line(11, 100)])
    after = report([100, 100], [line(10, 109), line(11, 112)])
    c = compare(after, before, None)
    assert c.noise.basis == "fixed"
    by = {d.line: d for d in c.lines}
    assert by[10].since_previous["forward_us"].threshold == pytest.approx(109 * (1 - math.exp(-0.1)))
    assert not by[10].since_previous["forward_us"].beyond_noise  # 9 < 10.37
    assert by[11].since_previous["forward_us"].beyond_noise  # 12 > 10.66
    assert by[10].since_baseline == {} and c.diff_baseline is None


def test_first_run_has_nothing_to_compare() -> None:
    c = compare(report([90, 100, 110], [line(10, 100)]), None, None)
    assert c.step == {} and all(d.since_previous == {} and d.since_baseline == {} for d in c.lines)
    assert c.verdict_previous is None


def test_line_memory_from_activation_lines() -> None:
    def usage(nbytes: int) -> MemoryUsage:
        act = [ActivationLine(file="train.py", line=10, label="train.py:10", op="aten::addmm", bytes=nbytes),
               ActivationLine(file="train.py", line=10, label="train.py:10", op="aten::relu", bytes=nbytes)]
        return MemoryUsage(devices=[DeviceMemoryUsage(device=-1, peak_allocated_bytes=10 * nbytes,
                                                      peak_reserved_bytes=None, reserved_gap_bytes=None,
                                                      phase="forward", peak_step="1", categories=[],
                                                      activation_lines=act)])

    before = report([90, 100, 110], [line(10, 100), line(11, 5)], memory=usage(4096))
    after = report([90, 100, 110], [line(10, 100), line(11, 5)], memory=usage(65536))
    by = {d.line: d for d in compare(after, before, None).lines}
    assert by[10].now.memory_bytes == 2 * 65536 and by[10].previous.memory_bytes == 2 * 4096
    assert by[10].since_previous["memory_bytes"].beyond_noise
    assert by[11].now.memory_bytes == 0


def test_the_step_meters_section_gives_the_phases() -> None:
    # A report written with the step meter (its `meter` section; read by attribute): its phases replace the breakdown.
    phases = [SimpleNamespace(name="forward", mean_us=40.0, share=0.4),
              SimpleNamespace(name="other", mean_us=60.0, share=0.6)]
    metered = SimpleNamespace(meter=SimpleNamespace(phases=phases), summary=SimpleNamespace(breakdown_us={"x": 1.0}))
    assert phases_us(metered) == ("meter", {"forward": 40.0, "other": 60.0})  # type: ignore[arg-type]


def test_the_meters_steps_are_the_noise_even_where_the_recorded_steps_are_wider() -> None:
    # Issue 40: watch judged the step on the recorded (profiled) steps' spread, +-28-59%, beside a meter that measured
    # every step unprofiled. Meter steps 95, 100, 105, 100 x 4 (16 steps: median absolute deviation 2.5 -> a
    # standard deviation of 3.7 µs, 0.93% for a mean of 16: taken as 2%, the floor; p10 95, p90 105: a spread of
    # 5%); recorded steps 50, 100, 300 are not looked at.
    meter_steps = [95.0, 100.0, 105.0, 100.0] * 4
    ref = s.Reference(method="step meter", step_us=100.0, values_us=meter_steps, steps=16, noise=0.05)
    noise = headline_noise(ref, [50.0, 100.0, 300.0])
    assert noise is not None and noise.basis == "meter steps" and noise.steps == 16
    assert noise.relative == pytest.approx(0.02) and noise.spread == pytest.approx(0.05)
    r = report([50, 100, 300], [line(10, 100)])
    metered = msgspec.structs.replace(r, summary=msgspec.structs.replace(r.summary, noise=noise))
    assert run_noise(metered).basis == "meter steps" and run_noise(metered).relative == pytest.approx(0.02)
    # The same doubled step is beyond the meter's noise and within the recorded steps' (ratio 2 < e^(2 x 0.52 x 1.41)).
    doubled = msgspec.structs.replace(metered, summary=msgspec.structs.replace(
        metered.summary, step_time_us=2 * metered.summary.step_time_us))
    assert compare(doubled, metered, None).step["previous"].beyond_noise
    assert not compare(msgspec.structs.replace(doubled, summary=msgspec.structs.replace(doubled.summary,
                                                                                        noise=r.summary.noise)),
                       r, None).step["previous"].beyond_noise
    # Fewer than 3 steps: no noise can be said, and the fixed one stands in.
    assert headline_noise(None, [100.0, 101.0]) is None and run_noise(report([100, 101], [])).basis == "fixed"


def test_noisy_runs_still_show_a_large_ratio() -> None:
    # Two real runs on a loaded 2-core machine (tests/test_watch_terminal.py, before and after widening a layer),
    # without a meter: recorded steps 3456, 574, 1621 µs (1.4826 x MAD 1046.6 / 1621 / sqrt 3 = 55%) and 14480,
    # 2970, 16286 (1.4826 x 1806.5 / 14480 / sqrt 3 = 10.7%). Combined x 2: 1.13 on the log scale, a ratio of 3.1.
    # The widened line went from 72.8 to 2868.8 µs (39x): real; another from 114 to 56 µs (0.49x): within noise.
    before = report([3456.486, 574.432, 1621.032], [line(15, 72.794), line(18, 114.098)])
    after = report([14479.722, 2970.068, 16286.202], [line(15, 2868.847), line(18, 56.428)])
    assert run_noise(before).relative == pytest.approx(1.4826 * (1621.032 - 574.432) / 1621.032 / math.sqrt(3),
                                                       abs=5e-5)
    by = {d.line: d for d in compare(after, before, None).lines}
    assert by[15].since_previous["forward_us"].beyond_noise
    assert not by[18].since_previous["forward_us"].beyond_noise
