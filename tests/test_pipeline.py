"""The one road from a source to a Report: built once, in pipeline/assemble.py, and never changed after; each
figure computed in one place; a run folder's reference and calibration handed to the replay's seam."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import msgspec
import pytest

import builder as sc
from conftest import kineto_trace
from stepscope.capture.calibrate import ProfilerCost
from stepscope.model import ranks, report, run, telemetry, usage
from stepscope.model.report import Reference, Report, Run, to_json
from stepscope.model.telemetry import GpuWindow, WindowSummary
from stepscope.pipeline import AnalyzeOptions, analyze, assemble, flow
from stepscope.pipeline.timeline import Timeline
from stepscope.predict import PredictRequest
from stepscope.ranks.engines import InProcess
from stepscope.trace.model import Trace
from stepscope.units import report_us

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "stepscope"
DATA = Path(__file__).parent / "data"
H100 = DATA / "gpu_h100"


def _live_run(folder: Path | None = None, *, step_us: float = 40_000.0) -> Run:
    return Run(command=["python", "train.py"], status="window recorded", exit_code=0, step_source="optimizer",
               skip=5, warmup=2, steps_requested=5, steps_recorded=5, first_recorded_step=7, batch_size=8,
               batch_size_source="user", profiled_device="cuda", profiler_overhead=None,
               unprofiled_step_us=step_us, recorded_step_us=None,
               telemetry=WindowSummary(start_s=1.0, end_s=2.0, samples=5, cpu_util_mean=None, cpu_util_per_core=None,
                                       gpu=[GpuWindow(index=0, name="NVIDIA H100 80GB HBM3", util_mean=None,
                                                      mem_util_mean=None, mem_used_max_bytes=None, power_mean_w=200.0,
                                                      sm_clock_mean_mhz=None, energy_j=None)]),
               folder=str(folder) if folder is not None else None,
               reference=Reference(method="synchronized slices", step_us=step_us, values_us=[step_us], steps=30,
                                   noise=0.02))


def test_every_part_of_a_report_is_frozen(tmp_path: Path) -> None:
    structs = [c for m in (report, run, usage, ranks, telemetry) for _, c in inspect.getmembers(m, inspect.isclass)
               if issubclass(c, msgspec.Struct) and c.__module__ == m.__name__]
    assert len(structs) > 40
    assert [c.__name__ for c in structs if not c.__struct_config__.frozen] == []
    built = analyze(sc.input_bound_trace().write(tmp_path / "t.json"))
    with pytest.raises(AttributeError):
        built.notes = []  # type: ignore[misc]
    with pytest.raises(AttributeError):
        built.patterns[0].title = "changed"  # type: ignore[misc]


def _calls_named(path: Path, name: str) -> list[int]:
    return [node.lineno for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
            and (getattr(node.func, "id", None) == name or getattr(node.func, "attr", None) == name)]


def test_only_the_assembly_builds_a_report() -> None:
    """A Report is made in one module: every `Report(...)` call in the package is in pipeline/assemble.py."""
    where = {str(p.relative_to(PACKAGE)): lines for p in PACKAGE.rglob("*.py")
             if (lines := _calls_named(p, "Report"))}
    assert set(where) == {"pipeline/assemble.py"}, where


def test_the_pipeline_is_entered_through_analyze_alone() -> None:
    """Outside the pipeline, modules take `analyze` and `AnalyzeOptions` (and the step meter's own summary,
    `meter_section`) from it, never its inner steps."""
    bad = []
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "pipeline":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("stepscope.pipeline"):
                names = {a.name for a in node.names}
                if node.module != "stepscope.pipeline" or not names <= {"analyze", "AnalyzeOptions", "meter_section"}:
                    bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.module} {sorted(names)}")
    assert not bad, bad


@pytest.fixture
def assembled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Report, bytes]]:
    """Every Report the assembly builds, with its JSON at that moment."""
    made: list[tuple[Report, bytes]] = []
    for name in ("report", "job"):
        original = getattr(assemble, name)

        def record(*args: object, _original=original, **kwargs: object) -> Report:
            built = _original(*args, **kwargs)
            made.append((built, to_json(built)))
            return built

        monkeypatch.setattr(assemble, name, record)
    return made


def test_a_live_report_is_the_one_the_assembly_built(assembled: list[tuple[Report, bytes]]) -> None:
    """A live capture's report (run section, the capture's notes first, the overhead and energy filled in):
    what comes back is the assembled object, unchanged since, and the caller's run section is untouched."""
    live = _live_run()
    options = AnalyzeOptions(batch_size=8, run=live, capture_notes=("the capture said this",))
    got = analyze(H100 / "launch_bound" / "trace.json.gz", options)
    built, doc = assembled[-1]
    assert got is built and to_json(got) == doc
    assert got.notes[0] == "the capture said this"
    assert got.run is not None and got.run.overhead_correction is not None
    [energy] = got.run.energy_per_step
    assert energy.joules == round(200.0 * 40_000e-6, 4)  # 200 W x 40 ms
    assert live.energy_per_step == [] and live.overhead_correction is None


def test_a_job_of_ranks_is_built_once_from_its_main_rank(assembled: list[tuple[Report, bytes]]) -> None:
    got = analyze(kineto_trace("two_rank_job"), engine=InProcess())
    assert len(assembled) == 3  # the two chosen ranks' reports, then the job's
    built, doc = assembled[-1]
    assert got is built and to_json(got) == doc
    [main] = [r for r, _ in assembled[:2] if r.rank == got.rank]
    assert got.patterns == main.patterns and got.steps == main.steps
    assert len(got.ranks) == 2 and not main.ranks and main.cross_rank is None and len(main.source.paths) == 1


def test_gpu_utilisation_is_one_figure_everywhere(assembled: list[tuple[Report, bytes]]) -> None:
    """The summary, the main rank's row and its per-device row are the same figure (DESIGN.md: kernel time on the
    busiest device over the total step time), rounded alike."""
    got = analyze(kineto_trace("two_rank_job"), engine=InProcess())
    [row] = [r for r in got.ranks if r.rank == got.rank]
    assert got.summary.gpu_utilization is not None
    assert row.gpu_utilization == got.summary.gpu_utilization
    assert got.gpu is not None and got.summary.gpu_utilization in {d.utilization for d in got.gpu.devices}


def test_the_prediction_reads_the_same_utilisation() -> None:
    got = analyze(H100 / "big_matmul" / "trace.json.gz", predict=_request())
    assert got.prediction is not None
    assert got.prediction.origin.gpu_utilization == got.summary.gpu_utilization


def _request() -> PredictRequest:
    return PredictRequest(gpus=("h200",))


def test_report_microseconds_have_three_decimals() -> None:
    assert report_us(1_234_567) == 1234.567 and report_us(1_234_567.8) == 1234.568 and report_us(999) == 0.999


def _seen_by_the_replay(monkeypatch: pytest.MonkeyPatch) -> list[AnalyzeOptions]:
    seen: list[AnalyzeOptions] = []
    original = flow.timeline_facts

    def spy(trace: Trace, options: AnalyzeOptions) -> Timeline:
        seen.append(options)
        return original(trace, options)

    monkeypatch.setattr(flow, "timeline_facts", spy)
    return seen


def test_a_run_folder_hands_its_reference_and_calibration_to_the_replay(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "trace.json.gz").write_bytes((H100 / "launch_bound" / "trace.json.gz").read_bytes())
    saved = analyze(folder / "trace.json.gz", run=_live_run(folder))
    (folder / "report.json").write_bytes(to_json(saved))
    cost = ProfilerCost(op_ns=4000.0, alloc_ns=300.0, launch_ns=2500.0, range_ns=900.0, record_shapes=True,
                        profile_memory=True, with_stack=False, cuda=True, seconds=0.4)
    (folder / "calibration.json").write_text(json.dumps(cost.to_dict()))
    seen = _seen_by_the_replay(monkeypatch)
    again = analyze(folder)
    assert seen[-1].reference == saved.run.reference  # type: ignore[union-attr]
    assert seen[-1].calibration == cost
    assert again.summary.samples_per_s is not None  # the run's samples per step (8), as `analyze FOLDER` reads it
    assert again.run is None  # analysed as recorded: the run section is the live capture's alone

    analyze(H100 / "launch_bound" / "trace.json.gz", run=_live_run(folder))  # a live capture, as runreport does
    assert seen[-1].calibration == cost and seen[-1].reference == _live_run().reference


def test_without_a_run_the_replay_gets_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _seen_by_the_replay(monkeypatch)
    analyze(H100 / "launch_bound" / "trace.json.gz")
    assert seen[-1].reference is None and seen[-1].calibration is None
