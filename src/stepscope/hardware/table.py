"""The hardware table: the shipped data files, the user's file applied, typed and looked up by device name."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepscope.errors import StepscopeError
from stepscope.hardware import userfile, userpaths
from stepscope.hardware.parse import TableError, parse_gpu, parse_interconnect, parse_price, parse_source
from stepscope.hardware.rows import GpuMatch, GpuSpec, Interconnect, Price, Source

# The package's own folder, not importlib.resources: that loads tempfile, shutil, bz2 and lzma (10-30 ms of
# every analysis) for files a wheel installs as plain files anyway.
_DATA = Path(__file__).resolve().parent / "data"


def _shipped() -> dict[str, Any]:
    def read(name: str) -> Any:
        return json.loads((_DATA / name).read_text())

    return {"sources": read("sources.json")["sources"], "gpus": read("gpus.json")["gpus"],
            "interconnects": read("interconnects.json")["interconnects"], "prices": read("prices.json")["prices"]}


def normalize_name(name: str) -> str:
    """Device names as torch, Kineto and nsys spell them differ in case and spacing only."""
    return " ".join(name.lower().split())


@dataclass(frozen=True)
class HardwareTable:
    """The GPU table: specs, interconnects and prices, each cell with its source."""

    gpus: tuple[GpuSpec, ...]
    sources: dict[str, Source]
    interconnects: tuple[Interconnect, ...]
    prices: tuple[Price, ...]
    user_file: Path | None = None  # the user's file that was applied, if any

    def gpu(self, gpu_id: str) -> GpuSpec | None:
        return next((g for g in self.gpus if g.id == gpu_id), None)

    def interconnect(self, link_id: str) -> Interconnect | None:
        return next((i for i in self.interconnects if i.id == link_id), None)

    def prices_for(self, gpu_id: str) -> tuple[Price, ...]:
        return tuple(p for p in self.prices if p.gpu == gpu_id)

    def lookup(self, name: str, sm_count: int | None = None) -> GpuMatch | None:
        """The row for a row id, an alias ('H100', 'a100-80gb') or a device name as torch or a trace reports it
        ('NVIDIA H100 80GB HBM3'); None when nothing matches. `sm_count` (the device's SMs or CUs) settles
        names shared by several parts ('AMD Instinct MI250X/MI250')."""
        key = normalize_name(name)
        for spec in self.gpus:
            if spec.id == key:
                return GpuMatch(spec, "id")
        for spec in self.gpus:
            if key in spec.aliases:
                return GpuMatch(spec, "alias")
        found = [spec for spec in self.gpus if any(re.search(p, key) for p in spec.match)]
        if not found:
            return self._family(name, key, sm_count)
        if len(found) == 1:
            return GpuMatch(found[0], "device name")
        return _settle(found, name, sm_count)


    def _family(self, name: str, key: str, sm_count: int | None) -> GpuMatch | None:
        """A device name no row spells, of a family the table has ('Tesla V100-DGXS-32GB', the DGX Station's V100):
        the family's first row with the same SM count, with a note saying so. Without the SM count nothing is
        assumed: a part of the family with other clocks or memory (an NVL board) must not pass for a row."""
        family = _FAMILY.search(key)
        if family is None or sm_count is None:
            return None
        token = family.group(1).replace(" ", "-")
        rows = [spec for spec in self.gpus if (spec.id == token or spec.id.startswith(f"{token}-"))
                and _per_device_sms(spec) == sm_count]
        if not rows:
            return None
        spec = rows[0]
        return GpuMatch(spec, "family", f"'{name}' is not in the hardware table: taken as the {spec.name}, of its "
                                        f"family with the same {sm_count} SMs; say which row it is with --origin, "
                                        "or add it in your hardware file")


# GPU families whose rows share a name prefix; a device name of one of them finds the family's row.
_FAMILY = re.compile(r"\b(v100|a100|h100|h200|b200|a10g|l40s|l4|t4|mi250x|mi250|mi300x|rtx 4090)\b")


def _per_device_sms(spec: GpuSpec) -> float | None:
    value = spec.sm_count.value
    return None if value is None else value / spec.devices_per_package


def _settle(found: list[GpuSpec], name: str, sm_count: int | None) -> GpuMatch:
    """Several rows share the device name: the SM/CU count decides, else the first row, said as such."""
    if sm_count is not None:
        for spec in found:
            if _per_device_sms(spec) == sm_count:
                return GpuMatch(spec, "device name", f"'{name}' names {len(found)} parts; {sm_count} SMs/CUs "
                                                     f"per device is the {spec.name}")
    names = ", ".join(s.name for s in found)
    return GpuMatch(found[0], "device name", f"'{name}' names several parts ({names}) and the SM/CU count "
                                             f"{'is unknown' if sm_count is None else f'{sm_count} fits none'}; "
                                             f"assumed the {found[0].name}")


def build_table(raw: dict[str, Any], user_file: Path | None = None) -> HardwareTable:
    sources = {sid: parse_source(sid, s) for sid, s in raw["sources"].items()}
    return HardwareTable(
        gpus=tuple(parse_gpu(g, sources) for g in raw["gpus"]),
        sources=sources,
        interconnects=tuple(parse_interconnect(i, sources) for i in raw["interconnects"]),
        prices=tuple(parse_price(p, sources) for p in raw["prices"]),
        user_file=user_file,
    )


def load_table(user_file: str | Path | None = None, use_user_file: bool = True) -> HardwareTable:
    """The table as shipped, with the user's hardware file applied (the given path, else the default one when
    it exists). Raises StepscopeError naming the file when the user's file cannot be used."""
    if not use_user_file:
        return build_table(_shipped())
    if user_file is not None:
        path = Path(user_file).expanduser()
    else:  # the default place: one that cannot be looked into or read is skipped, with a note
        default = userfile.default_user_file()
        if default is None or not userpaths.there(default, "the user's hardware file"):
            return build_table(_shipped())
        path = default
        try:
            path.read_bytes()
        except OSError as exc:
            userpaths.skip(path, "the user's hardware file", exc)
            return build_table(_shipped())
    try:
        merged = userfile.merge(_shipped(), userfile.read_user_file(path), path)
        return build_table(merged, user_file=path)
    except (ValueError, TableError, KeyError, TypeError) as exc:
        raise StepscopeError(f"{path}: {exc}", hint="see docs/hardware.md for the hardware file's shape") from exc


def lookup_gpu(name: str, sm_count: int | None = None) -> GpuMatch | None:
    """`load_table().lookup(name, sm_count)`: the row for a device name, id or alias, or None."""
    return load_table().lookup(name, sm_count)
