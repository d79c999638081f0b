"""One story at the end of a tune: the final diagnosis never recommends a fix the ladder kept or measured as no gain
(it says what was measured instead), and its unprofiled figure is the tune's own measurement of the tuned
configuration, so the tune's headline and the final report agree on samples/s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepscope.model.report import Recommendation, Report, Source, Summary
from stepscope.model.tune import Trial, Tune
from stepscope.tune.story import final_recommendations, ladder_entries, settled_by
from stepscope.tune.wire import LadderEntry, ReferenceWindows, TrialSpec

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WALK = Path(__file__).parent / "data" / "gpu_h100_r5" / "walk_w0" / "trace_default.json.gz"


def trial(rung: int, tried: list[str], decision: str, gain: float | None, accepted: bool, reason: str = "",
          interval: bool = True) -> Trial:
    return Trial(fixes=tried, params={}, step_time_us=None, steps_per_s=None, samples_per_s=None, speedup=None,
                 spread=None, estimated_speedup=None, accepted=accepted, reason=reason, numerics=None,
                 compile_s=None, exit_code=0, rung=rung, tried=tried, gain=gain, decision=decision,  # type: ignore
                 interval=[gain - 0.05, gain + 0.05] if gain and interval else None, windows=6 if interval else 1)


def test_the_ladder_as_the_final_diagnosis_is_told_it() -> None:
    tune = Tune(command=["x.py"], device=None, baseline=None, applied=["dataloader_workers", "amp"], speedup=2.0,
                final_patterns=[], patch=None, not_tried=[], trials=[
                    trial(1, ["dataloader_workers"], "keep", 1.8, True),
                    trial(2, ["larger_batch"], "drop", 1.03, False),
                    trial(3, ["channels_last"], "undecided", 1.04, False),
                    trial(4, ["torch_compile"], "failed", None, False, reason="crashed (exit code 1)"),
                    trial(5, ["amp"], "keep", 1.2, True),
                    trial(6, ["cuda_graphs"], "not applied", None, False,
                          reason="cuda_graphs found nothing to change in this program"),
                    trial(7, ["set_to_none"], "drop", 0.97, False, interval=False)])
    entries = {e.id: e for e in ladder_entries(tune)}
    # Issue 41.7: a fix the ladder could not measure or apply is not recommended again either: said, not repeated.
    assert set(entries) == {"dataloader_workers", "larger_batch", "channels_last", "amp", "torch_compile",
                            "cuda_graphs", "set_to_none"}
    assert entries["larger_batch"] == LadderEntry(id="larger_batch", kept=False,
                                                  text="measured: 1.03x (0.98-1.08, 6 windows), not kept")
    assert entries["torch_compile"] == LadderEntry(id="torch_compile", kept=False,
                                                   text="tried by stepscope tune, not kept: crashed (exit code 1)")
    assert not entries["cuda_graphs"].kept and "found nothing to change" in entries["cuda_graphs"].text
    assert entries["set_to_none"].text == "measured: 0.97x (no interval: 1 window), not kept"  # says why none
    assert entries["amp"].kept and entries["amp"].text == "applied by stepscope tune (1.20x (1.15-1.25, 6 windows))"


def test_a_kept_fix_whose_next_setting_failed_is_told_as_kept() -> None:
    # Workers kept at 2, then 4 workers failed ("too few steps": nothing measured): seen in a tune, where the story
    # formatted the failed trial's missing gain and the tune ended in a TypeError.
    tune = Tune(command=["x.py"], device=None, baseline=None, applied=["dataloader_workers"], speedup=2.0,
                final_patterns=[], patch=None, not_tried=[], trials=[
                    trial(1, ["dataloader_workers"], "keep", 2.34, True),
                    trial(2, ["dataloader_workers"], "", None, False)])
    entries = ladder_entries(tune)
    assert entries == [LadderEntry(id="dataloader_workers", kept=True,
                                   text="applied by stepscope tune (2.34x (2.29-2.39, 6 windows))")]


def test_a_real_diagnosis_repeats_nothing_the_ladder_did() -> None:
    """The H100 diagnosis of the published walk-through loop recommends seven fixes; the ladder kept three of
    them, measured one as no gain, and saw another crash: the rest, and only the rest, are still recommended."""
    from stepscope.pipeline import analyze
    from stepscope.pipeline.options import AnalyzeOptions

    report = analyze(WALK, AnalyzeOptions(batch_size=32))
    before = [r.id for r in report.recommendations]
    assert {"dataloader_workers", "pin_memory", "non_blocking_copy", "torch_compile", "cuda_graphs"} <= set(before)
    ladder = [LadderEntry(id=i, kept=True, text="applied by stepscope tune (2.00x)")
              for i in ("dataloader_workers", "pin_memory", "non_blocking_copy")]
    ladder.append(LadderEntry(id="torch_compile", kept=False, text="measured: 1.03x (0.98-1.08, 6 windows), not kept"))
    told = analyze(WALK, AnalyzeOptions(batch_size=32, settled=settled_by(ladder)))  # assembled without them
    expected = [i for i in before if i not in ("dataloader_workers", "pin_memory", "non_blocking_copy",
                                               "torch_compile")]
    assert [r.id for r in told.recommendations] == expected and "cuda_graphs" in expected
    estimate = next(r.estimated_speedup for r in report.recommendations if r.id == "torch_compile")
    assert told.notes[-1] == f"torch_compile (estimated ~{estimate:.2f}x): measured: 1.03x (0.98-1.08, 6 windows), " \
                             "not kept"
    assert told.notes[:-1] == report.notes  # the rest of the report is the same
    assert [f.id for f in final_recommendations(told, ladder)] == expected


def test_a_recommendation_carried_out_by_another_fix_is_not_repeated() -> None:
    """cpu_bf16 is bfloat16 autocast on a CPU: amp kept, it is done (left out, nothing said: the ladder's notes
    say what was applied)."""
    recs = [Recommendation(id=i, title=i, evidence={}, location=None, estimated_speedup=1.5)
            for i in ("cpu_bf16", "cpu_threads")]
    settled = settled_by([LadderEntry(id="amp", kept=True, text="applied")])
    assert [settled(r) for r in recs] == ["", None]
    report = Report(source=Source(paths=["t"], format="live"), device=None, steps=[],
                    summary=Summary(step_time_us=1.0, breakdown_us={}, gpu_utilization=None), recommendations=recs)
    assert [f.id for f in final_recommendations(report, [LadderEntry(id="amp", kept=True, text="applied")])] == \
        ["cpu_threads"]


def test_the_final_report_takes_the_tunes_figure_and_its_ladder(tmp_path: Path) -> None:
    """The final diagnosis as the tune's child runs it, in this process: an input-bound example, told that the
    ladder measured more workers as no gain and that the tune measured this configuration at 400 samples/s."""
    pytest.importorskip("torch")
    from stepscope.tune.child import run_trial

    ladder = [LadderEntry(id="dataloader_workers", kept=False, text="measured: 1.03x (0.98-1.08, 6 windows), not kept")]
    reference = ReferenceWindows(steps=[10, 10], seconds=[0.5, 0.3], batch_size=32, samples_per_s=400.0)
    spec = TrialSpec(target=str(EXAMPLES / "pattern_input_bound.py"), args=["--steps", "40", "--io-ms", "1.5"],
                     mode="profile", profile_folder=str(tmp_path / "final"), skip=7, ladder=ladder,
                     reference=reference)
    result = run_trial(spec)
    assert result.status == "profiled", result.detail
    report = json.loads((tmp_path / "final" / "report.json").read_text())
    run = report["run"]
    # Its unprofiled figure is the tune's: 32 samples / 400 samples/s = 80 ms a step; per window 50 and 30 ms.
    assert run["unprofiled_step_us"] == 80_000.0 and run["reference"]["values_us"] == [50_000.0, 30_000.0]
    # The skip is the larger of the tune's (7) and the capture's default (10).
    assert run["reference"]["method"] == "stepscope tune: its timed windows" and run["skip"] == 10
    assert report["notes"][0].startswith("stepscope tune measured this configuration unprofiled at 400.0 samples/s")
    # Input bound, with no workers: the diagnosis recommends them, and the ladder's measurement is said instead.
    assert report["patterns"][0]["id"] == "input_bound"
    assert "dataloader_workers" not in [r["id"] for r in report["recommendations"]]
    assert any(n.startswith("dataloader_workers (estimated ~") and n.endswith(
        "measured: 1.03x (0.98-1.08, 6 windows), not kept") for n in report["notes"])
