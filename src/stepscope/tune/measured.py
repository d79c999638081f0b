"""The measured runs of a tune: each child's timed windows as the statistics read them (a `RunSeries`) and as
tune.json keeps them (a `Measurement`, a `TrialRun`), and which runs of one configuration pair up to show how much
runs differ by themselves."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from stepscope.model.tune import Measurement, TrialRun, WindowStat
from stepscope.tune.paired import Gain, RunSeries, Window, throughput
from stepscope.tune.trial import ChildRun

PAIR_DISTANCE = 2  # runs of one configuration this close in the order ran (one other run between) pair up


def config_key(fixes: dict[str, dict[str, Any]]) -> str:
    return json.dumps(fixes, sort_keys=True)


@dataclass(frozen=True)
class Run:
    """One measured child run: its configuration, when it ran (tune clock, mid-run), its order in the tune."""

    key: str
    child: ChildRun
    at: float
    index: int

    @property
    def ok(self) -> bool:
        return self.child.status == "measured" and self.child.result is not None and bool(self.windows)

    @property
    def windows(self) -> tuple[Window, ...]:
        result = self.child.result
        if result is None:
            return ()
        return tuple(Window(w.samples, w.seconds) for w in result.windows if w.kind == "timed" and w.seconds > 0)

    @property
    def rate(self) -> float:
        return throughput(self.windows)

    @property
    def steps(self) -> int:
        result = self.child.result
        return sum(w.steps for w in result.windows if w.kind == "timed") if result is not None else 0

    @property
    def seconds(self) -> float:
        return sum(w.seconds for w in self.windows)

    @property
    def unit(self) -> str:
        return self.child.result.unit if self.child.result is not None else "steps"

    def series(self, arm: str) -> RunSeries:
        return RunSeries(arm=arm, at=self.at, windows=self.windows)

    def log_name(self) -> str:
        return f"{self.child.log.parent.name}/{self.child.log.name}"

    def trial_run(self, arm: str) -> TrialRun:
        result = self.child.result
        return TrialRun(arm=arm, rate=round(self.rate, 3) if self.ok else None, windows=window_stats(self),
                        wall_s=round(self.child.wall_s, 2), compile_s=result.compile_s if result else None,
                        log=self.log_name())


def window_stats(run: Run) -> list[WindowStat]:
    result = run.child.result
    if result is None:
        return []
    return [WindowStat(samples=round(w.samples, 3), seconds=round(w.seconds, 6), steps=w.steps)
            for w in result.windows if w.kind == "timed"]


def rates(runs: list[Run], batch: int | None) -> dict[str, float | None]:
    """Step time, steps/s and samples/s over the runs' windows pooled."""
    steps = sum(r.steps for r in runs)
    seconds = sum(r.seconds for r in runs)
    if not steps or seconds <= 0:
        return {"step_time_us": None, "steps_per_s": None, "samples_per_s": None}
    samples = sum(w.samples for r in runs for w in r.windows)
    unit = runs[0].unit
    per_s = samples / seconds if unit == "samples" else (steps * batch / seconds if batch else None)
    return {"step_time_us": round(seconds / steps * 1e6, 3), "steps_per_s": round(steps / seconds, 4),
            "samples_per_s": round(per_s, 2) if per_s else None}


def in_ladder_unit(g: Gain, run: Run, batch: int | None, samples_known: bool) -> tuple[float, float]:
    """The gain's two sides (`Gain.rate`, `Gain.reference_rate`, in the windows' unit) in the ladder's: samples/s
    where the baseline has them (windows that count steps times the batch), else steps/s. Rounded as `rates`."""
    per = batch if samples_known and batch and run.unit == "steps" else 1
    return _rounded(g.rate * per), _rounded(g.reference_rate * per)


def _rounded(x: float) -> float:
    return round(x, 2) if x >= 100 else float(f"{x:.6g}")  # a rate of 0.5 steps/s keeps its digits


def measurement(run: Run) -> Measurement | None:
    result = run.child.result
    if result is None or not run.ok:
        return None
    window_rates = [w.samples / w.seconds for w in run.windows]
    spread = (max(window_rates) - min(window_rates)) / 2 / run.rate if len(window_rates) > 1 else 0.0
    return Measurement(**rates([run], result.batch_size), spread=round(spread, 4), steps=run.steps,
                       batch_size=result.batch_size, timing=result.timing, wall_s=round(run.child.wall_s, 2),
                       windows=window_stats(run), warmup_s=result.warmup_s, compile_s=result.compile_s,
                       log=run.log_name())


def same_config_pairs(history: list[Run]) -> list[tuple[RunSeries, RunSeries]]:
    """Runs of one configuration close in the order they ran: what two runs differ by with nothing changed."""
    pairs = []
    for i, a in enumerate(history):
        for b in history[i + 1:i + 1 + PAIR_DISTANCE]:
            if b.key == a.key and a.ok and b.ok:
                pairs.append((a.series("reference"), b.series("reference")))
    return pairs
