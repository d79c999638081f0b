"""A script python refuses for its bytes (a non-UTF-8 comment, no coding line) is refused by `stepscope run` too,
in one line, before anything runs: compile() of the bytes took it, and every line's code column came out empty."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stepscope.capture.program import Program, check
from stepscope.cli import main
from stepscope.errors import StepscopeError


def _python_refuses(path: Path) -> bool:
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True)
    return done.returncode == 1 and "SyntaxError" in done.stderr


def test_a_non_utf8_comment_is_refused_as_python_refuses_it(tmp_path: Path, capsys, monkeypatch) -> None:
    script = tmp_path / "train.py"
    script.write_bytes(b"x = 1\n\n# caf\xe9 au lait\nprint('ran')\n")
    assert _python_refuses(script)  # the reason: python itself will not run it
    with pytest.raises(StepscopeError) as raised:
        check(Program(str(script), ()))
    assert raised.value.exit_code == 1
    assert raised.value.message == (f"{script}: Non-UTF-8 code starting with '\\xe9' on line 3, but no encoding "
                                     "declared (python refuses to run it)")
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(script)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("stepscope: error: ") and err[1].startswith("  hint: ") and len(err) == 2, err
    assert not (tmp_path / "stepscope-runs").exists()  # refused before a run folder was made


def test_a_declared_encoding_is_taken(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\nprint('ran')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "ran\n"  # python runs it
    check(Program(str(script), ()))  # and so does stepscope: no error
    script.write_bytes(b"# -*- coding: no-such-codec -*-\nprint('ran')\n")
    assert _python_refuses(script)
    with pytest.raises(StepscopeError, match="unknown encoding: no-such-codec"):
        check(Program(str(script), ()))
