"""The names of stepscope's own source annotations: record_function ranges that say which user line or
module path issued the ops inside them. Capture writes them, the line analysis reads them back.

    stepscope.line|train.py|57|main|loss.item()     a torch call made at train.py:57
    stepscope.module|model.layer1.0.conv1          a module's forward
"""

from __future__ import annotations

import re
from typing import NamedTuple

OWN_ANNOTATION_PREFIX = "stepscope."  # recorded as ops by the fast record_function API; readers make them annotations
LINE_PREFIX = "stepscope.line|"
MODULE_PREFIX = "stepscope.module|"
MAX_CODE_CHARS = 120


# Kineto writes range names into its JSON without escaping them, and its line layout differs between
# torch versions, so no repair after the fact is safe. Names are made JSON-safe here instead: '%', the
# JSON specials, control characters and the field separator are written as %XX, and read back exactly.
_UNSAFE = re.compile(r'[%"\\|\x00-\x1f\x7f]')
_ENCODED = re.compile(r"%([0-9A-F]{2})")


def encode_field(text: str) -> str:
    """`text` with every character that could break Kineto's JSON (or our '|' split) as %XX."""
    return _UNSAFE.sub(lambda m: f"%{ord(m.group()):02X}", text)


def decode_field(text: str) -> str:
    """The inverse of encode_field."""
    return _ENCODED.sub(lambda m: chr(int(m.group(1), 16)), text) if "%" in text else text


class LineAnnotation(NamedTuple):
    file: str
    line: int
    function: str
    code: str


def line_annotation(file: str, line: int, function: str, code: str) -> str:
    """The range name for a torch call made at `file:line` (code text cut to MAX_CODE_CHARS)."""
    code = code.strip().replace("\n", " ")[:MAX_CODE_CHARS]
    return f"{LINE_PREFIX}{encode_field(file)}|{line}|{encode_field(function)}|{encode_field(code)}"


def module_annotation(path: str) -> str:
    """The range name for a module's forward, e.g. 'model.layer1.0.conv1'."""
    return MODULE_PREFIX + encode_field(path)


def parse_line_annotation(name: str) -> LineAnnotation | None:
    """The parts of a line annotation; None for any other name."""
    if not name.startswith(LINE_PREFIX):
        return None
    parts = name[len(LINE_PREFIX):].split("|", 3)
    if len(parts) != 4 or not parts[1].isdigit():
        return None
    return LineAnnotation(decode_field(parts[0]), int(parts[1]), decode_field(parts[2]), decode_field(parts[3]))


def parse_module_annotation(name: str) -> str | None:
    """The module path of a module annotation; None for any other name."""
    if not name.startswith(MODULE_PREFIX):
        return None
    return decode_field(name[len(MODULE_PREFIX):]) or None
