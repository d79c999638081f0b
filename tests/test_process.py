"""stepscope.process: the CLI's process set up for a verb that only reads files (one BLAS thread unless the user
chose, glibc's heap kept), and `stepscope run`'s process left as Python sets it up."""

from __future__ import annotations

import os
import subprocess
import sys

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
