"""`stepscope.tune/1`: the contract's fields, the JSON round trip, and the terminal and HTML renderings of a tune."""

from __future__ import annotations

import io
import json

import msgspec
import pytest
from rich.console import Console

from stepscope.model.tune import (
    TUNE_SCHEMA,
    Baseline,
    FinalRecommendation,
    Measurement,
    NotTried,
    Numerics,
    PatternShare,
    Trial,
    TrialRun,
    Tune,
    TuneDevice,
    WindowStat,
    tune_from_json,
    tune_to_json,
)
from stepscope.report.pages import TuneHtmlRenderer
from stepscope.report.tune import TuneTerminalRenderer, ladder_table

# The fields issue 12 gives for stepscope.tune/1: a document must carry at least these (more may be added).
CONTRACT = {
    "top": {"schema", "command", "device", "baseline", "trials", "applied", "speedup", "final_patterns", "patch",
            "not_tried", "speedup_interval", "final_samples_per_s", "min_gain", "final_recommendations"},
    "baseline": {"step_time_us", "steps_per_s", "samples_per_s", "spread", "runs", "patterns"},
    "trial": {"fixes", "params", "step_time_us", "steps_per_s", "samples_per_s", "speedup", "spread",
              "estimated_speedup", "accepted", "reason", "numerics", "compile_s", "exit_code",
              # issue 22: each trial's interval and the windows it was measured on
              "interval", "confidence", "windows", "runs", "decision"},
    "run": {"arm", "rate", "windows"},
    "window": {"samples", "seconds", "steps"},
    "numerics": {"ok", "max_rel_loss_diff"},
    "not_tried": {"id", "reason"},
}


def windows(ms: float) -> list[WindowStat]:
    return [WindowStat(samples=320, seconds=ms / 100, steps=10) for _ in range(3)]


def measured(ms: float) -> Measurement:
    return Measurement(step_time_us=ms * 1e3, steps_per_s=1e3 / ms, samples_per_s=32e3 / ms, spread=0.05, steps=30,
                       batch_size=32, windows=windows(ms))


def sample_tune() -> Tune:
    trial = Trial(fixes=["dataloader_workers"], params={"dataloader_workers": {"num_workers": 4}},
                  step_time_us=20_000.0, steps_per_s=50.0, samples_per_s=1600.0, speedup=2.5, spread=0.04,
                  estimated_speedup=2.13, accepted=True, reason="faster: 2.50x (2.30-2.70, 6 windows)",
                  numerics=None, compile_s=None, exit_code=0, rung=1, tried=["dataloader_workers"], gain=2.5,
                  estimated_samples_per_s=1363.2, interval=[2.3, 2.7], confidence=0.95, windows=6, decision="keep",
                  paired_rate=1600.0, paired_reference_rate=640.0,  # its runs below: 1600 against 640 around each
                  runs=[TrialRun(arm=arm, rate=r, windows=windows(32e3 / r * 1e3 / 32)) for arm, r in
                        (("reference", 640.0), ("candidate", 1600.0), ("reference", 640.0), ("candidate", 1600.0))])
    broken = Trial(fixes=["<script>alert(1)</script>", "dataloader_workers"], params={}, step_time_us=None,
                   steps_per_s=None, samples_per_s=None, speedup=None, spread=None, estimated_speedup=None,
                   accepted=False, reason="the program raised RuntimeError: <b>boom</b>",
                   numerics=Numerics(ok=False, max_rel_loss_diff=None), compile_s=None, exit_code=1, rung=2,
                   tried=["<script>alert(1)</script>"], builds_on=1, status="crashed")
    return Tune(command=["train.py", "--lr", "0.1"], device=TuneDevice(kind="cpu", name="x86_64", cpu_cores=2,
                                                                          torch="2.13.0"),
                baseline=Baseline(step_time_us=50_000.0, steps_per_s=20.0, samples_per_s=640.0, spread=0.05,
                                  runs=[measured(50), measured(51)],
                                  patterns=[PatternShare(id="input_bound", share=0.6)], drift=0.02),
                trials=[trial, broken], applied=["dataloader_workers"], speedup=2.5, speedup_interval=[2.3, 2.7],
                speedup_windows=6, final_samples_per_s=1600.0, final_steps_per_s=50.0, min_gain=0.05,
                final_paired_rate=1600.0, final_paired_baseline_rate=640.0,
                final_recommendations=[FinalRecommendation(id="amp", title="bf16", estimated_speedup=1.31)],
                final_patterns=[PatternShare(id="cpu_compute_bound", share=0.7)], patch="suggested.patch",
                not_tried=[NotTried(id="remove_sync", reason="needs a code change", suggestion="no .item() per step")])


def test_a_tune_document_carries_every_field_of_the_contract() -> None:
    doc = json.loads(tune_to_json(sample_tune()))
    assert doc["schema"] == TUNE_SCHEMA == "stepscope.tune/1"
    assert CONTRACT["top"] <= set(doc)
    assert CONTRACT["baseline"] <= set(doc["baseline"])
    assert all(CONTRACT["trial"] <= set(t) for t in doc["trials"])
    assert CONTRACT["numerics"] <= set(doc["trials"][1]["numerics"])
    assert CONTRACT["not_tried"] <= set(doc["not_tried"][0])
    run = doc["trials"][0]["runs"][1]
    assert CONTRACT["run"] <= set(run) and CONTRACT["window"] <= set(run["windows"][0])


def test_round_trip_and_refusal_of_other_schemas() -> None:
    tune = sample_tune()
    # The sample's crashed rung names a hostile fix id, to check the page escapes it: not a FixId, so a tune.json
    # holding it is refused on decode, at its place.
    with pytest.raises(msgspec.ValidationError, match=r"Invalid enum value .* at `\$\.trials\[1\]\.fixes\[0\]`"):
        tune_from_json(tune_to_json(tune))
    broken = msgspec.structs.replace(tune.trials[1], fixes=["amp", "dataloader_workers"], tried=["amp"])
    tune = msgspec.structs.replace(tune, trials=[tune.trials[0], broken])
    assert tune_from_json(tune_to_json(tune)) == tune
    with pytest.raises(ValueError, match="unsupported schema"):
        tune_from_json(tune_to_json(msgspec.structs.replace(tune, schema="stepscope.tune/9")))


def test_the_ladder_table_rows() -> None:
    table = ladder_table(sample_tune())
    rows = [[c.text for c in row] for row in table.rows]
    assert rows[0][:6] == ["0", "baseline (as written)", "640.0", "", "", "1.00x"]
    assert rows[0][8] == "2 runs, 6 windows, first and last 2.0% apart"
    # 1600 / 640 = 2.50: the rate, the rung's rate in the same runs, their ratio, and 1.00x times it.
    assert rows[1] == ["1", "+ dataloader_workers (num_workers=4)", "1,600.0", "640.0 on 0", "2.50x", "2.50x",
                       "~2.13x", "kept", "faster: 2.50x (2.30-2.70, 6 windows)"]
    assert rows[2][2:8] == ["-", "", "", "-", "-", "no"] and "RuntimeError" in rows[2][8]


def test_terminal_rendering() -> None:
    buffer = io.StringIO()
    Console(file=buffer, width=160, color_system=None).print(TuneTerminalRenderer().render(sample_tune()))
    text = buffer.getvalue()
    assert ("tuned: 2.50x (2.30-2.70, 6 windows) measured against the program as it is, keeping dataloader_workers"
            in text)
    assert "throughput: 640.0 -> 1,600.0 samples/s (the program as it is and tuned, in alternating runs" in text
    assert "next: amp ~1.31x" in text
    assert "now: cpu_compute_bound 70%" in text and "remove_sync" in text and "suggested.patch" in text


def test_the_patch_line_gives_the_recorded_commands_and_never_a_generic_one() -> None:
    """The finding: `git apply` or `patch -p1` was printed while the patch needed `patch -p0` from /."""
    commands = ["git -C /code apply /runs/out/suggested.patch", "patch -p1 -d /code < out/suggested.patch"]
    recorded = msgspec.structs.replace(sample_tune(), patch_apply=commands, patch_apply_in="/runs")
    for tune, wanted in ((recorded, [*commands, "in /runs"]), (sample_tune(), ["the command in its header"])):
        buffer = io.StringIO()
        Console(file=buffer, width=400, color_system=None).print(TuneTerminalRenderer().render(tune))
        line = next(x for x in buffer.getvalue().splitlines() if x.startswith("patch: suggested.patch"))
        assert all(w in line for w in wanted), line
        assert line.count("`") == 2 * len(tune.patch_apply)


def test_html_page_escapes_what_came_from_the_program() -> None:
    page = TuneHtmlRenderer(patch_text="--- a/x.py\n+<img src=x>").render(sample_tune()).decode()
    assert page.lower().startswith("<!doctype html>") and 'id="fig-ladder"' in page
    assert "<script>alert(1)</script>" not in page and "<b>boom</b>" not in page and "<img src=x>" not in page
    assert "&lt;b&gt;boom&lt;/b&gt;" in page and "2.50x faster, measured" in page
    figures = json.loads(page.split('id="stepscope-figures">')[1].split("</script>")[0])
    bars = {b["name"]: b for b in figures["fig-ladder"]["data"]}
    # One bar trace per outcome, so that the legend names each colour: rung 1 kept, rung 2 crashed.
    assert list(bars) == ["measured: baseline", "measured: kept", "measured: failed", "estimated before the rung ran"]
    assert bars["measured: baseline"]["y"] == [640.0] and bars["measured: kept"]["y"] == [1600.0]
    assert bars["estimated before the rung ran"]["y"][:2] == [None, 1363.2]


def test_the_live_view_shows_the_table_the_current_trial_and_the_budget(tmp_path) -> None:
    from stepscope.commands.tune import _View

    buffer = io.StringIO()
    console = Console(file=buffer, width=160, force_terminal=True, color_system=None)
    with _View(console, tmp_path, budget_s=600.0) as view:
        view.phase("trial 2: amp dtype=bfloat16")
        view.changed(sample_tune())
        frame = io.StringIO()
        Console(file=frame, width=160, color_system=None).print(view._render())
    text = frame.getvalue()
    assert "trial 2: amp dtype=bfloat16" in text and "elapsed" in text and "budget left " in text
    assert "+ dataloader_workers (num_workers=4)" in text
    assert json.loads((tmp_path / "tune.json").read_text())["applied"] == ["dataloader_workers"]  # saved as it goes
