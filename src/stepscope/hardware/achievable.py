"""The "achievable" column: what one large GEMM per dtype and one device copy really reach on a device.

Measured by `python -m stepscope.hardware.measure`, kept per device in the user's cache directory
($STEPSCOPE_CACHE_DIR, else $XDG_CACHE_HOME/stepscope, else ~/.cache/stepscope) under achievable/. A few
measurements ship with stepscope (data/achievable.json); the user's own take precedence. Without either,
only the datasheet is known, and reports say so.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope.atomic import write_atomic
from stepscope.errors import StepscopeError
from stepscope.hardware.rows import dtype_key
from stepscope.hardware.table import normalize_name
from stepscope.hardware.userpaths import skip, there, user_folder

CACHE_ENV = "STEPSCOPE_CACHE_DIR"


@dataclass(frozen=True)
class Achievable:
    """Measured rates for one device: FLOP/s per table dtype key and device-copy bytes/s (read + write)."""

    device: str
    measured_at: str
    flops_per_s: dict[str, float]
    memory_bytes_per_s: float | None
    origin: str  # the file it was read from, or how a shipped measurement was made
    torch: str | None = None

    def flops(self, dtype: str) -> float | None:
        key = dtype_key(dtype)
        return self.flops_per_s.get(key) if key else None


def cache_dir() -> Path | None:
    """The cache folder; None when there is no home folder to find it in."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = user_folder("XDG_CACHE_HOME", ".cache")
    return None if base is None else base / "stepscope"


def _slug(device: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", normalize_name(device)).strip("-") or "device"


def cache_file(device: str, directory: Path | None = None) -> Path | None:
    folder = directory or cache_dir()
    return None if folder is None else folder / "achievable" / f"{_slug(device)}.json"


def from_measurement(raw: dict[str, Any], origin: str) -> Achievable:
    """A measurement as `measure()` writes it ('float32', 'bfloat16' ... keys) -> typed, with table keys."""
    flops = {}
    for name, value in raw.get("flops_per_s", {}).items():
        key = "tf32" if name == "tf32" else dtype_key(name)
        if key and value:
            flops[key] = float(value)
    bandwidth = raw.get("memory_bytes_per_s")
    return Achievable(device=str(raw["device"]), measured_at=str(raw.get("measured_at", "")), flops_per_s=flops,
                      memory_bytes_per_s=float(bandwidth) if bandwidth else None, origin=origin,
                      torch=raw.get("torch"))


def save_achievable(measurement: dict[str, Any], directory: Path | None = None) -> Path:
    """Keep a measurement for its device in the cache; returns the file written (an older one is replaced:
    the newest measurement of a device is the one that counts)."""
    path = cache_file(str(measurement["device"]), directory)
    if path is None:
        raise StepscopeError("no home folder to keep the measurement in", hint=f"set {CACHE_ENV} to a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StepscopeError(f"{path.parent}: cannot create the cache folder ({(exc.strerror or str(exc)).lower()})",
                             hint=f"set {CACHE_ENV} to a folder you can write to") from None
    return write_atomic(path, json.dumps(measurement, indent=1), what="measurement")


def _shipped() -> list[Achievable]:
    doc = json.loads((Path(__file__).resolve().parent / "data" / "achievable.json").read_text())
    return [from_measurement(m, m.get("origin", "shipped with stepscope")) for m in doc["measurements"]]


def achievable_for(device: str, directory: Path | None = None) -> Achievable | None:
    """The measurement for a device name: the user's own if kept, else a shipped one, else None (only the
    datasheet is known). An unreadable cache file counts as absent: it is a cache."""
    path = cache_file(device, directory)
    if path is not None and there(path, "the measurement kept there"):
        try:
            return from_measurement(json.loads(path.read_text()), str(path))
        except OSError as exc:
            skip(path, "the measurement kept there", exc)
        except (ValueError, KeyError, TypeError):
            pass
    key = normalize_name(device)
    return next((a for a in _shipped() if normalize_name(a.device) == key), None)
