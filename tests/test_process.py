"""stepscope.process: the CLI's process set up for a verb that only reads files (one BLAS thread unless the user
chose, glibc's heap kept), and `stepscope run`'s process left as Python sets it up."""

from __future__ import annotations

import builtins
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stepscope import process

SHOW = ("import os, sys; from stepscope import cli; cli.main = lambda: print(os.environ.get('OPENBLAS_NUM_THREADS')) "
        "or 0; cli.entry()")


def _blas_threads(*argv: str, env: dict[str, str] | None = None) -> str:
    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", SHOW, *argv], env={**base, **(env or {})}, capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_reading_verb_gets_one_blas_thread_unless_the_user_chose() -> None:
    assert _blas_threads("analyze", "t.json") == "1"
    assert _blas_threads("report", "r.json", env={"OPENBLAS_NUM_THREADS": "4"}) == "4"


def test_verbs_that_run_the_users_code_keep_their_environment() -> None:
    assert _blas_threads("run", "train.py") == "None"
    assert _blas_threads("tune", "train.py") == "None"


FROZEN = ("import gc, sys; from stepscope import cli, process\n"
          "if sys.argv[1] == 'reading': process.for_reading()\n"
          "cli._verb_module('report'); print(gc.get_freeze_count())")


def test_a_reading_verbs_modules_are_frozen_once_loaded_and_only_there() -> None:
    def frozen(how: str) -> int:
        out = subprocess.run([sys.executable, "-c", FROZEN, how], capture_output=True, text=True, check=True)
        return int(out.stdout)

    assert frozen("reading") > 10_000  # what the verb's modules made, never walked by a collection
    assert frozen("in a test's process") == 0


def _point_class() -> type:
    with process.dataclass_code_cached():
        @dataclasses.dataclass(frozen=True)
        class Point:
            x: int
            y: int = 2
    return Point


def _check_point(point: type) -> None:
    assert point(1) == point(1, 2) != point(2)
    assert hash(point(1)) == hash(point(1, 2)) and repr(point(1)).endswith("Point(x=1, y=2)")
    with pytest.raises(dataclasses.FrozenInstanceError):
        point(1).x = 3  # type: ignore[misc]


@pytest.fixture
def code_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(process, "_reading", True)
    monkeypatch.setattr(process, "_CODE_CACHE", tmp_path / "dataclass-methods.marshal")
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return tmp_path / "dataclass-methods.marshal"


def test_a_dataclass_methods_are_compiled_once_for_all_runs(code_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_point(_point_class())
    assert code_cache.exists() and not hasattr(dataclasses, "exec")
    compiled = []
    real = builtins.compile
    monkeypatch.setattr(builtins, "compile", lambda *a, **k: compiled.append(a) or real(*a, **k))
    _check_point(_point_class())  # the same class, another run: every method from the cache
    assert not compiled


def test_a_cache_that_cannot_be_read_is_written_again(code_cache: Path) -> None:
    code_cache.write_bytes(b"not marshal")
    _check_point(_point_class())
    assert process._cached_code()


def test_the_code_cache_is_used_only_by_a_reading_verb(code_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "_reading", False)
    _check_point(_point_class())
    assert not code_cache.exists()
