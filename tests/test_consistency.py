"""The consistency check's fast part (issue 40 item 5; benchmarks/consistency.py runs every workload): one small
pattern workload through `stepscope run`, then its run folder through `analyze --json`, a job of two rank folders,
`diff`, watch's view and terminal and the LSP's hints and lens; every figure has one value everywhere. The check is
shown to catch a planted second value, and the line that calls the optimizer step fits inside the meter's phase."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

torch = pytest.importorskip("torch")

import consistency_checks as c  # noqa: E402
from stepscope.model.report import from_json, to_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "pattern_sync_bound.py"
# A short window and a small model: about 20 s of `stepscope run` on a shared 2-core machine.
RUN = ("--skip", "5", "--warmup", "1", "--steps", "3")
PROGRAM = ("--steps", "30", "--width", "64", "--depth", "4", "--batch-size", "64")


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("consistency") / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "stepscope", "run", "-o", str(out), *RUN, str(SCRIPT), *PROGRAM],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_every_figure_has_one_value_across_the_front_ends(run_folder: Path, tmp_path: Path) -> None:
    ledger = c.check_run_folder(run_folder, tmp_path, bases=(ROOT,), script=SCRIPT)
    assert not ledger.problems, c.dump(ledger)
    # Every kind of figure the issue names was found and held somewhere, not skipped for want of it.
    kinds = {"step time", "samples/s", "steps/s", "phase", "line", "fix", "noise verdict"}
    assert kinds <= ledger.kinds, c.dump(ledger)
    assert ledger.checked > 100


def test_a_planted_second_value_is_found(run_folder: Path, tmp_path: Path) -> None:
    """report.json says one thing, the texts and the re-analysis another: every place that shows the figures says
    so (the check is not vacuous)."""
    r = from_json((run_folder / "report.json").read_bytes())
    assert r.lines is not None and r.meter is not None and r.recommendations
    row = r.lines.rows[0]
    wrong = msgspec.structs.replace(row, cpu_fwd_us=row.cpu_fwd_us * 1.5 + 10)
    planted = msgspec.structs.replace(
        r, lines=msgspec.structs.replace(r.lines, rows=[wrong, *r.lines.rows[1:]]),
        recommendations=[msgspec.structs.replace(r.recommendations[0],
                                                 estimated_speedup=r.recommendations[0].estimated_speedup + 0.5)])
    (tmp_path / "report.json").write_bytes(to_json(planted))
    ledger = c.Ledger()
    c.check_terminal(ledger, planted, (run_folder / "report.txt").read_text(), "report.txt")
    c.check_html(ledger, planted, (run_folder / "report.html").read_text(), "report.html")
    c.reports_agree(ledger, planted, r, "the run's own report")
    text = "\n".join(ledger.problems)
    fix = r.recommendations[0].id
    for where in ("report.txt", "report.html", "the run's own report"):
        assert f"line {row.label} cpu_fwd_us: {where}" in text, text
        assert f"fix {fix}: {where}" in text, text


def test_the_optimizer_line_fits_inside_the_meters_phase(run_folder: Path) -> None:
    r = from_json((run_folder / "report.json").read_bytes())
    assert r.lines is not None and r.lines.fitted == "step meter"
    assert any(".step(" in row.code for row in r.lines.rows)  # the workload's optimizer.step() line is there
    assert c.optimizer_line_fits(r) == []
