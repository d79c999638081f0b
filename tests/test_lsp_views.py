"""The editor's views alone, on hand-written input: which loop is the training loop, which line raised, what a
training script is, how the report's display paths find the file, and how a hint states a change."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lsprotocol")

from stepscope.live import editor
from stepscope.live.compare import Changes, LineDelta, LineFigures, Noise, Shift, Verdict, make_shift

NESTED = """import torch
for epoch in range(3):
    model.train()
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        opt.step()
    for x, y in val:
        model(x)
"""


def test_the_training_loop_is_the_innermost_loop_around_backward() -> None:
    assert editor.training_loop_line(NESTED) == 4  # not the epoch loop (2), nor the validation loop (8)
    assert editor.training_loop_line("while True:\n    opt.step()\n") == 1  # no backward: the optimizer's loop
    assert editor.training_loop_line("x = 1\n") == 1  # none: the file's first line
    assert editor.training_loop_line("for x in\n") == 1  # a syntax error mid-edit


def test_the_exception_line_is_the_last_tracebacks() -> None:
    log = ("Traceback (most recent call last):\n  File \"a.py\", line 1\nValueError: first\n"
           "stepscope: running\nTraceback (most recent call last):\n  File \"t.py\", line 20, in <module>\n"
           "    raise RuntimeError('x')\nRuntimeError: planted\n╭─ verdict\n")
    assert editor.exception_line(log) == "RuntimeError: planted"
    assert editor.exception_line("no traceback here\n") is None


def test_a_failure_marks_the_users_raising_line(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    helper = tmp_path / "helper.py"
    helper.write_text("def f():\n    raise ValueError\n")
    log = (f'Traceback (most recent call last):\n  File "{script}", line 1, in <module>\n'
           f'  File "{helper}", line 2, in f\n  File "/usr/lib/python3/site-packages/torch/x.py", line 9\n'
           "ValueError\n")
    mark = editor.failure_mark("ValueError", log, script, (tmp_path,))
    assert mark is not None  # on the last frame in user code: not the script's line, not torch's
    assert (mark.path, mark.line, mark.severity) == (helper.resolve(), 2, "error")
    fallback = editor.failure_mark("boom", "", script, (tmp_path,))
    assert fallback is not None and (fallback.path, fallback.line) == (script, 1)  # no traceback: the first line
    assert editor.failure_mark("boom", "", None, (tmp_path,)) is None  # nor a script (-m module): nowhere


def test_what_counts_as_a_training_script() -> None:
    assert editor.is_training_script("import torch\nloss.backward()\n")
    assert editor.is_training_script("from torch import nn\nopt.step()\n")
    assert not editor.is_training_script("import torch\nprint(torch.ones(2))\n")  # no training
    assert not editor.is_training_script("import torchvision\nloss.backward()\n")  # not torch itself


def test_display_paths_resolve_against_the_working_and_script_folders(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("")
    (tmp_path / "s.py").write_text("")
    assert editor.resolve("pkg/m.py", (tmp_path,)) == (tmp_path / "pkg" / "m.py").resolve()
    assert editor.resolve("s.py", (tmp_path / "pkg", tmp_path)) == (tmp_path / "s.py").resolve()
    assert editor.resolve(str(tmp_path / "s.py"), ()) == (tmp_path / "s.py").resolve()
    assert editor.resolve("<cell>", (tmp_path,)) is None


def test_a_hint_states_the_change_and_whether_it_is_noise() -> None:
    grew: Shift = make_shift(50.0, 1250.0, 30.0)  # µs: +1.2 ms against a noise threshold of 30 µs
    same: Shift = make_shift(50.0, 52.0, 30.0)
    assert editor._change(grew) == " (+1.20 ms)"
    assert editor._change(same) == " (+0.002 ms, noise)"
    assert editor._change(make_shift(1250.0, 50.0, 30.0)) == " (-1.20 ms)"
    assert editor.ms(45.2) == "0.045 ms" and editor.ms(2500) == "2.50 ms"


def test_a_line_hint_shows_the_times_it_has_and_their_change(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("x\n" * 10)
    now, before = LineFigures(1200.0, 0.0, None), LineFigures(50.0, 0.0, None)
    shifts = {"forward_us": make_shift(50.0, 1200.0, 40.0), "backward_us": make_shift(0.0, 0.0, 2.0)}
    lines = [LineDelta("train.py", 7, "y = f(x)", now, before, None, shifts, {}),
             LineDelta("gone.py", 3, "", now, None, None, {}, {})]  # no such file: no hint
    changes = Changes({}, lines, [], "breakdown", Verdict(None, "", None), None, None, Noise(0.01, "fixed"),
                      None, None)
    [hint] = editor.line_hints(changes, (tmp_path,))
    # 1200 µs now against 50 µs: +1.15 ms, beyond the 40 µs threshold; no backward time either run: no bwd part.
    assert (hint.path, hint.line, hint.label) == ((tmp_path / "train.py").resolve(), 7, "fwd 1.20 ms (+1.15 ms)")


def test_the_lsp_verb_refuses_bad_input_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from stepscope import cli

    assert cli.main(["lsp", "--debounce", "-1"]) == 2
    assert capsys.readouterr().err.splitlines() == ["stepscope: error: --debounce -1.0: must be 0 or more seconds"]
    # Without pygls (the optional `lsp` extra) the verb cannot load, and says what to install: in a fresh process
    # where importing pygls fails as it does when it is not installed.
    code = ("import sys; sys.modules['pygls'] = None\n"
            "from stepscope import cli\nsys.exit(cli.main(['lsp']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.splitlines() == [
        "stepscope: error: stepscope lsp needs pygls, which is not installed", "  hint: pip install 'stepscope[lsp]'"]
