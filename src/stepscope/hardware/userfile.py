"""The user's hardware file: rows added, cells replaced, sources and prices added.

Where it is: $STEPSCOPE_HARDWARE_FILE, else $XDG_CONFIG_HOME/stepscope/hardware.json (~/.config/...).
Its shape is the shipped files' shape, all in one object:
    {"sources": {"my-bench": {...}}, "gpus": [{"id": "h100-sxm", "tdp_w": {"value": 500, "source": "my-bench"}}],
     "interconnects": [...], "prices": [...]}
A gpu row whose id exists replaces the cells it gives (a peak per dtype); a new id adds a row. A figure given
without a source is attributed to the user file itself, so no cell is ever unsourced.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from stepscope.hardware.userpaths import user_folder

USER_FILE_ENV = "STEPSCOPE_HARDWARE_FILE"
USER_SOURCE_ID = "user-file"


def default_user_file() -> Path | None:
    """$STEPSCOPE_HARDWARE_FILE, else the config folder's; None when there is no home folder to look in."""
    explicit = os.environ.get(USER_FILE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    config = user_folder("XDG_CONFIG_HOME", ".config")
    return None if config is None else config / "stepscope" / "hardware.json"


def read_user_file(path: Path) -> dict[str, Any]:
    """The file's object; ValueError (with the reason) when it is not a JSON object of the expected parts."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read it ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(raw, dict):
        raise ValueError("expected a JSON object with 'gpus', 'sources', 'interconnects' or 'prices'")
    unknown = set(raw) - {"sources", "gpus", "interconnects", "prices", "schema", "note"}
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}")
    for key, kind in (("sources", dict), ("gpus", list), ("interconnects", list), ("prices", list)):
        if key in raw and not isinstance(raw[key], kind):
            raise ValueError(f"'{key}' must be a JSON {'object' if kind is dict else 'list'}")
    return raw


def _attribute(cell: Any) -> Any:
    """A user cell with a figure but no source is attributed to the user file."""
    has_figure = isinstance(cell, dict) and (cell.get("value") is not None or cell.get("dense") is not None)
    return {**cell, "source": USER_SOURCE_ID} if has_figure and "source" not in cell else cell


def _attributed_row(row: dict[str, Any]) -> dict[str, Any]:
    out = {key: _attribute(value) for key, value in row.items()}
    if isinstance(row.get("peak_tflops"), dict):
        out["peak_tflops"] = {d: _attribute(p) for d, p in row["peak_tflops"].items()}
    return out


def _merge_by_id(base: list[dict[str, Any]], extra: list[dict[str, Any]], deep: str | None) -> list[dict[str, Any]]:
    rows = {row["id"]: dict(row) for row in base}
    order = [row["id"] for row in base]
    for row in extra:
        if not isinstance(row, dict) or "id" not in row:
            raise ValueError("every gpu and interconnect row needs an 'id'")
        row = _attributed_row(row)
        if row["id"] in rows:
            merged = {**rows[row["id"]], **row}
            if deep and deep in row:
                merged[deep] = {**rows[row["id"]].get(deep, {}), **row[deep]}
            rows[row["id"]] = merged
        else:
            rows[row["id"]] = row
            order.append(row["id"])
    return [rows[i] for i in order]


def merge(shipped: dict[str, Any], user: dict[str, Any], path: Path) -> dict[str, Any]:
    """The shipped table with the user's file applied."""
    sources = {**shipped["sources"], USER_SOURCE_ID: {
        "title": f"your hardware file {path}", "publisher": "you", "url": str(path), "date": "", "kind": "user-file"}}
    sources.update(user.get("sources", {}))
    return {
        "sources": sources,
        "gpus": _merge_by_id(shipped["gpus"], user.get("gpus", []), deep="peak_tflops"),
        "interconnects": _merge_by_id(shipped["interconnects"], user.get("interconnects", []), deep=None),
        "prices": shipped["prices"] + [_sourced_price(p) for p in user.get("prices", [])],
    }


def _sourced_price(price: Any) -> Any:
    if not isinstance(price, dict):
        raise ValueError("every price must be a JSON object")
    return {"source": USER_SOURCE_ID, **price}
