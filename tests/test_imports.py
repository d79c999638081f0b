"""How the modules import each other: no cycle inside a package, and our own modules imported inside functions
only where that keeps an optional or heavy dependency unloaded (or the CLI fast to start), each such place
counted here with its reason."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "stepscope"

# Cycles another issue of this round breaks in its own branch; delete the entry when it lands.
KNOWN_CYCLES: set[tuple[str, str]] = set()


def modules_under(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for the package at `root`."""
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Every module of ours a file imports, anywhere in it (functions and TYPE_CHECKING blocks included):
    `from a.b import c` is a.b.c when that is a module, else a.b."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in modules and m != name}


def cycles_inside_packages(root: Path) -> list[tuple[str, ...]]:
    """Strongly connected groups of two or more modules, over the imports between modules of one package (a
    package's __init__ counts as one of its modules)."""
    modules = modules_under(root)

    def package(name: str) -> str:
        return name if modules[name].name == "__init__.py" else name.rsplit(".", 1)[0]

    graph = {m: {t for t in imported(p, m, modules) if package(m) in (t, package(t)) or package(t) == m}
             for m, p in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[tuple[str, ...]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                found.append(tuple(sorted([v, *group])))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle(tmp_path: Path) -> None:
    """Two modules of a package that import each other (one only for type checking): a cycle; a third that
    imports one of them, and a module of another package importing back, are not part of it."""
    pkg = tmp_path / "stepscope" / "demo"
    (tmp_path / "stepscope" / "other").mkdir(parents=True)
    pkg.mkdir(parents=True)
    for init in (tmp_path / "stepscope", pkg, tmp_path / "stepscope" / "other"):
        (init / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from stepscope.demo.b import X\nfrom stepscope.other import z\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from stepscope.demo import a\n")
    (pkg / "c.py").write_text("from . import a\n")
    (tmp_path / "stepscope" / "other" / "z.py").write_text("from stepscope.demo import c\n")
    assert cycles_inside_packages(tmp_path / "stepscope") == [("stepscope.demo.a", "stepscope.demo.b")]


def test_no_import_cycle_inside_a_package() -> None:
    assert set(cycles_inside_packages(PACKAGE)) <= KNOWN_CYCLES


# Where a module of ours is imported inside a function (or through importlib), and why. Everywhere else our
# imports are at the top of the module. Budgets only shrink.
LAZY: dict[str, tuple[int, str]] = {
    "cli.py": (1, "the verb table: only the verb that runs is loaded (`stepscope run` loads no analysis before "
                  "the program, and the CLI starts fast)"),
    "__init__.py": (1, "the public surface, loaded on first use: `import stepscope` in a program loads no analysis"),
    "model/__init__.py": (1, "capture imports the model's two leaves without the Report's modules"),
    "api.py": (1, "the profiled program holds none of the analysis until its report is asked for"),
    "integrations/_common.py": (1, "the trainer's process holds none of the analysis until training has ended"),
    "commands/run.py": (1, "the user's program runs in this process: the analysis loads once it has ended"),
    "commands/predict_options.py": (1, "`stepscope run` parses --predict before the program runs"),
    "commands/inputs.py": (1, "`report` and `diff` on saved reports load none of the analyses"),
    "attribution/__init__.py": (1, "its line and module ranges import torch, which the user's program imports "
                                   "first"),
    "report/__init__.py": (1, "the renderer table: each renderer's module (the HTML pages' jinja2, Perfetto's "
                              "writer) only when its output is asked for"),
    "trace/load.py": (1, "the Nsight Systems reader only for nsys files"),
    "pipeline/flow.py": (1, "the several-ranks road (engines, process pools, the reduction) only for a job: one "
                            "trace's analysis loads none of it"),
    "commands/ranks.py": (1, "the engines (multiprocessing, process pools) only when `analyze` is given several "
                             "ranks"),
    "tune/child.py": (1, "a measured trial runs the user's program with none of the analysis loaded"),
    "tune/fixes/__init__.py": (1, "the registry: one module per fix, found by name"),
}


def lazy_imports(path: Path) -> int:
    """Imports of our modules inside functions, and importlib.import_module calls."""
    found = set()
    for fn in ast.walk(ast.parse(path.read_text())):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            ours = ((isinstance(node, ast.ImportFrom) and (node.module or "").startswith("stepscope"))
                    or (isinstance(node, ast.Import) and any(a.name.startswith("stepscope") for a in node.names)))
            dynamic = isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module"
            if ours or dynamic:
                found.add(node.lineno)  # a nested function's imports are its parent's too: count each once
    return len(found)


def test_imports_inside_functions_only_where_they_keep_something_unloaded() -> None:
    counts = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if (n := lazy_imports(p))}
    over = {f: (n, LAZY.get(f, (0, ""))[0]) for f, n in counts.items() if n > LAZY.get(f, (0, ""))[0]}
    assert not over, f"imports inside functions beyond the budget (found, allowed): {over}"
    assert sum(counts.values()) <= 15, f"{sum(counts.values())} imports inside functions (issue 20: at most 15)"


def test_diff_and_tune_load_jinja2_only_for_html() -> None:
    code = "import stepscope.commands.diff, stepscope.commands.tune\nimport sys\nprint(' '.join(sys.modules))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())
    assert "stepscope.report.diff" in loaded and "stepscope.report.tune" in loaded
    assert not loaded & {"stepscope.report.pages", "stepscope.report.html", "jinja2"}


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"import sys\n{code}\nprint('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout.split()
    return {".".join(m.split(".")[:2]) for m in out if m.startswith("stepscope")}


def test_the_run_verb_loads_no_analysis_before_the_program() -> None:
    loaded = _loaded_after("from stepscope import cli\ncli.build_parser('run')")
    assert "stepscope.commands" in loaded
    assert not loaded & {"stepscope.analysis", "stepscope.advice", "stepscope.pipeline", "stepscope.predict",
                         "stepscope.report", "stepscope.runreport", "stepscope.hardware"}


def test_rendering_a_saved_report_loads_no_analysis() -> None:
    loaded = _loaded_after("from stepscope import cli\ncli.build_parser('report')")
    assert "stepscope.report" in loaded
    assert not loaded & {"stepscope.analysis", "stepscope.advice", "stepscope.pipeline", "stepscope.trace"}


def test_the_top_level_help_loads_no_verb() -> None:
    assert "stepscope.commands" not in _loaded_after("from stepscope import cli\ncli.build_parser(None)")
