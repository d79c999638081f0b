"""Repairs for JSON that real tools write but strict parsers refuse, each counted for a note in the report.

Python's json.dump writes NaN and Infinity; Windows editors put a byte-order mark first; the profiler writes
bytes that are not UTF-8 (cut Python stack strings) and JSON-escaped lone surrogates. Every repair is a
linear scan in C (bytes.find, bytes.decode); none runs unless the strict parse failed.
"""

from __future__ import annotations

import re

BOM = b"\xef\xbb\xbf"
_NON_FINITE = (b"-Infinity", b"Infinity", b"NaN")
_VALUE_BEFORE = frozenset(b":,[")
_VALUE_AFTER = frozenset(b",]}")
_SPACE = b" \t\r\n"
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][0-9a-fA-F]{3}")
_REPLACEMENT_ESCAPE = b"\\ufffd"


def strip_bom(data: bytes | bytearray) -> tuple[bytes | bytearray | memoryview, bool]:
    if data[:3] == BOM:
        return memoryview(data)[3:], True
    return data, False


def repair(data: bytes | bytearray | memoryview) -> tuple[bytes, list[str]]:
    """The document with NaN/Infinity as null, lone surrogate escapes and bytes that are not UTF-8 replaced
    by U+FFFD; and a note per kind of repair made."""
    notes = []
    out, count = non_finite_to_null(bytes(data))
    if count:
        notes.append(f"{count} NaN or Infinity values (not JSON) were read as missing")
    out, count = replace_lone_surrogates(out)
    if count:
        notes.append(f"{count} lone UTF-16 surrogate escapes in names were replaced by U+FFFD")
    out, count = replace_invalid_utf8(out)
    if count:
        notes.append(f"{count} bytes that are not UTF-8 (in names) were replaced by U+FFFD")
    return out, notes


def non_finite_to_null(data: bytes) -> tuple[bytes, int]:
    """Bare NaN, Infinity and -Infinity in value position become null (the same text inside a string stays)."""
    candidates = []
    for token in _NON_FINITE:
        at = data.find(token)
        while at >= 0:
            end = at + len(token)
            if _is_value(data, at, end) and not (token == b"Infinity" and data[at - 1 : at] == b"-"):
                candidates.append((at, end))
            at = data.find(token, end)
    candidates.sort()
    spans = [span for span, outside in zip(candidates, _outside_strings(data, [a for a, _ in candidates]),
                                           strict=True) if outside]
    return _replace(data, spans, b"null"), len(spans)


def _is_value(data: bytes, start: int, end: int) -> bool:
    """Preceded by `:`, `,` or `[` and followed by `,`, `]` or `}` (whitespace aside): a bare JSON value."""
    before = data[max(0, start - 64) : start].rstrip(_SPACE)[-1:]
    after = data[end : end + 64].lstrip(_SPACE)[:1]
    return bool(before) and before[0] in _VALUE_BEFORE and bool(after) and after[0] in _VALUE_AFTER


def _outside_strings(data: bytes, positions: list[int]) -> list[bool]:
    """For sorted positions, whether each lies outside every JSON string: the parity of the quotes before it,
    counted in C between one position and the next (an escaped quote does not count; an escaped backslash
    before a quote does not escape it)."""
    outside, last, result = True, 0, []
    for at in positions:
        quotes = data.count(b'"', last, at) - data.count(b'\\"', last, at) + data.count(b'\\\\"', last, at)
        outside ^= quotes % 2 == 1
        result.append(outside)
        last = at
    return result


def replace_lone_surrogates(data: bytes) -> tuple[bytes, int]:
    r"""`\ud800` without its low half (or a low half alone) becomes `\ufffd`; proper pairs stay."""
    if b"\\ud" not in data and b"\\uD" not in data:
        return data, 0
    spans = []
    matches = list(_SURROGATE_ESCAPE.finditer(data))
    for i, m in enumerate(matches):
        if _escaped(data, m.start()):
            continue  # `\\ud800` is a backslash and the text "ud800"
        high = _is_high(m.group())
        nxt = matches[i + 1] if i + 1 < len(matches) else None
        prev = matches[i - 1] if i else None
        paired = (nxt is not None and nxt.start() == m.end() and not _is_high(nxt.group())) if high else (
            prev is not None and prev.end() == m.start() and _is_high(prev.group()))
        if not paired:
            spans.append((m.start(), m.end()))
    return _replace(data, spans, _REPLACEMENT_ESCAPE), len(spans)


def _escaped(data: bytes, at: int) -> bool:
    """Whether the backslash at `at` is itself escaped (an odd run of backslashes before it)."""
    run = len(data[max(0, at - 64) : at]) - len(data[max(0, at - 64) : at].rstrip(b"\\"))
    return run % 2 == 1


def _is_high(escape: bytes) -> bool:
    return escape[3:4].lower() in (b"8", b"9", b"a", b"b")


def replace_invalid_utf8(data: bytes) -> tuple[bytes, int]:
    """Bytes that are not UTF-8 become U+FFFD; returns the count of replacements. Decided here, never by the
    JSON library (msgspec's handling of such bytes changed between releases)."""
    if data.isascii():  # nearly every trace: one fast scan
        return data, 0
    try:
        data.decode("utf-8")
        return data, 0
    except UnicodeDecodeError:
        pass
    text = data.decode("utf-8", "replace")
    return text.encode("utf-8"), text.count("\ufffd") - data.count("\ufffd".encode())


def _replace(data: bytes, spans: list[tuple[int, int]], by: bytes) -> bytes:
    if not spans:
        return data
    parts, last = [], 0
    for start, end in spans:
        parts += [data[last:start], by]
        last = end
    parts.append(data[last:])
    return b"".join(parts)


def where(data: bytes | bytearray | memoryview, message: str) -> str:
    """msgspec's "... (byte N)" as a line, a column and the text around it."""
    found = re.search(r"\(byte (\d+)\)", message)
    if not found:
        return message
    buffer = bytes(data) if isinstance(data, memoryview) else data
    at = min(int(found.group(1)), len(buffer))
    line = buffer.count(b"\n", 0, at) + 1
    column = at - (buffer.rfind(b"\n", 0, at) + 1) + 1
    excerpt = bytes(buffer[max(0, at - 24) : at + 24]).decode("utf-8", "replace")
    return f"{message[: found.start()].strip()} at line {line}, column {column}, near {excerpt!r}"
