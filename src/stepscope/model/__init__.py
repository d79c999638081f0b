"""The typed data every layer shares and nothing of ours sits below: the Report (`stepscope.report/1`) and the
Diff (`stepscope.diff/1`), with their JSON forms."""

from stepscope.model.diff import DIFF_SCHEMA, Diff, diff_to_json
from stepscope.model.report import SCHEMA, Report, from_json, to_json

__all__ = ["DIFF_SCHEMA", "SCHEMA", "Diff", "Report", "diff_to_json", "from_json", "to_json"]
