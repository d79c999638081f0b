"""Warm-up and time limits that know compilation: torch's compile callbacks seen by the watch (a real, small
compile), and a run's limit and the budget's room computed from the runs seen, with room for a first
compilation."""

from __future__ import annotations

import pytest

from stepscope.tune.budget import COMPILE_ALLOWANCE_S, COMPILE_MIN_S, MIN_TRIAL_TIMEOUT_S, Budget


def test_a_runs_limit_leaves_room_for_a_first_compilation() -> None:
    b = Budget(600.0)
    b.baseline_s = 40.0
    # Not run yet: 5 x the baseline's 40 s (200 s), and 300 s more when it compiles.
    assert b.timeout("x", compiles=False, trial=True) == 200.0
    assert b.timeout("x", compiles=True, trial=True) == 200.0 + COMPILE_ALLOWANCE_S
    # --trial-timeout is the limit of a trial's runs, compilation aside.
    b.trial_timeout_s = 25.0
    assert b.timeout("x", compiles=False, trial=True) == 25.0
    assert b.timeout("x", compiles=True, trial=True) == 25.0 + COMPILE_ALLOWANCE_S
    assert b.timeout("x", compiles=False, trial=False) == 200.0  # the baseline keeps the default
    # Once run: 3 x its longest run (at least 2 minutes), whatever it compiled.
    b.trial_timeout_s = None
    b.ran("x", 90.0)
    b.ran("x", 70.0)
    assert b.timeout("x", compiles=True, trial=True) == 270.0
    b.ran("y", 10.0)
    assert b.timeout("y", compiles=False, trial=True) == MIN_TRIAL_TIMEOUT_S


def test_the_budget_keeps_room_for_the_end_and_for_a_compilation() -> None:
    b = Budget(600.0, started=0.0)
    b.baseline_s = 40.0
    # A compiling configuration not run yet is expected to take 1.2 x 40 s plus a minute of compilation.
    assert b.expected("c", compiles=True) == pytest.approx(1.2 * 40.0 + COMPILE_MIN_S)
    b.ran("base", 40.0)
    b.ran("tuned", 30.0)
    # The end: a baseline run, a tuned run, and the final diagnosis (1.5 x a tuned run).
    assert b.reserve("base", "tuned", False, diagnosis=True) == pytest.approx(40.0 + 30.0 + 45.0)
    assert b.reserve("base", None, False, diagnosis=True) == 0.0


def test_the_watch_sees_each_compilation_and_only_those() -> None:
    torch = pytest.importorskip("torch")
    from stepscope.tune.compiling import CompileWatch

    watch = CompileWatch()
    assert watch.ready(force=True)
    try:
        double = torch.compile(lambda x: x * 2, backend="eager")  # dynamo's tracing, no code generation
        double(torch.ones(2))
        first = watch.events
        double(torch.ones(2))  # compiled already: nothing new
        assert first >= 1 and watch.events == first and watch.total_ns > 0 and not watch.active
        double(torch.ones(2, 3))  # a new shape: a recompilation, as on an epoch's last partial batch
        assert watch.events > first
    finally:
        watch.remove()
    after = watch.events
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
    assert watch.events == after  # removed: no longer told
