"""Replace the generated part of a markdown file: the lines between a benchmark's start and end markers."""

from __future__ import annotations

from pathlib import Path


def replace_section(path: Path, start: str, end: str, lines: list[str]) -> None:
    """Put `lines` between the `start` and `end` markers of `path` (the markers stay); exits if either is missing."""
    doc = path.read_text()
    if start not in doc or end not in doc:
        raise SystemExit(f"{path}: no {start} ... {end} section to replace")
    head, rest = doc.split(start, 1)
    path.write_text(head + start + "\n" + "\n".join(lines) + "\n" + end + rest.split(end, 1)[1])
