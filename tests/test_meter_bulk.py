"""The events replayed at once (capture/meter/bulk.py) give exactly the steps and totals of replaying them one by
one (capture/meter/phases.py), on random streams of the shapes the hooks make: steps of data, forward, backward and
optimizer, marks of the leading source and of weaker ones, phases that nest, a batch cut in the middle of a phase."""

from __future__ import annotations

import random

import pytest

from stepscope.capture.meter import meter as meter_module
from stepscope.capture.meter.meter import StepMeter
from stepscope.capture.meter.phases import BACKWARD, DATA, ENTER, FORWARD, LEAVE, MARK, OPTIMIZER, SHIFT, SYNC

OPTIMIZER_MARK, BACKWARD_MARK, DATALOADER_MARK = MARK + 3, MARK + 2, MARK + 0


def stream(rng: random.Random, steps: int, *, nest: bool) -> list[tuple[int, int]]:
    """(time, code) events of `steps` training steps, times strictly increasing by random amounts."""
    t, out = 10**12, []

    def at(code: int) -> None:
        nonlocal t
        t += rng.randint(1, 50_000)
        out.append((t, code))

    for _ in range(steps):
        if rng.random() < 0.3:
            at(DATALOADER_MARK)
        at(ENTER + DATA)
        at(LEAVE + DATA)
        at(ENTER + FORWARD)
        if nest and rng.random() < 0.3:
            at(ENTER + SYNC)  # loss.item() inside the forward
            at(LEAVE + SYNC)
        at(LEAVE + FORWARD)
        at(ENTER + BACKWARD)
        at(LEAVE + BACKWARD)
        if rng.random() < 0.5:
            at(BACKWARD_MARK)
        at(ENTER + OPTIMIZER)
        at(LEAVE + OPTIMIZER)
        at(OPTIMIZER_MARK)
    return out


def replayed(events: list[tuple[int, int]], cuts: list[int], bulk: bool, monkeypatch: pytest.MonkeyPatch
             ) -> StepMeter:
    monkeypatch.setattr(meter_module, "BULK_EVENTS", 8 if bulk else 10**9)
    meter = StepMeter(None, live=False)
    meter.clock._since = events[0][0] - 1000
    start = 0
    for cut in [*cuts, len(events)]:
        for t, code in events[start:cut]:
            meter.clock.push(t << SHIFT | code)
        meter.catch_up()
        start = cut
    return meter


@pytest.mark.parametrize("seed", range(24))
def test_the_bulk_replay_is_the_loops(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    events = stream(rng, rng.randint(20, 400), nest=seed % 3 == 0)
    cuts = sorted(rng.sample(range(1, len(events)), 6))  # some cut inside a phase: those batches go one by one
    one_by_one = replayed(events, cuts, False, monkeypatch)
    at_once = replayed(events, cuts, True, monkeypatch)
    assert set(at_once.logs) == set(one_by_one.logs)
    for source, log in one_by_one.logs.items():
        assert at_once.logs[source].count == log.count
        assert at_once.logs[source].rows.tolist() == log.rows.tolist()
    assert at_once.clock.totals == one_by_one.clock.totals
    assert at_once.clock.started == one_by_one.clock.started
    assert at_once.leading == one_by_one.leading == "optimizer" and at_once.muted == one_by_one.muted


def test_a_step_replayed_in_bulk_adds_up_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # Five steps of data 10, forward 20, backward 30, optimizer 40 and 5 of other (µs): each step is 105 µs.
    monkeypatch.setattr(meter_module, "BULK_EVENTS", 8)
    meter = StepMeter(None, live=False)
    t = meter.clock._since = 10**12
    for _ in range(40):
        for phase, us in ((DATA, 10), (FORWARD, 20), (BACKWARD, 30), (OPTIMIZER, 40)):
            meter.clock.push(t << SHIFT | (ENTER + phase))
            t += us * 1000
            meter.clock.push(t << SHIFT | (LEAVE + phase))
        meter.clock.push(t << SHIFT | OPTIMIZER_MARK)
        t += 5000
        if _ % 8 == 7:
            meter.catch_up()
    steps = meter.record("optimizer").steps
    assert steps.wall_ns[1:] == [105_000] * 39
    assert steps.data_ns[1:] == [10_000] * 39 and steps.optimizer_ns[1:] == [40_000] * 39
