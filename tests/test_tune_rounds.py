"""One comparison's runs, with the runs faked (their windows set here): the order they alternate in, the run reused
from before, the two runs a decision needs, and what stops it early (numerics, nothing applied, no budget, a
failure)."""

from __future__ import annotations

from pathlib import Path

from stepscope.model.tune import Numerics
from stepscope.tune.measured import Run, config_key
from stepscope.tune.rounds import Comparison
from stepscope.tune.trial import ChildRun
from stepscope.tune.wire import ChildResult, WindowResult

BASE: dict = {}
FAST = {"dataloader_workers": {"num_workers": 2}}


def make_run(fixes: dict, index: int, rate: float, status: str = "measured", applied: int = 1) -> Run:
    windows = [WindowResult(steps=10, samples=rate * 0.5, seconds=0.5, start_s=i * 0.5) for i in range(3)]
    result = ChildResult(status=status, exit_code=0, program_status="stopped", windows=windows, unit="samples",
                         applied={f: applied for f in fixes})
    child = ChildRun(result, 0, 5.0, Path(f"trials/{index:02d}.log"), "" if status == "measured" else status,
                     status)
    return Run(key=config_key(fixes), child=child, at=float(index), index=index)


class Machine:
    """Runs each configuration at its rate; records the order asked."""

    def __init__(self, rates: dict[str, list[float]], budget: int = 99, status: str = "measured",
                 applied: int = 1) -> None:
        self.rates, self.budget, self.status, self.applied = rates, budget, status, applied
        self.history: list[Run] = []
        self.asked: list[str] = []

    def measure(self, fixes: dict, arm: str) -> Run | None:
        if self.budget <= 0:
            return None
        self.budget -= 1
        key = config_key(fixes)
        self.asked.append("B" if fixes else "A")
        rate = self.rates[key].pop(0)
        run = make_run(fixes, len(self.history), rate, self.status if fixes else "measured", self.applied)
        self.history.append(run)
        return run

    def compare(self, **kw: object) -> Comparison:
        return Comparison(measure=self.measure, history=self.history, min_gain=0.05, max_rounds=3,
                          tried=("dataloader_workers",), **kw)  # type: ignore[arg-type]


def test_runs_alternate_and_a_clear_gain_is_kept_after_two_candidate_runs() -> None:
    m = Machine({config_key(BASE): [100, 101, 99], config_key(FAST): [200, 202]})
    outcome = m.compare().run(BASE, FAST)
    assert m.asked == ["A", "B", "A", "B", "A"] and outcome.decision == "keep"
    assert outcome.gain is not None and len(outcome.candidate_runs()) == 2
    assert [arm for arm, _ in outcome.runs] == ["reference", "candidate", "reference", "candidate", "reference"]


def test_the_run_that_just_ran_is_reused_first() -> None:
    m = Machine({config_key(BASE): [100, 100, 100], config_key(FAST): [200, 200]})
    m.measure(BASE, "reference")  # the baseline's first run, just before
    outcome = m.compare().run(BASE, FAST)
    assert m.asked == ["A", "B", "A", "B", "A"] and outcome.runs[0][1] is m.history[0]  # 4 new runs, not 5
    m = Machine({config_key(BASE): [100, 100], config_key(FAST): [200, 200, 200]})
    m.measure(FAST, "candidate")  # the tuned configuration just ran: measured against the baseline from there
    outcome = m.compare().run(BASE, FAST)
    assert m.asked == ["B", "A", "B", "A"] and outcome.decision == "keep"


def test_an_undecided_gain_is_measured_again_up_to_the_rounds() -> None:
    rates = {config_key(BASE): [100, 130, 95, 125], config_key(FAST): [115, 108, 120]}
    m = Machine(rates)
    outcome = m.compare().run(BASE, FAST)
    assert m.asked == ["A", "B", "A", "B", "A", "B", "A"] and outcome.decision == "undecided"
    assert outcome.stopped == "still undecided after 3 rounds"


def test_what_stops_a_comparison_early() -> None:
    # Its numerics changed: after its first run, nothing more is spent on it.
    m = Machine({config_key(BASE): [100], config_key(FAST): [200]})
    broken = Numerics(ok=False, max_rel_loss_diff=0.5, detail="the loss differs")
    outcome = m.compare(check_numerics=lambda run: broken).run(BASE, FAST)
    assert m.asked == ["A", "B"] and outcome.decision == "numerics"
    # Its fix found nothing to change.
    m = Machine({config_key(BASE): [100], config_key(FAST): [100]}, applied=0)
    assert m.compare().run(BASE, FAST).decision == "not applied" and m.asked == ["A", "B"]
    # It crashed.
    m = Machine({config_key(BASE): [100], config_key(FAST): [100]}, status="crashed")
    outcome = m.compare().run(BASE, FAST)
    assert outcome.decision == "failed" and outcome.failure is m.history[1]
    # The budget ran out after its first candidate run and the reference after it: undecided, with the reason.
    m = Machine({config_key(BASE): [100, 100], config_key(FAST): [200]}, budget=3)
    outcome = m.compare().run(BASE, FAST)
    assert outcome.decision == "undecided" and outcome.stopped == "the budget ran out" and outcome.gain is not None


def test_a_reused_candidate_run_that_changed_nothing_is_not_applied_without_more_runs() -> None:
    """'not applied' is decided here alone (judge only says it), on the candidate's first run, reused or not."""
    m = Machine({config_key(BASE): [100], config_key(FAST): []}, applied=0)
    m.history.append(make_run(FAST, 0, 100, applied=0))  # the last run of the tune: the candidate, which did nothing
    outcome = m.compare().run(BASE, FAST)
    assert outcome.decision == "not applied" and m.asked == [] and len(outcome.candidate_runs()) == 1
