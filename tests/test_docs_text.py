"""The README and the docs hold no leftover placeholder (a `BENCH_PLACEHOLDER` once stood in the README where
tune's measured figures belong)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEFTOVER = re.compile(r"\w*PLACEHOLDER\w*|\bTODO:|\bFIXME\b|\bTBD\b")


def markdown_files() -> list[Path]:
    return sorted([*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md"), *(ROOT / "benchmarks").rglob("*.md"),
                   *(ROOT / "examples").rglob("*.md")])


def test_no_markdown_file_holds_a_placeholder() -> None:
    files = markdown_files()
    assert ROOT / "README.md" in files and ROOT / "docs" / "tune.md" in files
    found = [f"{path.relative_to(ROOT)}:{n}: {m.group(0)}" for path in files
             for n, line in enumerate(path.read_text().splitlines(), 1) for m in LEFTOVER.finditer(line)]
    assert not found, found


def test_the_pattern_finds_the_placeholders_it_is_for() -> None:
    found = [m.group(0) for m in LEFTOVER.finditer("BENCH_PLACEHOLDER x TODO: y FIXME TBD; todo list, TBDs")]
    assert found == ["BENCH_PLACEHOLDER", "TODO:", "FIXME", "TBD"]
