"""The editor's views alone, on hand-written input: which loop is the training loop, which line raised, what a
training script is, how the report's display paths find the file, and how a hint states a change."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lsprotocol")

from stepscope.live import editor
from stepscope.live.compare import Shift, make_shift

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
    assert (mark.path, mark.line, mark.severity) == (helper.resolve(), 2, "error")  # the last frame in user code
    assert editor.failure_mark("boom", "", script, (tmp_path,)).line == 1  # no traceback: the script's first line


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
