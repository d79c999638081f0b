"""Cost and energy, against hand computation: the price chosen from the dated table or the user's, the staleness
warning, cost per million samples and per epoch; energy on the origin from NVML power, on a target estimated."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from builder import input_bound_trace
from stepscope.analysis.facts import compute_facts
from stepscope.errors import StepscopeError
from stepscope.hardware import load_table
from stepscope.model.telemetry import telemetry_from_json
from stepscope.predict import PredictRequest, predict
from stepscope.predict.cost import cost_per_million_samples, parse_prices, price_for
from stepscope.predict.energy import IDLE_SHARE, origin_energy, target_power, window_power
from stepscope.trace.kineto import read_kineto

TABLE = load_table(use_user_file=False)
DATA = Path(__file__).parent / "data"


def test_the_table_price_is_per_gpu_and_dated() -> None:
    """prices.json: p5.48xlarge (8 x H100) $39.33/h as a Capacity Block, as of 2024-12."""
    price = price_for("h100-sxm", TABLE, {}, today=dt.date(2025, 3, 1))
    assert price is not None
    assert price.usd_per_gpu_hour == pytest.approx(39.33 / 8)
    assert "p5.48xlarge" in price.what and "2024-12" in price.what
    assert price.stale is None  # three months old


def test_a_price_older_than_six_months_warns() -> None:
    price = price_for("h100-sxm", TABLE, {}, today=dt.date(2025, 7, 1))
    assert price is not None and price.stale is not None and "2024-12" in price.stale


def test_on_demand_wins_over_reserved_and_the_users_price_over_both() -> None:
    """a10g has one on-demand row (g5.xlarge, $1.006/h for 1 GPU)."""
    assert price_for("a10g", TABLE, {}).usd_per_gpu_hour == pytest.approx(1.006)  # type: ignore[union-attr]
    assert price_for("a10g", TABLE, {"a10g": 0.5}).usd_per_gpu_hour == 0.5  # type: ignore[union-attr]
    assert price_for("l4", TABLE, {}) is None


def test_price_options_parse_by_alias() -> None:
    assert parse_prices(["h100=2.49,l4=$0.8", "a100-80gb=1.5"], TABLE) == {
        "h100-sxm": 2.49, "l4": 0.8, "a100-sxm-80gb": 1.5}
    for bad in (["h100"], ["h100=abc"], ["h100=-1"], ["nosuchgpu=1"]):
        with pytest.raises(StepscopeError):
            parse_prices(bad, TABLE)


def test_cost_per_million_samples() -> None:
    """$3.60/h is $0.001/s; at 1000 samples/s a million samples take 1000 s: $1."""
    assert cost_per_million_samples(3.6, 1000.0) == pytest.approx(1.0)
    assert cost_per_million_samples(None, 1000.0) is None
    assert cost_per_million_samples(3.6, None) is None


def test_origin_power_is_the_mean_over_the_telemetry_windows_samples() -> None:
    """tests/data/gpu_h100/input_bound/telemetry.json: window.gpu[0].power_mean_w is 122.09 W."""
    telemetry = telemetry_from_json((DATA / "gpu_h100" / "input_bound" / "telemetry.json").read_bytes())
    assert window_power(telemetry.window) == pytest.approx(122.09)  # the report's run.telemetry
    assert window_power(None) is None
    assert origin_energy(122.09, 38_509_264.2) == pytest.approx(122.09 * 0.0385092642)


def test_target_power_scales_by_tdp_and_utilisation() -> None:
    """Origin 300 W measured at 50% utilisation on a 700 W GPU; target 350 W TDP at 90%:
    300 x 350/700 x (0.18 + 0.82 x 0.9) / (0.18 + 0.82 x 0.5)."""
    power, how = target_power(300.0, 700.0, 350.0, 0.5, 0.9)
    load = (IDLE_SHARE + (1 - IDLE_SHARE) * 0.9) / (IDLE_SHARE + (1 - IDLE_SHARE) * 0.5)
    assert power == pytest.approx(300 * 0.5 * load)
    assert "estimated" in how
    power, how = target_power(None, 700.0, 72.0, None, 1.0)
    assert power == pytest.approx(72.0) and "TDP" in how
    assert target_power(300.0, 700.0, None, 0.5, 0.5)[0] is None


def test_the_section_puts_cost_and_energy_together(tmp_path: Path) -> None:
    """The synthetic input-bound trace (A100, 4 steps) predicted on an A10G at a price of $3.6/h, batch 100."""
    facts = compute_facts(read_kineto(input_bound_trace().write(tmp_path / "t.json")))
    p = predict(facts, PredictRequest(gpus=("a10g", "h100"), prices={"a10g": 3.6}, samples_per_epoch=10_000),
                batch_size=100, power_w=200.0, table=TABLE, today=dt.date(2025, 1, 1))
    a10g, h100 = p.targets
    step_s = a10g.step_time_us / 1e6
    assert a10g.samples_per_s == pytest.approx(100 / step_s, rel=1e-3)
    assert a10g.cost_per_million_samples == pytest.approx(3.6 / 3600 * 1e6 / (100 / step_s), rel=1e-3)
    assert a10g.cost_per_epoch == pytest.approx(3.6 / 3600 * 100 * step_s, rel=1e-3)  # 100 steps
    assert p.origin.energy_j_per_step == pytest.approx(200.0 * p.origin.step_time_us / 1e6, rel=1e-3)
    # the A10G has no TDP in the table: its energy is not estimated, and it says so
    assert a10g.energy_j_per_step is None
    assert any("no TDP" in a for a in a10g.assumptions)
    assert h100.energy_j_per_step is not None
    assert h100.fastest and not a10g.fastest
    assert p.warnings == []  # the H100's price (2024-12) is new on 2025-01-01
