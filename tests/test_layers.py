"""The layers stay layers: cli -> commands -> pipeline -> report / advice -> analysis -> trace, capture -> trace,
and the typed data (model) below them all (STYLE.md 12); checked in the source and at run time."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "stepscope"

# For each layer, the other stepscope layers it may import. Anything not listed is forbidden.
ALLOWED: dict[str, set[str]] = {
    "model": set(),
    "hardware": {"errors", "atomic", "user_output"},  # measure --json FILE: the user's own output
    # The run folder's file names and the telemetry's types: leaves of model that import nothing of ours.
    "trace": {"errors", "model.runfolder", "model.telemetry", "model.runfile"},  # census.py reads the run's side files
    # the hardware table: peaks for MFU and the roofline; the model's enumerated strings and Location (a leaf)
    "analysis": {"trace", "errors", "hardware", "units", "model.kinds"},
    "attribution": {"trace", "patches"},
    # The training frameworks' settings for each fix, and which framework runs the step: read by advice and tune.
    "frameworks": {"attribution"},
    # The step's graph and its replay: below advice and predict, above analysis (steps, launch links, syncs).
    "replay": {"analysis", "trace", "errors", "model.calibration"},  # the calibration reaches it as its type
    "advice": {"analysis", "replay", "trace", "model", "errors", "units", "frameworks"},
    # Renderers format what they are handed; the Perfetto renderer is handed the trace and its annotations.
    "report": {"model", "trace.model", "analysis.annotations", "errors", "version", "units", "stats"},
    "capture": {"attribution", "trace", "errors", "version", "atomic", "model.runfolder", "model.telemetry",
                "model.meter", "model.calibration", "stats", "patches", "frameworks"},
    # Predict reads the facts (and the pattern classifier, to name a replayed step's bottleneck) and the hardware.
    "predict": {"analysis", "advice", "replay", "trace", "hardware", "model", "errors", "units"},
    # Tune runs programs through capture in child processes and reads the reports they write; the profiled child
    # writes them through runreport, as `stepscope run` does.
    "tune": {"capture", "model", "errors", "version", "runreport", "atomic", "stats", "patches", "frameworks"},
    # Live re-profiling: captures run as `stepscope run` subprocesses; the engine reads the reports they write and
    # compares them (stepscope.compare), the front ends draw them. Nothing of the analysis is loaded, but by the
    # notebook magic, which captures in the kernel through the Python API and shows the report's and diff's views.
    "live": {"model", "compare", "errors", "units", "version", "api", "report", "stats", "lifeline"},
    # Below the pipeline: the per-rank tasks and the reduce, never the renderers nor the CLI.
    "ranks": {"analysis", "advice", "trace", "model", "errors", "units"},
}
# The model's modules beyond its two leaves (the run folder's names, the telemetry's types): none of them is
# loaded inside the user's program.
HEAVY_MODEL = tuple(f"stepscope.model.{m}" for m in ("report", "run", "usage", "ranks", "diff", "tune",
                                                          "prediction"))
LEAVES = ("stepscope.model.runfolder", "stepscope.model.telemetry", "stepscope.model.meter",
          "stepscope.model.calibration", "stepscope.model.kinds")
# What a layer must not have loaded at run time after importing it (the static check misses imports made by
# the package's __init__ or inside functions).
NOT_LOADED_BY: dict[str, tuple[str, ...]] = {
    "stepscope": ("stepscope.analysis", "stepscope.advice", "stepscope.report", "stepscope.pipeline",
                  "stepscope.trace", "stepscope.capture"),
    "stepscope.capture.session": ("stepscope.analysis", "stepscope.advice", "stepscope.report", "stepscope.pipeline",
                                  *HEAVY_MODEL),
    "stepscope.capture.telemetry": ("stepscope.analysis", "stepscope.advice", "stepscope.report", "stepscope.pipeline",
                                    *HEAVY_MODEL),
    "stepscope.model": ("stepscope.analysis", "stepscope.advice", "stepscope.report", "stepscope.trace"),
    "stepscope.analysis.facts": ("stepscope.advice", "stepscope.report", *HEAVY_MODEL),
    # A measured trial runs the user's program with nothing of the analysis loaded.
    "stepscope.tune.child": ("stepscope.analysis", "stepscope.advice", "stepscope.report", "stepscope.pipeline",
                             "stepscope.api", "stepscope.runreport"),
    "stepscope.tune.ladder": ("stepscope.analysis", "stepscope.advice", "stepscope.report", "stepscope.pipeline"),
    # The live engine and its comparison (in a notebook's kernel, a language server, `watch`) load no analysis.
    "stepscope.live.compare": ("stepscope.analysis", "stepscope.advice", "stepscope.pipeline", "stepscope.capture",
                               "stepscope.trace"),
    # The language server reads the reports its captures write: no analysis, no capture in its own process.
    "stepscope.live.lsp": ("stepscope.analysis", "stepscope.advice", "stepscope.pipeline", "stepscope.capture",
                           "stepscope.trace", "stepscope.api", "stepscope.runreport"),
    # What every per-rank worker imports: no renderer, no pipeline, no capture.
    "stepscope.ranks.summarize": ("stepscope.report", "stepscope.pipeline", "stepscope.capture"),
}
NOBODY_IMPORTS = {"cli"}
# The statistics model every layer asks (stepscope/stats.py) and the one patch bookkeeper (patches.py): leaves,
# plain Python, loaded in the user's process.
LEAF_MODULES = ("stats", "patches", "units", "errors", "version")
# The trace readers: one sub-package each, used from outside only through the names its __init__ exports.
READERS = ("kineto", "nsys")


def imports_of(path: Path) -> set[str]:
    """The stepscope modules a file imports, as dotted paths below `stepscope.`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "stepscope":
            # `from stepscope.model import report as schema` imports report.schema, not all of report.
            base = node.module.removeprefix("stepscope").removeprefix(".")
            found.update(f"{base}.{alias.name}".lstrip(".") for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("stepscope.") for a in node.names if a.name.startswith("stepscope."))
    return found


def _allowed(target: str, allowed: set[str]) -> bool:
    return any(target == a or target.startswith(a + ".") for a in allowed)


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(layer: str) -> None:
    bad = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for target in imports_of(path):
            if target.split(".")[0] != layer and not _allowed(target, ALLOWED[layer]):
                bad.append(f"{path.relative_to(PACKAGE)} imports stepscope.{target}")
    assert not bad, "\n".join(bad)


def test_nothing_imports_the_cli() -> None:
    bad = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
           if p.name != "__main__.py" and any(t.split(".")[0] in NOBODY_IMPORTS for t in imports_of(p))]
    assert not bad, bad


@pytest.mark.parametrize("module", sorted(NOT_LOADED_BY))
def test_importing_a_layer_loads_nothing_above_it(module: str) -> None:
    code = (f"import sys, {module}\n"
            f"print('\\n'.join(m for m in sys.modules if m.startswith('stepscope')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    loaded = [m for m in out if any(m == f or m.startswith(f + ".") for f in NOT_LOADED_BY[module])]
    assert not loaded, f"importing {module} loaded {loaded}"


@pytest.mark.parametrize("leaf", LEAVES)
def test_the_model_leaves_capture_imports_load_nothing_else(leaf: str) -> None:
    code = f"import sys, {leaf}\nprint('\\n'.join(m for m in sys.modules if m.startswith('stepscope')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    # model/runfile.py (how a run folder's file is read: regular, bounded, typed) and model/kinds.py (the enumerated
    # strings) are leaves under the leaves
    under = {"stepscope.model.runfile", "stepscope.model.kinds"}
    expected = {"stepscope", "stepscope.errors", "stepscope.version", "stepscope.model", leaf}
    assert set(out) - (under - {leaf}) == expected


@pytest.mark.parametrize("reader", READERS)
def test_each_reader_is_a_sub_package_used_through_its_exports(reader: str) -> None:
    trace = PACKAGE / "trace"
    assert (trace / reader / "__init__.py").is_file()
    assert not sorted(trace.glob(f"{reader}*.py")), "reader modules belong inside the sub-package"
    exported = set(__import__(f"stepscope.trace.{reader}", fromlist=["__all__"]).__all__)
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        inside = path.is_relative_to(trace / reader)
        for target in imports_of(path):
            parts = target.split(".")
            if parts[:2] != ["trace", reader] or inside:
                if inside and parts[:1] == ["trace"] and parts[1:2] != [reader] and parts[1] in READERS:
                    bad.append(f"{path.relative_to(PACKAGE)} imports the other reader: stepscope.{target}")
                continue
            if len(parts) < 3 or parts[2] not in exported:
                bad.append(f"{path.relative_to(PACKAGE)} imports stepscope.{target}, not an export of trace.{reader}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("leaf", LEAF_MODULES)
def test_the_top_level_leaves_import_nothing_of_ours_and_no_numpy(leaf: str) -> None:
    """stats, units, errors, version are asked by every layer, the step meter in the user's process among them."""
    assert not imports_of(PACKAGE / f"{leaf}.py")
    code = f"import sys, stepscope.{leaf}\nprint('numpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() \
        == "False"
