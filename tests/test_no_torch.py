"""Analysing a trace must work where torch is not installed."""

from __future__ import annotations

import subprocess
import sys

from conftest import kineto_trace

BLOCK_TORCH = """
import sys
sys.modules["torch"] = None  # any 'import torch' now raises ImportError
from stepscope.cli import main
sys.exit(main(["analyze", sys.argv[1], "--json", "-", "-q"]))
"""


def test_analyze_without_torch() -> None:
    path = kineto_trace("a100_event_sync_tiny.json.gz")
    done = subprocess.run([sys.executable, "-c", BLOCK_TORCH, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert '"schema": "stepscope.report/1"' in done.stdout
