"""A HOME (and so the config and cache folders in it) that cannot be entered: the analysis goes on with the shipped
hardware table and says which places it skipped (it raised PermissionError on every GPU trace)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TRACE = Path(__file__).parent / "data" / "gpu_h100" / "input_bound" / "trace.json.gz"


def _analyze(home: Path, *, drop_root_access: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "STEPSCOPE_"))} | {"HOME": str(home)}
    prefix: list[str] = []
    if drop_root_access:  # root reads every folder: without these capabilities it is held to the folder's mode
        prefix = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
    return subprocess.run([*prefix, sys.executable, "-m", "stepscope", "analyze", str(TRACE), "--json", "-", "-q"],
                          capture_output=True, text=True, env=env, timeout=120)


def test_a_home_that_cannot_be_entered_is_skipped_with_a_note(tmp_path: Path) -> None:
    as_root = os.geteuid() == 0
    if as_root and shutil.which("setpriv") is None:
        pytest.skip("as root the folder's mode is held only without CAP_DAC_OVERRIDE, which setpriv drops")
    open_home, locked = tmp_path / "open", tmp_path / "locked"
    open_home.mkdir()
    locked.mkdir()
    (locked / ".config").mkdir()
    if as_root:
        os.chown(locked, 65534, 65534)  # another user's HOME, mode 700: root without DAC override cannot enter it
        locked.chmod(0o700)
    else:
        locked.chmod(0)
    try:
        done = _analyze(locked, drop_root_access=as_root)
        baseline = _analyze(open_home, drop_root_access=as_root)
    finally:
        locked.chmod(0o700)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    report, reference = json.loads(done.stdout), json.loads(baseline.stdout)
    skipped = [n for n in report["notes"] if str(locked) in n]
    assert skipped == [
        f"{locked}/.config/stepscope/hardware.json: cannot be read (permission denied); the user's hardware file "
        "skipped",
        f"{locked}/.cache/stepscope/achievable/nvidia-h100-80gb-hbm3.json: cannot be read (permission denied); the "
        "measurement kept there skipped"], report["notes"]
    # the same figures as with a HOME that holds nothing: the shipped table served
    assert [n for n in reference["notes"] if str(open_home) in n] == []
    assert report["utilization"] == reference["utilization"] and report["summary"] == reference["summary"]
