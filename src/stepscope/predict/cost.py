"""What a GPU costs per hour: the user's own price, else the hardware table's dated prices, with a warning when
the price is older than six months."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from stepscope.errors import StepscopeError
from stepscope.hardware import HardwareTable, Price

STALE_AFTER_DAYS = 183  # six months
PRICING_ORDER = ("on_demand", "reserved", "spot")  # what a price with no further qualification means first


@dataclass(frozen=True)
class GpuPrice:
    """A GPU-hour's price and where it comes from."""

    usd_per_gpu_hour: float
    what: str  # in words: "aws p5.48xlarge on_demand us-east-1, 2024-12 (8 GPUs)" or "your --price"
    source: str | None  # the table's source id
    stale: str | None = None  # the warning, when the price is old


def parse_prices(items: list[str], table: HardwareTable) -> dict[str, float]:
    """`--price gpu=USD_PER_HOUR` items (each may hold several, comma-separated) -> {table id: USD per GPU-hour}."""
    prices: dict[str, float] = {}
    for item in (p.strip() for raw in items for p in raw.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        try:
            usd = float(value.strip().lstrip("$"))
        except ValueError:
            usd = -1.0
        if not sep or usd < 0:
            raise StepscopeError(f"--price {item!r}: expected GPU=USD_PER_GPU_HOUR, e.g. h100=2.49")
        match = table.lookup(name.strip())
        if match is None:
            raise StepscopeError(f"--price {item!r}: unknown GPU {name.strip()!r}",
                                 hint="use a GPU id or alias from docs/hardware.md")
        prices[match.spec.id] = usd
    return prices


def _as_date(text: str) -> dt.date | None:
    for fmt in ("%Y-%m-%d", "%Y-%m", "%Y"):
        try:
            return dt.datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    return None


def _stale(price: Price, today: dt.date) -> str | None:
    when = _as_date(price.as_of)
    if when is None or (today - when).days <= STALE_AFTER_DAYS:
        return None
    return (f"the {price.gpu} price ({price.provider} {price.instance}, {price.pricing}) dates from {price.as_of}, "
            f"more than six months ago: check the provider's page or give --price {price.gpu}=USD_PER_HOUR")


def _rank(price: Price) -> tuple[int, float]:
    order = PRICING_ORDER.index(price.pricing) if price.pricing in PRICING_ORDER else len(PRICING_ORDER)
    return order, price.usd_per_gpu_hour


def price_for(gpu_id: str, table: HardwareTable, overrides: dict[str, float],
              today: dt.date | None = None) -> GpuPrice | None:
    """The user's price for the GPU, else the table's cheapest on-demand (then reserved, then spot) price per
    GPU-hour; None when the table has none."""
    if gpu_id in overrides:
        return GpuPrice(overrides[gpu_id], "your --price", None)
    rows = table.prices_for(gpu_id)
    if not rows:
        return None
    best = min(rows, key=_rank)
    region = f" {best.region}" if best.region else ""
    what = (f"{best.provider} {best.instance} ({best.gpu_count} GPU{'s' if best.gpu_count > 1 else ''}), "
            f"{best.pricing.replace('_', '-')}{f' ({best.term})' if best.term else ''}{region}, as of {best.as_of}")
    return GpuPrice(best.usd_per_gpu_hour, what, best.source, _stale(best, today or dt.date.today()))


def cost_per_million_samples(usd_per_hour: float | None, samples_per_s: float | None) -> float | None:
    if usd_per_hour is None or not samples_per_s:
        return None
    return usd_per_hour / 3600 * 1e6 / samples_per_s


def cost_per_step(usd_per_hour: float | None, step_s: float) -> float | None:
    return None if usd_per_hour is None else usd_per_hour / 3600 * step_s
