"""How the modules import each other: no cycle inside a package, and our own modules imported inside functions
only where that keeps an optional or heavy dependency unloaded (or the CLI fast to start), each such place
counted here with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "stepscope"

# Cycles another issue of this round breaks in its own branch; delete the entry when it lands.
KNOWN_CYCLES = {("stepscope.tune.ladder", "stepscope.tune.review")}  # the tune issue


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
