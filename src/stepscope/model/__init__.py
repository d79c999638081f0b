"""The typed data every layer shares and nothing of ours sits below: the Report (`stepscope.report/1`), the
Diff (`stepscope.diff/1`) and the Tune result (`stepscope.tune/1`), with their JSON forms."""

from stepscope.model.diff import DIFF_SCHEMA, Diff, diff_to_json
from stepscope.model.report import SCHEMA, Report, from_json, to_json
from stepscope.model.tune import TUNE_SCHEMA, Tune, tune_from_json, tune_to_json

__all__ = ["DIFF_SCHEMA", "SCHEMA", "TUNE_SCHEMA", "Diff", "Report", "Tune", "diff_to_json", "from_json", "to_json",
           "tune_from_json", "tune_to_json"]
