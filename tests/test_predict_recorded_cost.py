"""A recorded trace carries the profiler's own host cost; predict takes out what replay/recorded.py decides (the one
decision the advice's device-side what-ifs take out too), from the origin's step and every target's alike: else a
host the profiler slowed caps a faster GPU's step (issue 40, item 3: advise and predict treat one recorded trace
alike).

The program is built twice, as it runs and as the profiler records it (the default cost planted on every op, launch
and range, as in test_recorded_profiler_cost.py), on a V100 and predicted on a GPU with twice its FP32 peak (a row
added through the user's hardware file). Its figures are worked out by hand below."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from builder import SGEMM, V100, scenario
from stepscope.analysis.facts import compute_facts
from stepscope.capture.calibrate import ProfilerCost
from stepscope.model.report import Reference
from stepscope.pipeline import analyze
from stepscope.predict import PredictRequest, predict
from stepscope.replay.host_clock import RECORDED_DEFAULT
from stepscope.trace.load import read_trace

PREP_US, GEMMS, KERNEL_US, OVERHEAD_US, LAUNCH_US = 200.0, 100, 10.0, 1.0, 5.5
OWN_US = 2 * OVERHEAD_US + LAUNCH_US  # the program's host time per GEMM: 7.5 µs
COST_US = (RECORDED_DEFAULT.op_ns + RECORDED_DEFAULT.launch_ns) / 1e3  # what the profiler adds to each: 5.96 µs
FLOOR_US = 1.5  # predict/scaling.FLOOR_NS: the part of a kernel no roof shortens
FAST_KERNEL_US = FLOOR_US + (KERNEL_US - FLOOR_US) / 2  # an FP32 GEMM on twice the FP32 peak: 5.75 µs
SYNC_US = 2.0  # the builder's sync returns 2 µs after the GPU is done
DATA = Path(__file__).parent / "data"


def program(path: Path, profiled: bool) -> Path:
    """Each step: 200 µs of host work that launches nothing, 100 fp32 GEMMs of 10 µs (7.5 µs of host each), a sync.
    Plain, the V100 bounds the step (10 > 7.5 µs a GEMM); as recorded, the profiler's host does (7.5 + 5.96 > 10)."""
    b, tl = scenario(**V100)
    if profiled:
        tl.cost = {"op": RECORDED_DEFAULT.op_ns / 1e3, "launch": RECORDED_DEFAULT.launch_ns / 1e3,
                   "range": RECORDED_DEFAULT.range_ns / 1e3}
    for i in range(5):
        with tl.step(i):
            tl.cpu("aten::randn", PREP_US)
            for _ in range(GEMMS):
                with tl.op("aten::mm", overhead=OVERHEAD_US):
                    tl.kernel(SGEMM, KERNEL_US, host_us=LAUNCH_US)
            tl.sync()
    return b.write(path)


@pytest.fixture
def twice_the_v100(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A GPU row like the V100's with twice its FP32 peak and no published roofline bias (so the ratio is 2 exactly)."""
    row = {"id": "v100-2x", "name": "V100 at twice the FP32 peak", "vendor": "nvidia", "architecture": "Volta",
           "match": ["^v100-2x$"], "peak_tflops": {"fp32": {"dense": 2 * 15.7}}, "memory_gb": {"value": 32},
           "memory_bandwidth_gbs": {"value": 900}, "sm_count": {"value": 80}, "boost_clock_mhz": {"value": 1530},
           "tdp_w": {"value": 300}, "links": {"value": ["nvlink2", "pcie3"]}}
    file = tmp_path / "hardware.json"
    file.write_text(json.dumps({"gpus": [row]}))
    monkeypatch.setenv("STEPSCOPE_HARDWARE_FILE", str(file))
    monkeypatch.setenv("STEPSCOPE_CACHE_DIR", str(tmp_path / "cache"))  # no achievable rates measured here
    return "v100-2x"


def test_a_recorded_trace_is_predicted_without_the_profilers_host_cost(tmp_path: Path, twice_the_v100: str) -> None:
    recorded = program(tmp_path / "recorded.json", profiled=True)
    # As recorded, a GEMM's host is 3.46 µs longer than its kernel: more than the 2 µs gap the replay keeps between two
    # kernels on a stream, so the recorded gaps are the host's, not the device's.
    assert OWN_US < KERNEL_US and OWN_US + COST_US > KERNEL_US + 2 and FAST_KERNEL_US < OWN_US
    report = analyze(recorded, predict=PredictRequest(gpus=(twice_the_v100,)))
    p = report.prediction
    assert p is not None
    target = p.targets[0]
    # The program itself: on the V100 the GEMMs bound the step (the first one's launch, 100 x 10 µs, the sync's
    # 2 µs after the last); on the 2x GPU its host does: the last launch returns after 99 x 7.5 µs + 6.5, its
    # 5.75 µs kernel, the sync.
    truth_origin = PREP_US + OVERHEAD_US + LAUNCH_US + GEMMS * KERNEL_US + SYNC_US
    truth_target = PREP_US + (GEMMS - 1) * OWN_US + OVERHEAD_US + LAUNCH_US + FAST_KERNEL_US + SYNC_US
    assert p.origin.step_time_us == pytest.approx(truth_origin, rel=0.03)
    assert target.step_time_us == pytest.approx(truth_target, rel=0.03)
    assert p.origin.step_time_us / target.step_time_us == pytest.approx(truth_origin / truth_target, rel=0.03)
    said = [a for a in target.assumptions if "profiler's host cost taken out" in a]
    assert said and "origin's step and the target's alike" in said[0] and "default per event" in said[0]
    assert "less the profiler's host cost" in p.model
    # As recorded (13.46 µs of host a GEMM) the profiler's host bounds both GPUs: the report's step, and a 2x GPU
    # that looks no faster (1.00x against the program's 1.26x) when the cost stays in.
    as_recorded = PREP_US + GEMMS * (OWN_US + COST_US)
    assert report.summary.step_time_us == pytest.approx(as_recorded, rel=0.03)
    kept = predict(compute_facts(read_trace(recorded)), PredictRequest(gpus=(twice_the_v100,)), recorded=False)
    assert kept.targets[0].step_time_us == pytest.approx(as_recorded, rel=0.03)
    assert kept.origin.step_time_us / kept.targets[0].step_time_us < 1.01
    assert abs(kept.targets[0].step_time_us / truth_target - 1) > 0.5


def test_a_live_captures_timeline_is_predicted_as_it_was() -> None:
    """A live capture's timing trace with its calibration and unprofiled reference: the timeline is de-perturbed
    already (replay/deperturb.py), and predict takes nothing more out of it."""
    folder = DATA / "gpu_h100_live" / "r7_copy_bound"
    ref = json.loads((folder / "run.json").read_text())["run"]["reference"]
    reference = Reference(method=ref["method"], step_us=ref["step_us"], values_us=ref["values_us"], steps=ref["steps"],
                          noise=ref["noise"])
    calibration = msgspec.convert(json.loads((folder / "calibration.json").read_text()), ProfilerCost)
    report = analyze(folder / "timing.json.gz", predict=PredictRequest(gpus=("h200",)), reference=reference,
                     calibration=calibration)
    assert report.replay is not None and report.replay.replayed
    p = report.prediction
    assert p is not None and "less the profiler's host cost" not in p.model
    assert not any("profiler's host cost taken out" in a for t in p.targets for a in t.assumptions)
