"""Energy per step: measured on the origin from NVML power, estimated on a target from its predicted time and
its power at the predicted utilisation."""

from __future__ import annotations

from stepscope.model.telemetry import WindowSummary

# A GPU with a CUDA context and nothing running draws this share of its TDP: 122 W of 700 W on our H100 and
# 127-128 W on our H200 (tests/data/gpu_h*/*/telemetry.json, samples at 0% utilisation after start-up).
IDLE_SHARE = 0.18


def window_power(window: WindowSummary | None, device_name: str | None = None) -> float | None:
    """Mean NVML power (W) over the telemetry window's samples, of the GPU named (else the first).

    The window's energy counter is not used: the window is marked on the host clock, and with a deep GPU queue
    the GPU runs behind it, so the counter measures a different stretch of work than the steps."""
    gpus = window.gpu if window is not None else []
    chosen = next((g for g in gpus if device_name and g.name == device_name), gpus[0] if gpus else None)
    power = chosen.power_mean_w if chosen is not None else None
    return float(power) if power else None


def origin_energy(power_w: float | None, step_ns: float | None) -> float | None:
    """J per step on the origin: mean power x step time."""
    if power_w is None or not step_ns:
        return None
    return power_w * step_ns / 1e9


def _load(utilization: float | None) -> float:
    u = min(max(utilization or 0.0, 0.0), 1.0)
    return IDLE_SHARE + (1 - IDLE_SHARE) * u


def target_power(origin_power_w: float | None, origin_tdp: float | None, target_tdp: float | None,
                 origin_util: float | None, target_util: float | None) -> tuple[float | None, str]:
    """The target's power at its predicted utilisation (W) and how it was estimated, in words.

    From the origin's measured power when there is one: scaled by the TDPs and by the change of utilisation
    (idle draws IDLE_SHARE of TDP, busy all of it, linearly between); else from the target's TDP alone."""
    if target_tdp is None:
        return None, "no TDP in the table for this GPU: energy not estimated"
    if origin_power_w is not None and origin_tdp:
        power = origin_power_w * target_tdp / origin_tdp * _load(target_util) / _load(origin_util)
        return power, ("energy estimated: the origin's measured power scaled by TDP and by the predicted "
                       "utilisation")
    return target_tdp * _load(target_util), "energy estimated from TDP and the predicted utilisation alone"
