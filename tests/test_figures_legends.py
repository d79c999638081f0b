"""Every chart explains itself: each colour and line has its legend entry (a group of lines shown as one entry says
how many it stands for), each numeric axis has a title with its unit, a second axis keeps ticks of its own, and
roofs of different dtypes are drawn differently. Read from the figure specs the pages draw, of real runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from stepscope.model.telemetry import telemetry_from_json
from stepscope.pipeline import analyze
from stepscope.report import figures, sections
from test_html_layout_browser import run_report

DATA = Path(__file__).parent / "data"
H100 = DATA / "gpu_h100"


@pytest.fixture(scope="module")
def charts() -> dict[str, dict[str, Any]]:
    from stepscope.compare import compare
    from stepscope.model.tune import tune_from_json
    from stepscope.predict import PredictRequest
    from stepscope.report.pages import diff_figure

    folder = H100 / "r4_runs" / "cifar_rung1"
    run = run_report(folder)
    telemetry = telemetry_from_json((folder / "telemetry.json").read_bytes())
    gpt2 = analyze(DATA / "gpu_h100_r5" / "gpt2_b12" / "trace_default.json.gz")
    predicted = analyze(H100 / "cifar_rung4" / "trace.json.gz", batch_size=128,
                        predict=PredictRequest(gpus=("h200", "l4"), prices={"l4": 0.8}))
    found = {}
    for name, report, tel in (("run", run, telemetry), ("gpt2", gpt2, None), ("predict", predicted, None)):
        for s in sections.build(report, tel, charts=True):
            if s.figure is not None:
                found[f"{name}:{s.id}"] = s.figure
    tune = tune_from_json((H100 / "tune_cifar" / "tune.json").read_bytes())
    found["tune:ladder"] = figures.ladder_figure(tune, "samples/s")
    found["diff:breakdown"] = diff_figure(compare(run, predicted))
    assert {"run:run", "gpt2:utilization", "predict:prediction", "run:breakdown"} <= set(found)
    return found


def test_each_colour_and_line_has_its_legend_entry(charts: dict[str, dict[str, Any]]) -> None:
    for name, fig in charts.items():
        traces = [t for t in fig["data"] if t.get("type") != "heatmap"]  # a heatmap has its colour bar
        for t in traces:
            assert t.get("name"), (name, "a trace without a name")
            color = (t.get("marker") or {}).get("color")
            # A list of colours under one legend entry leaves some colours unexplained (the ladder's kept bars).
            assert not isinstance(color, list), (name, t["name"], "colours its points with a list")
        groups: dict[str, list[dict]] = {}
        for t in traces:
            groups.setdefault(t.get("legendgroup") or id(t), []).append(t)
        for members in groups.values():
            shown = [t for t in members if t.get("showlegend", True)]
            assert shown, (name, members[0]["name"], "lines with no legend entry")
            if len(members) > 1 and len(shown) == 1:  # one entry for many lines says how many
                assert str(len(members)) in re.findall(r"\d+", shown[0]["name"]), (name, shown[0]["name"])


UNITS = re.compile(r"ms|µs|seconds|%|GB|W\b|TFLOP/s|FLOP/byte|samples/s|steps/s|\$")


def test_numeric_axes_have_a_title_with_a_unit(charts: dict[str, dict[str, Any]]) -> None:
    for name, fig in charts.items():
        layout = fig["layout"]
        for key in [k for k in layout if re.fullmatch(r"[xy]axis\d*", k)]:
            axis = layout[key]
            if axis.get("type") == "category" or axis.get("ticktext") or name.endswith(":ranks"):
                continue  # names, not numbers (the heatmap's colour bar carries its unit)
            used = any(t.get(f"{key[0]}axis", key[0]) == key.replace("axis", "") for t in fig["data"])
            if not used and key[-1].isdigit():
                continue
            title = ((axis.get("title") or {}).get("text") or "")
            assert UNITS.search(title), (name, key, title)
            if axis.get("overlaying"):  # plotly's default puts its ticks on the first axis' grid: $0.07, 32.6 W
                assert axis.get("tickmode") not in (None, "sync"), (name, key)


def test_roofs_of_different_dtypes_are_told_apart(charts: dict[str, dict[str, Any]]) -> None:
    roofs = [t for t in charts["gpt2:utilization"]["data"] if "roof" in t["name"]]
    dtype = re.compile(r"\b(fp32|tf32|bf16|fp16|fp8|int8)\b")
    styles = {dtype.search(t["name"]).group(1): (t["line"]["color"], t["line"]["dash"]) for t in roofs}
    assert {"bf16", "fp32"} <= set(styles)  # GPT-2 in bf16 with fp32 layer norms: both roofs drawn
    assert len(set(styles.values())) == len(styles), styles
