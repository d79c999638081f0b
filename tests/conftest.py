"""Shared fixtures: the real traces beside the project, and a builder of synthetic ones."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

SHARED = Path(__file__).resolve().parents[2] / "shared"
KINETO = SHARED / "traces" / "kineto"
NSYS = SHARED / "traces" / "nsys"


def kineto_trace(name: str) -> Path:
    path = KINETO / name
    if not path.exists():
        pytest.skip(f"shared trace {path} is not available")
    return path


@pytest.fixture
def builder():
    from builder import TraceBuilder

    return TraceBuilder()


@pytest.fixture
def one_torch_thread():
    """torch on one thread while a test runs: on the shared 2-core machine OpenMP threads would only wait on
    each other (tests that run programs in this process use it, `pytestmark = usefixtures(...)`)."""
    import torch  # here, not at the top: most tests never need torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# CI services set CI: there a test whose tool is missing fails instead of skipping (the browser, tmux, the C hooks).
ON_CI = os.environ.get("CI", "").lower() not in ("", "0", "false")


def built_native_hooks():  # type: ignore[no-untyped-def]
    """The step meter's C hooks' module (capture/meter/_native.c), STEPSCOPE_PURE_PYTHON_HOOKS left to the caller.
    Where they were not built the test is skipped, except under CI on Linux with a C compiler (the install there
    builds them: a skip would leave them untested)."""
    import shutil
    import time

    from stepscope.capture.meter.native import native_hooks

    native = native_hooks(time.perf_counter_ns)
    if native is None:
        if ON_CI and sys.platform.startswith("linux") and (shutil.which("cc") or shutil.which("gcc")):
            pytest.fail("the step meter's C hooks (stepscope.capture.meter._native) were not built, though this "
                        "machine has a C compiler: see the install's output (`scripts/setup-venv test`)")
        pytest.skip("the step meter's C hooks were not built here (no C compiler, or not Linux)")
    return native


@pytest.fixture(params=["C hooks", "Python hooks"])
def hook_set(request, monkeypatch):
    """Runs a test of the step meter's hooks once with each set: the C hooks and the Python ones they stand in for."""
    from stepscope.capture.meter.native import OFF_SWITCH

    monkeypatch.setenv(OFF_SWITCH, "1" if request.param == "Python hooks" else "0")
    if request.param == "C hooks":
        built_native_hooks()
    return request.param


@pytest.fixture(scope="session")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder as `stepscope run` leaves it (its 5 MB report.html left out), made once per session for the
    tests that mangle its files (tests/run_folders.py)."""
    pytest.importorskip("torch")
    from run_folders import make_run

    return make_run(tmp_path_factory.mktemp("good"))
