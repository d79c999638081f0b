"""_native.pyi, the C hooks' stub, names what the built extension has: its functions, its types and the State's
members (read from the module itself), and the package ships it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import tomllib

import stepscope.capture.meter as meter_package

STUB = Path(meter_package.__file__).parent / "_native.pyi"
ROOT = Path(__file__).parents[1]


def _stub() -> tuple[set[str], dict[str, set[str]]]:
    tree = ast.parse(STUB.read_text())
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    members = {n.name: {a.target.id for a in n.body if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name)}
               for n in tree.body if isinstance(n, ast.ClassDef)}
    return top, members


def test_the_stub_names_what_the_extension_has() -> None:
    native = pytest.importorskip("stepscope.capture.meter._native", reason="the C hooks are not built here")
    top, members = _stub()
    public = {n for n in dir(native) if not n.startswith("_")}
    assert public <= top, public - top  # every function and type the module exports is typed
    assert {"timed", "data_next", "optimizer_hooks", "now", "State"} <= public
    state = {n for n in dir(native.State) if not n.startswith("_")}
    assert state == members["State"], state ^ members["State"]


def test_the_package_data_ships_the_stub() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["stepscope"]
    assert any(STUB.match(pattern.replace("**/", "*/")) or pattern == "**/*.pyi" for pattern in data)
