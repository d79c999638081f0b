"""stepscope: find out why a PyTorch job is slow, which fix to apply, and where.

The public surface is loaded lazily: `import stepscope` (and capture, which runs inside the user's
program) loads none of the analysis until a name that needs it is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepscope.errors import StepscopeError
from stepscope.version import __version__

if TYPE_CHECKING:
    from stepscope.api import profile, step
    from stepscope.model.report import Report
    from stepscope.pipeline import AnalyzeOptions, analyze
    from stepscope.predict import PredictRequest

# name -> the module that defines it
_LAZY = {
    "analyze": "stepscope.pipeline",
    "AnalyzeOptions": "stepscope.pipeline",
    "Report": "stepscope.model.report",
    "profile": "stepscope.api",
    "step": "stepscope.api",
    "PredictRequest": "stepscope.predict",
    # `%load_ext stepscope` in IPython or Jupyter: the `%%stepscope` cell magic
    "load_ipython_extension": "stepscope.live.notebook",
    "unload_ipython_extension": "stepscope.live.notebook",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stepscope' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = ["AnalyzeOptions", "PredictRequest", "Report", "StepscopeError", "__version__", "analyze", "profile",
           "step"]
