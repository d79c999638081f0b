"""`stepscope watch`'s command line: bad input is one line and a non-zero exit, before any capture starts; the
options each capture gets are `stepscope run`'s, spelled out."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from stepscope import cli
from stepscope.commands.watch import run_options
from stepscope.live.watch import BatchFlag


def fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(["watch", *argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, err = fails(["missing.py"], capsys)
    assert code == 2 and "can't open file 'missing.py'" in err
    (tmp_path / "train.py").write_text("pass\n")
    code, err = fails(["--batch-flag", "batch", "train.py"], capsys)
    assert code == 2 and "--batch-flag 'batch'" in err
    code, err = fails(["--debounce", "-1", "train.py"], capsys)
    assert code == 2 and "--debounce" in err
    code, err = fails([], capsys)
    assert code == 2 and "nothing to run" in err
    with socket.socket() as taken:  # a port something else holds
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = fails(["--page", "--port", str(port), "train.py"], capsys)
    assert code == 2 and f"cannot serve the page on 127.0.0.1:{port}" in err


def test_each_capture_gets_the_window_and_settings_given() -> None:
    args = cli.build_parser("watch").parse_args(["watch", "--steps", "2", "--no-profile-memory", "--step-on",
                                                 "backward", "--batch-size", "8", "t.py", "--steps", "9"])
    run = cli.build_parser("run").parse_args(["run", *run_options(args), "x.py"])  # what the child parses
    assert (run.skip, run.warmup, run.steps) == (3, 1, 2)  # watch's short window, its --steps given
    assert (run.step_on, run.batch_size, run.profile_memory, run.timing_pass) == ("backward", 8, False, False)
    assert run.program == ["x.py"]
    assert args.program == ["t.py", "--steps", "9"]  # the program's own --steps stays the program's


def test_the_batch_flag_replaces_or_adds_the_programs_option() -> None:
    flag = BatchFlag("--batch-size")
    assert flag.apply(("t.py", "--batch-size", "16", "--lr", "1"), 64) == ("t.py", "--batch-size", "64", "--lr", "1")
    assert flag.apply(("t.py", "--batch-size=16"), 64) == ("t.py", "--batch-size=64")
    assert flag.apply(("t.py",), 64) == ("t.py", "--batch-size", "64")


def test_the_programs_own_batch_option_is_found() -> None:
    from stepscope.commands.watch import _batch_flag_in

    assert _batch_flag_in(("--lr", "1", "--batch-size", "32")) == "--batch-size"
    assert _batch_flag_in(("--batch_size=32",)) == "--batch_size"
    assert _batch_flag_in(("--batch", "32", "--bsz", "4")) is None


def test_watch_and_the_language_server_profile_the_same_window() -> None:
    """Issue 40.4: one live window. watch with no options and the LSP's default Target (no runOptions) hand the
    `stepscope run` child options it reads as the same capture options: the window written out here by hand, skip 3
    (exact), warm up 1, record 3, 5 reference steps, memory on, no timing pass, no calibration."""
    from stepscope.commands.run import options_from_args
    from stepscope.live.engine import Target

    def child(options: tuple[str, ...]) -> object:
        return options_from_args(cli.build_parser("run").parse_args(["run", *options, "x.py"]))

    watch = child(run_options(cli.build_parser("watch").parse_args(["watch", "t.py"])))
    assert watch == child(Target(("t.py",), Path(".")).run_options)
    assert (watch.skip, watch.settle, watch.warmup, watch.steps, watch.reference_steps) == (3, False, 1, 3, 5)
    assert (watch.profile_memory, watch.timing_pass, watch.calibrate) == (True, False, False)
