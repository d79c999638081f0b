"""What `stepscope analyze` of one trace loads. Its terminal report and its JSON show no chart, so neither draws one:
plotly (and jinja2) stay unloaded; and one trace loads none of the several-ranks road (the engines and their process
pools). Each case is a fresh process running the CLI as `python -m stepscope` does, then listing sys.modules; the
HTML page and a job of two ranks are the controls: they show the listing sees what those outputs do load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import KINETO, kineto_trace
from stepscope.pipeline import analyze
from stepscope.report import sections

# The CLI's main, as __main__ runs it, then every module loaded, one per line, into the file named first.
WRAPPER = ("import sys\nfrom stepscope.cli import main\ncode = main(sys.argv[2:])\n"
           "open(sys.argv[1], 'w').write('\\n'.join(sys.modules))\nsys.exit(code)")
CHARTS = {"plotly", "plotly.graph_objects", "jinja2"}
RANKS_ROAD = {"stepscope.pipeline.ranks", "stepscope.ranks.engines", "stepscope.ranks.driver",
              "concurrent.futures.process"}
TINY = "a100_event_sync_tiny.json.gz"  # 3 kB, with kernels: the page draws its breakdown, GPU and timeline charts


def loaded(tmp_path: Path, *args: str) -> set[str]:
    listing = tmp_path / "modules.txt"
    done = subprocess.run([sys.executable, "-c", WRAPPER, str(listing), "analyze", *args], capture_output=True,
                          text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    return set(listing.read_text().split())


def test_the_terminal_report_of_one_trace_loads_no_chart_and_no_rank_engine(tmp_path: Path) -> None:
    modules = loaded(tmp_path, str(kineto_trace(TINY)), "--width", "100")
    assert {"stepscope.pipeline.flow", "stepscope.report.terminal", "stepscope.report.figures"} <= modules
    assert not modules & CHARTS
    assert not modules & RANKS_ROAD


def test_the_json_report_draws_no_chart(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    modules = loaded(tmp_path, str(kineto_trace(TINY)), "--json", str(out), "--quiet")
    assert json.loads(out.read_bytes())["schema"] == "stepscope.report/1"
    assert not modules & CHARTS
    assert not modules & RANKS_ROAD


def test_the_html_page_loads_plotly_and_draws_its_charts(tmp_path: Path) -> None:
    """The control: the page shows charts, so it loads what the other outputs leave out."""
    out = tmp_path / "report.html"
    modules = loaded(tmp_path, str(kineto_trace(TINY)), "--html", str(out), "--quiet")
    assert modules >= CHARTS
    page = out.read_text()
    assert all(f'id="fig-{x}"' in page for x in ("breakdown", "gpu", "timeline"))


def test_a_job_of_two_ranks_loads_the_engines(tmp_path: Path) -> None:
    """The control of the ranks road: two rank files go through an engine (here in this process, --workers 1)."""
    job = KINETO / "two_rank_job"
    if not job.is_dir():
        pytest.skip(f"shared traces {job} are not available")
    modules = loaded(tmp_path, str(job), "--workers", "1", "--quiet", "--json", str(tmp_path / "job.json"))
    assert {"stepscope.pipeline.ranks", "stepscope.ranks.engines"} <= modules
    assert not modules & CHARTS


def test_sections_carry_their_charts_undrawn_until_asked() -> None:
    """The terminal's sections hold no figure; asked for charts (the page), the same sections hold plotly specs."""
    report = analyze(kineto_trace(TINY))
    plain, drawn = sections.build(report), sections.build(report, charts=True)
    assert [s.id for s in plain] == [s.id for s in drawn]
    assert all(s.figure is None for s in plain)
    charted = {s.id: s.figure for s in drawn if s.figure is not None}
    assert {"breakdown", "gpu", "timeline"} <= set(charted)
    assert all(fig["data"] for fig in charted.values())
