"""The typed data every layer shares and nothing of ours sits below: the Report (`stepscope.report/1`), the
Diff (`stepscope.diff/1`), the Tune result (`stepscope.tune/1`), the run's telemetry (`stepscope.telemetry/1`),
with their JSON forms, and the run folder's file names.

The names below load on first use: capture, inside the user's program, imports `model.runfolder` and
`model.telemetry` alone, and must not load the Report's modules with them."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stepscope.model.diff import DIFF_SCHEMA, Diff, diff_to_json
    from stepscope.model.report import SCHEMA, Report, from_json, to_json
    from stepscope.model.tune import TUNE_SCHEMA, Tune, tune_from_json, tune_to_json

_LAZY = {"DIFF_SCHEMA": "diff", "Diff": "diff", "diff_to_json": "diff", "SCHEMA": "report", "Report": "report",
         "from_json": "report", "to_json": "report", "TUNE_SCHEMA": "tune", "Tune": "tune",
         "tune_from_json": "tune", "tune_to_json": "tune"}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stepscope.model' has no attribute {name!r}")
    return getattr(importlib.import_module(f"stepscope.model.{module}"), name)


__all__ = ["DIFF_SCHEMA", "SCHEMA", "TUNE_SCHEMA", "Diff", "Report", "Tune", "diff_to_json", "from_json", "to_json",
           "tune_from_json", "tune_to_json"]
