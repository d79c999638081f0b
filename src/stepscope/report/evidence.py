"""Evidence and table fields as words with units. A field's name carries its unit as a token (`..._us_per_step`,
`..._bytes`, `..._gb_s`, `..._share`): the token chooses how the number reads and leaves the label, which is
said in words ("dataloader_us_per_step" -> "DataLoader time per step", "31.0 ms")."""

from __future__ import annotations

from typing import Any

from stepscope.units import bytes_cell, count_cell, share_cell, us_cell

# Abbreviations in field names, as a reader writes them.
WORDS = {"gpu": "GPU", "cpu": "CPU", "htod": "host-to-device", "dtoh": "device-to-host", "dtod": "device-to-device",
         "dataloader": "DataLoader", "mfu": "MFU", "hfu": "HFU", "nvml": "NVML", "sm": "SM", "sms": "SMs",
         "num": "number of", "utilization": "utilisation", "tflops": "TFLOP/s", "gflops": "GFLOP/s", "flops": "FLOPs"}
IDENTIFIERS = {"line", "rank", "device", "step", "rung", "id", "index"}  # numbers that name, never counted with commas
SHARE_TOKENS = {"share", "utilization", "frac", "fraction", "overhead"}
# A time token after one of these words says no more than the word does ("wait time" -> "wait").
TIME_WORDS = {"time", "wait", "blocked", "idle", "exposed"}


def _tokens(key: str) -> list[str]:
    return [t for t in key.lower().split("_") if t]


def _unit(tokens: list[str]) -> str | None:
    """The unit a field's name says: us, ns, bytes, gb_s, share, factor, speedup, shape; None for a plain number."""
    for i, tok in enumerate(tokens):
        if tok == "gb" and tokens[i + 1: i + 2] == ["s"]:
            return "gb_s"
        if tok in ("us", "ns", "bytes"):
            return tok
        if tok in SHARE_TOKENS:
            return "share"
        if tok in ("factor", "speedup", "shape"):
            return tok
    return None


def label(key: str, *, table: bool = False) -> str:
    """A field's name in words: unit tokens go (the value carries the unit), abbreviations are spelled out.
    `table`: a column header, where a lone time token is simply dropped ("cpu_fwd_us" -> "CPU fwd")."""
    tokens, out = _tokens(key), []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "gb" and tokens[i + 1: i + 2] == ["s"]:
            i += 2
            if "bandwidth" not in tokens:
                out.append("bandwidth")
            continue
        if tok in ("us", "ns"):
            if not table and not (out and out[-1] in TIME_WORDS) and "time" not in tokens:
                out.append("time")
        elif tok != "bytes":
            out.append(WORDS.get(tok, tok))
        i += 1
    return " ".join(out) or ("size" if "bytes" in tokens else "time" if _unit(tokens) in ("us", "ns") else key)


def value_text(key: str, value: Any) -> str:
    """A value as its field's unit says it reads: time in ms or µs, sizes in MB, bandwidth in GB/s, shares in %,
    factors as 2x, shapes as 32x3x224x224; a dict's entries in order (step ids by number, else largest first)."""
    unit = _unit(_tokens(key))
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) and key in IDENTIFIERS:
        return str(value)
    if isinstance(value, (int, float)):
        return _number(unit, value)
    if isinstance(value, dict):
        return _mapping(key, value)
    if isinstance(value, (list, tuple)):
        if not value:
            return "none"
        if unit == "shape":
            return "x".join(str(v) for v in value)
        return ", ".join(value_text(key, v) for v in _ordered(list(value)))
    return str(value)


def _number(unit: str | None, value: float) -> str:
    if unit == "us":
        return us_cell(value)
    if unit == "ns":
        return us_cell(value / 1000)
    if unit == "bytes":
        return bytes_cell(value)
    if unit == "gb_s":
        return f"{value:,.3g} GB/s" if abs(value) < 1000 else f"{value:,.0f} GB/s"
    if unit == "share":
        return share_cell(value, 1)
    if unit in ("factor", "speedup"):
        return f"{value:g}x" if unit == "factor" else f"{value:.2f}x"
    return count_cell(value) if isinstance(value, int) or abs(value) >= 100 else f"{value:.3g}"


def _is_number(text: Any) -> bool:
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


def _ordered(values: list[Any]) -> list[Any]:
    """Step ids (numbers as text) by number: '7' before '10'; anything else as given."""
    if values and all(isinstance(v, str) and _is_number(v) for v in values):
        return sorted(values, key=float)
    return values


def _mapping(key: str, value: dict[str, Any]) -> str:
    """A dict as words. With a `name`, the thing named and its other fields ('cudaLaunchKernel (67.4 µs)'); else
    its entries, the inner keys (step ids, op names) labels and the outer key the unit: by step id when they are
    numbers, else the largest value first."""
    if "name" in value:
        rest = []
        for k, v in sorted(value.items(), key=lambda kv: kv[1] is True):  # figures first, then the flags set
            if k == "name" or v is None or v is False:
                continue
            words = label(k)
            rest.append(words if v is True else value_text(k, v) if words == "time" else f"{words} {value_text(k, v)}")
        return f"{value['name']}" + (f" ({', '.join(rest)})" if rest else "")
    keys = list(value)
    if keys and all(_is_number(k) for k in keys):
        keys = sorted(keys, key=float)
    elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values()):
        keys = sorted(keys, key=lambda k: -value[k])
    return ", ".join(f"{k}: {value_text(key, value[k])}" for k in keys)


def evidence_items(evidence: dict[str, Any]) -> list[tuple[str, str]]:
    """Evidence as (label, text) pairs in words, a field with no value left out; in key order, as in report.json,
    so a page made by `analyze` and one made again by `report` are the same."""
    return [(label(key), value_text(key, value)) for key, value in sorted(evidence.items()) if value is not None]
