"""Turn the table's JSON into typed rows, refusing a figure without a source or a missing one without a reason."""

from __future__ import annotations

from typing import Any

from stepscope.hardware.rows import DTYPES, Cell, GpuSpec, Interconnect, Peak, Price, Source

_CELLS = ("memory_gb", "memory_bandwidth_gbs", "sm_count", "boost_clock_mhz", "tdp_w", "links")
_SOURCE_KINDS = {"datasheet", "product-page", "whitepaper", "vendor-docs", "device-report", "third-party", "user-file"}
_PRICINGS = {"on_demand", "spot", "reserved"}
SPARSE_TOLERANCE = 0.02  # a "sparse" figure must be twice the dense one, within 2% (datasheets round)


class TableError(ValueError):
    """A row or cell the table cannot use; the message names it."""


def _need(raw: dict[str, Any], key: str, where: str) -> Any:
    if key not in raw:
        raise TableError(f"{where}: '{key}' is missing")
    return raw[key]


def _sourced(raw: dict[str, Any], value_key: str, where: str, sources: dict[str, Source]) -> None:
    if raw.get(value_key) is None:
        if not raw.get("note"):
            raise TableError(f"{where}: no figure and no note saying why")
        return
    source = raw.get("source")
    if source not in sources:
        raise TableError(f"{where}: the figure's source {source!r} is not in the sources table")


def parse_source(source_id: str, raw: dict[str, Any]) -> Source:
    where = f"source {source_id}"
    kind = _need(raw, "kind", where)
    if kind not in _SOURCE_KINDS:
        raise TableError(f"{where}: kind {kind!r} is not one of {sorted(_SOURCE_KINDS)}")
    return Source(id=source_id, title=_need(raw, "title", where), publisher=raw.get("publisher", ""),
                  url=raw.get("url"), date=str(raw.get("date", "")), kind=kind, retrieved=raw.get("retrieved"),
                  read_via=raw.get("read_via"), note=raw.get("note"))


def parse_cell(raw: Any, where: str, sources: dict[str, Source]) -> Cell:
    if not isinstance(raw, dict):
        raise TableError(f"{where}: expected an object with 'value' and 'source'")
    _sourced(raw, "value", where, sources)
    value = raw.get("value")
    return Cell(tuple(value) if isinstance(value, list) else value, raw.get("source"), raw.get("note"))


def parse_peak(raw: Any, where: str, sources: dict[str, Source]) -> Peak:
    if not isinstance(raw, dict) or "value" in raw:
        raise TableError(f"{where}: a peak is {{'dense': TFLOP/s, 'sparse': optional, 'source': ...}}")
    _sourced(raw, "dense", where, sources)
    dense, sparse = raw.get("dense"), raw.get("sparse")
    if sparse is not None and (dense is None or abs(sparse - 2 * dense) > SPARSE_TOLERANCE * sparse):
        raise TableError(f"{where}: the sparse figure {sparse} is not twice the dense one {dense}; "
                         "dense and sparse figures must not be mixed")
    return Peak(dense=None if dense is None else float(dense), sparse=None if sparse is None else float(sparse),
                source=raw.get("source"), note=raw.get("note"))


def parse_gpu(raw: dict[str, Any], sources: dict[str, Source]) -> GpuSpec:
    gpu_id = _need(raw, "id", "a gpu row")
    where = f"gpu {gpu_id}"
    peaks_raw = raw.get("peak_tflops", {})
    unknown = set(peaks_raw) - set(DTYPES)
    if unknown:
        raise TableError(f"{where}: unknown dtypes {sorted(unknown)} (known: {', '.join(DTYPES)})")
    peaks = {d: parse_peak(peaks_raw[d], f"{where} peak_tflops.{d}", sources) for d in DTYPES if d in peaks_raw}
    cells = {name: parse_cell(raw[name], f"{where} {name}", sources) for name in _CELLS if name in raw}
    per_package = int(raw.get("devices_per_package", 1))
    if per_package < 1:
        raise TableError(f"{where}: devices_per_package must be at least 1")
    return GpuSpec(id=gpu_id, name=_need(raw, "name", where), vendor=raw.get("vendor", ""),
                   architecture=raw.get("architecture", ""), form_factor=raw.get("form_factor", ""),
                   match=tuple(raw.get("match", ())), aliases=tuple(a.lower() for a in raw.get("aliases", ())),
                   devices_per_package=per_package, peaks=peaks, note=raw.get("note"), **cells)


def parse_interconnect(raw: dict[str, Any], sources: dict[str, Source]) -> Interconnect:
    link_id = _need(raw, "id", "an interconnect row")
    where = f"interconnect {link_id}"
    return Interconnect(id=link_id, name=_need(raw, "name", where), kind=raw.get("kind", ""),
                        links=int(raw.get("links", 0)),
                        bidirectional_gbs=parse_cell(_need(raw, "bidirectional_gbs", where),
                                                     f"{where} bidirectional_gbs", sources),
                        per_direction_gbs=parse_cell(_need(raw, "per_direction_gbs", where),
                                                     f"{where} per_direction_gbs", sources))


def parse_price(raw: dict[str, Any], sources: dict[str, Source]) -> Price:
    where = f"price {raw.get('provider')} {raw.get('instance')} {raw.get('region')}"
    pricing = _need(raw, "pricing", where)
    if pricing not in _PRICINGS:
        raise TableError(f"{where}: pricing {pricing!r} is not one of {sorted(_PRICINGS)}")
    if raw.get("source") not in sources:
        raise TableError(f"{where}: the price's source {raw.get('source')!r} is not in the sources table")
    if not raw.get("as_of"):
        raise TableError(f"{where}: a price needs the date it held ('as_of')")
    gpu_count = int(_need(raw, "gpu_count", where))
    if gpu_count < 1:
        raise TableError(f"{where}: gpu_count must be at least 1")
    return Price(provider=_need(raw, "provider", where), instance=_need(raw, "instance", where),
                 gpu=_need(raw, "gpu", where), gpu_count=gpu_count, region=raw.get("region"), pricing=pricing,
                 term=raw.get("term"), usd_per_hour=float(_need(raw, "usd_per_hour", where)),
                 as_of=str(raw["as_of"]), source=raw["source"], retrieved=raw.get("retrieved"),
                 note=raw.get("note"))
