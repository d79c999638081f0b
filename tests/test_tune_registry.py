"""The registry of tune fixes (tune/fixes/: one module per fix): every recommendation the diagnosis can make is a
fix tune tries or a code change it lists; what reads the registry (the plan, the CLI's help) sees each fix; and
`cpu_threads`, the fix added as one file, from its plan to its trial to its patch."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from stepscope.advice.rules import RULES
from stepscope.model.report import Recommendation, Report, Source, Summary
from stepscope.tune.fixes import CODE_CHANGES, FIXES, carrying
from stepscope.tune.plan import PlanOptions, make_plan
from stepscope.tune.suggest import suggest
from stepscope.tune.wire import CallSite, DeviceInfo, LoaderSite, Settings

DOCS = Path(__file__).resolve().parent.parent / "docs" / "patterns.md"
SRC = Path(__file__).resolve().parent.parent / "src"


def recommendation_ids() -> set[str]:
    """The ids the advice rules produce: one rule per fix, named as its id (advice/rules.py)."""
    return {rule.__name__ for rule in RULES}


def test_every_recommendation_is_a_fix_or_a_code_change() -> None:
    ids = recommendation_ids()
    assert len(ids) >= 15 and "dataloader_workers" in ids and "remove_sync" in ids
    homeless = sorted(i for i in ids if carrying(i) is None and i not in CODE_CHANGES)
    assert homeless == []
    assert not set(CODE_CHANGES) & set(FIXES)  # a code change is never also tried
    # The ids are a public contract, in docs/patterns.md; tune's own fixes too.
    documented = set(re.findall(r"`([a-z0-9_]+)`", DOCS.read_text()))
    assert ids <= documented and set(FIXES) <= documented


def test_each_fix_holds_all_of_itself() -> None:
    for fix_id, fix in FIXES.items():
        assert fix.id == fix_id and callable(fix.install) and fix.write is not None, fix_id
        assert fix.code and fix.order > 0
        assert all(f in FIXES for f in fix.together)
    orders = [f.order for f in FIXES.values()]
    assert orders == sorted(orders)  # the registry is in the walk-through's order
    compiling = [f.order for f in FIXES.values() if f.compiles]
    assert compiling and min(compiling) > max(f.order for f in FIXES.values() if not f.compiles)


def test_the_cli_help_names_every_fix() -> None:
    done = subprocess.run([sys.executable, "-m", "stepscope", "tune", "--help"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(SRC), "COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    listed = " ".join(done.stdout.split()).split("only these fixes (comma-separated): ")[1]
    assert listed.startswith(", ".join(FIXES))


def test_cpu_threads_is_tried_only_where_recommended_with_the_free_cores() -> None:
    cpu = DeviceInfo(kind="cpu", name="CPU", cpu_cores=8)
    settings = Settings(loaders=[LoaderSite(file="t.py", line=3, num_workers=2, pin_memory=False,
                                            persistent_workers=False, batch_size=8, batches=100)])
    rec = Recommendation(id="cpu_threads", title="threads", location=None, estimated_speedup=1.4,
                         evidence={"intra_op_threads": 1, "cpu_cores": 8, "dataloader_workers": 2})
    report = Report(source=Source(paths=["t"], format="live"), device=None, steps=[], recommendations=[rec],
                    summary=Summary(step_time_us=1000.0, breakdown_us={}, gpu_utilization=None))
    plan = make_plan(report, settings, cpu, PlanOptions())
    # 8 cores, 2 of them the DataLoader's workers': 6 threads.
    assert [(c.fixes, c.options) for c in plan.candidates] == [(("cpu_threads",), ({"cpu_threads": {"threads": 6}},))]
    assert make_plan(None, settings, cpu, PlanOptions()).candidates == []  # not recommended: not tried


def test_cpu_threads_in_a_trial_and_in_the_patch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from stepscope.tune.child import install
    from stepscope.tune.points import Points

    before = torch.get_num_threads()
    points = install({"cpu_threads": {"threads": 2}}, Points(lambda: 0))
    try:
        torch.set_num_threads(1)  # the program's choice of one thread
        line = sys._getframe().f_lineno - 1
        seen = torch.get_num_threads()
    finally:
        points.undo()
    assert seen == 2 and torch.get_num_threads() == before and torch.set_num_threads.__module__ == "torch"
    assert [(s.file, s.line, s.value) for s in points.settings.calls["cpu_threads"]] == [(__file__, line, 1)]
    # In the patch: the program's own call, given the threads; without one, a call after the imports.
    script = tmp_path / "train.py"
    script.write_text("import torch\n\ntorch.set_num_threads(1)\n")
    monkeypatch.chdir(tmp_path)
    called = Settings(calls={"cpu_threads": [CallSite(file=str(script), line=3, value=1)]})
    text, unplaced, _ = suggest({"cpu_threads": {"threads": 2}}, ["cpu_threads"], called, "cpu", [])
    assert unplaced == [] and text is not None and "-torch.set_num_threads(1)\n+torch.set_num_threads(2)\n" in text
    silent = Settings(loaders=[LoaderSite(file=str(script), line=3, num_workers=0, pin_memory=False,
                                          persistent_workers=False, batch_size=8, batches=1)])
    text, _, _ = suggest({"cpu_threads": {"threads": 2}}, ["cpu_threads"], silent, "cpu", [])
    assert text is not None and "+torch.set_num_threads(2)  # stepscope tune: cpu_threads\n" in text
