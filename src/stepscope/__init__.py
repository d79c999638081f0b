"""stepscope: find out why a PyTorch job is slow, which fix to apply, and where."""

from __future__ import annotations

__version__ = "0.1.0"

from stepscope.errors import StepscopeError  # noqa: E402
from stepscope.pipeline import analyze, analyze_traces  # noqa: E402
from stepscope.report.schema import Report  # noqa: E402

__all__ = ["Report", "StepscopeError", "__version__", "analyze", "analyze_traces"]
