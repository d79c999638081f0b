"""Shared fixtures: the real traces beside the project, and a builder of synthetic ones."""

from __future__ import annotations

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
