"""stepscope.atomic: a file appears whole or not at all, the earlier one survives a failure, nothing is left."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepscope.atomic import atomic_file, write_atomic
from stepscope.errors import StepscopeError


def test_writes_and_leaves_nothing_else(tmp_path: Path) -> None:
    write_atomic(tmp_path / "a.json", "{}\n", what="report")
    write_atomic(tmp_path / "b.bin", b"\x00\x01", what="trace")
    assert (tmp_path / "a.json").read_text() == "{}\n" and (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.bin"]


def test_a_failure_midway_keeps_the_earlier_file(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("earlier")
    with pytest.raises(RuntimeError), atomic_file(target, what="HTML report") as f:
        f.write(b"half of a new pa")
        raise RuntimeError("the renderer broke")
    assert target.read_text() == "earlier"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_an_unwritable_place_is_named_with_the_reason(tmp_path: Path) -> None:
    target = tmp_path / "no-such-folder" / "report.json"
    with pytest.raises(StepscopeError, match=r"report.json: cannot write the JSON report \(no such file"):
        write_atomic(target, b"{}", what="JSON report")


def test_a_long_name_still_gets_a_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / ("r" * 250 + ".json")
    write_atomic(target, b"{}", what="report")
    assert target.read_bytes() == b"{}"
