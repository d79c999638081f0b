"""The ladder's figures check against each other (issue 30, item 5): a row said "675.0 samples/s, 1.23x vs baseline"
under a baseline of 711.1 samples/s, because the rate was the candidate's runs pooled and the ratio was paired with
the rung's alternating runs on a machine that had slowed down. Each row now shows its rate and the rung's rate in
the same runs: rate / builds-on = gain, and vs baseline = gain x the vs baseline of the rung it builds on.

The rows are made by the tune's own code (`trial_row`) from runs whose rates are set here, and read back from the
terminal's and the HTML page's text; the expected figures are worked out by hand below."""

from __future__ import annotations

import html
import io
import math
import re
from pathlib import Path

from rich.console import Console

from stepscope.model.tune import Baseline, PatternShare, Tune, TuneDevice
from stepscope.report.pages import TuneHtmlRenderer
from stepscope.report.tune import TuneTerminalRenderer
from stepscope.tune.judge import Rung, trial_row
from stepscope.tune.measured import Run, config_key
from stepscope.tune.paired import CANDIDATE, REFERENCE, gain
from stepscope.tune.rounds import Outcome
from stepscope.tune.trial import ChildRun
from stepscope.tune.wire import ChildResult, WindowResult

CL = {"channels_last": {}}
CL_AMP = {"channels_last": {}, "amp": {"dtype": "bfloat16"}}


def run(fixes: dict, index: int, rate: float) -> Run:
    """A measured run at `rate` samples/s: three windows of 0.5 s."""
    windows = [WindowResult(steps=10, samples=rate * 0.5, seconds=0.5, start_s=i * 0.5) for i in range(3)]
    result = ChildResult(status="measured", exit_code=0, program_status="stopped", windows=windows, unit="samples",
                         applied={f: 1 for f in fixes}, batch_size=32)
    child = ChildRun(result, 0, 5.0, Path(f"trials/{index:02d}.log"), "", "measured")
    return Run(key=config_key(fixes), child=child, at=float(index), index=index)


def outcome(runs: list[tuple[str, Run]], decision: str) -> Outcome:
    g = gain([r.series(arm) for arm, r in runs])
    return Outcome(decision=decision, gain=g, runs=runs)


def drifting_tune() -> Tune:
    """The baseline measured at 711.1 samples/s; then the machine slows: channels_last at 675 alternates with the
    baseline at 560, 550, 540; amp at 770 alternates with channels_last at 700, 700."""
    base = Rung(0, {}, 711.1 / 32, 711.1, 1.0, 32)
    first = outcome([(REFERENCE, run({}, 1, 560)), (CANDIDATE, run(CL, 2, 675)), (REFERENCE, run({}, 3, 550)),
                     (CANDIDATE, run(CL, 4, 675)), (REFERENCE, run({}, 5, 540))], "keep")
    t1 = trial_row(first, rung=1, tried=("channels_last",), fixes=CL, base=base, estimate=1.1, estimate_from=None,
                   min_gain=0.05)
    rung1 = Rung(1, CL, t1.steps_per_s or 0.0, t1.samples_per_s, t1.speedup or 1.0, 32)
    second = outcome([(REFERENCE, run(CL, 6, 700)), (CANDIDATE, run(CL_AMP, 7, 770)), (REFERENCE, run(CL, 8, 700)),
                      (CANDIDATE, run(CL_AMP, 9, 770)), (REFERENCE, run(CL, 10, 700))], "keep")
    t2 = trial_row(second, rung=2, tried=("amp",), fixes=CL_AMP, base=rung1, estimate=1.3, estimate_from=None,
                   min_gain=0.05)
    return Tune(command=["train.py"], device=TuneDevice(kind="cpu", name="x86_64"), trials=[t1, t2],
                baseline=Baseline(step_time_us=32 / 711.1 * 1e6, steps_per_s=711.1 / 32, samples_per_s=711.1,
                                  spread=None, runs=[], patterns=[PatternShare(id="cpu_compute_bound", share=0.6)]),
                applied=["channels_last", "amp"], speedup=None, final_patterns=[], patch=None, not_tried=[])


# By hand: each channels_last run against the baseline interpolated midway between the runs around it.
REF1 = math.exp((math.log(560) + 2 * math.log(550) + math.log(540)) / 4)  # (sqrt(560*550) * sqrt(550*540)) ** 0.5
GAIN1 = 675 / REF1  # 1.2271...: the "1.23x" beside 675.0, now beside the baseline's 550.0 at those times
GAIN2 = 770 / 700


def rows_of(text: str) -> dict[str, list[str]]:
    """The ladder's rows from rendered text: rung number -> its cells (split on two spaces or more)."""
    rows = {}
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells and cells[0] in ("0", "1", "2") and len(cells) > 3:
            rows[cells[0]] = cells
    return rows


def number(text: str) -> float:
    return float(text.replace(",", "").rstrip("x"))


def check_rows(rate: dict[str, str], builds_on: dict[str, str], gain_text: dict[str, str],
               vs: dict[str, str]) -> None:
    """What a reader can check with a calculator, to the figures' two decimals."""
    assert number(rate["0"]) == 711.1 and number(vs["0"]) == 1.0
    assert number(rate["1"]) == 675.0 and builds_on["1"] == f"{REF1:,.1f} on 0"  # 550.0 on 0
    assert number(gain_text["1"]) == round(GAIN1, 2) == 1.23
    assert number(rate["2"]) == 770.0 and builds_on["2"] == "700.0 on 1"
    assert number(vs["2"]) == round(GAIN1 * GAIN2, 2) == 1.35
    for rung in ("1", "2"):
        ref = number(builds_on[rung].split(" on ")[0])
        assert abs(number(rate[rung]) / ref - number(gain_text[rung])) <= 0.005 + 1e-9
    assert abs(number(vs["1"]) * number(gain_text["2"]) - number(vs["2"])) <= 0.01


def test_terminal_ladder_rows_recompute_to_their_ratios() -> None:
    buffer = io.StringIO()
    Console(file=buffer, width=200, color_system=None).print(TuneTerminalRenderer().render(drifting_tune()))
    rows = rows_of(buffer.getvalue())
    # rung, fix, samples/s, builds on, gain, vs baseline, estimated, kept, why; the baseline leaves builds on,
    # gain and estimated empty (split away as blanks).
    trials = {k: v for k, v in rows.items() if k != "0"}
    check_rows({"0": rows["0"][2], **{k: v[2] for k, v in trials.items()}}, {k: v[3] for k, v in trials.items()},
               {k: v[4] for k, v in trials.items()}, {"0": rows["0"][3], **{k: v[5] for k, v in trials.items()}})


def test_html_ladder_rows_recompute_to_their_ratios() -> None:
    page = TuneHtmlRenderer().render(drifting_tune()).decode()
    table = page.split('id="table-ladder"')[1].split("</table>")[0]
    head = [html.unescape(h) for h in re.findall(r"<th[^>]*>(.*?)</th>", table)]
    assert head[2:6] == ["samples/s", "builds on", "gain", "vs baseline"]
    rows = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>")[1], re.S):
        cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        rows[cells[0]] = cells
    col = {name: [r[head.index(name)] for r in (rows["0"], rows["1"], rows["2"])]
           for name in ("samples/s", "builds on", "gain", "vs baseline")}
    pick = {name: dict(zip(("0", "1", "2"), cells, strict=True)) for name, cells in col.items()}
    check_rows(pick["samples/s"], pick["builds on"], pick["gain"], pick["vs baseline"])
