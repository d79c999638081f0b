"""The names of stepscope's own source annotations: record_function ranges that say which user line or
module path issued the ops inside them. Capture writes them, the line analysis reads them back.

    stepscope.line|train.py|57|main|loss.item()     a torch call made at train.py:57
    stepscope.module|model.layer1.0.conv1          a module's forward
"""

from __future__ import annotations

from typing import NamedTuple

OWN_ANNOTATION_PREFIX = "stepscope."  # recorded as ops by the fast record_function API; readers make them annotations
LINE_PREFIX = "stepscope.line|"
MODULE_PREFIX = "stepscope.module|"
MAX_CODE_CHARS = 120


class LineAnnotation(NamedTuple):
    file: str
    line: int
    function: str
    code: str


def line_annotation(file: str, line: int, function: str, code: str) -> str:
    """The range name for a torch call made at `file:line` (code text cut to MAX_CODE_CHARS)."""
    code = code.strip().replace("\n", " ")[:MAX_CODE_CHARS]
    return f"{LINE_PREFIX}{file}|{line}|{function}|{code}"


def module_annotation(path: str) -> str:
    """The range name for a module's forward, e.g. 'model.layer1.0.conv1'."""
    return MODULE_PREFIX + path


def parse_line_annotation(name: str) -> LineAnnotation | None:
    """The parts of a line annotation; None for any other name."""
    if not name.startswith(LINE_PREFIX):
        return None
    parts = name[len(LINE_PREFIX):].split("|", 3)
    if len(parts) != 4 or not parts[1].isdigit():
        return None
    return LineAnnotation(parts[0], int(parts[1]), parts[2], parts[3])


def parse_module_annotation(name: str) -> str | None:
    """The module path of a module annotation; None for any other name."""
    if not name.startswith(MODULE_PREFIX):
        return None
    return name[len(MODULE_PREFIX):] or None
