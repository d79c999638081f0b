"""The terminal view drawn from a hand-made view at fixed widths (rich's console into a string): words for the
changes, the baseline's column only on a wide terminal, the failed run's line."""

from __future__ import annotations

import io

from rich.console import Console

from stepscope.live.terminal import render


def shift(before: float, after: float, beyond: bool) -> dict:
    return {"before": before, "after": after, "delta": after - before, "ratio": after / before, "beyond_noise": beyond}


VIEW = {
    "program": "train.py --lr 0.1", "baseline_run": 1, "version": 9,
    "run": {"run_id": 2, "state": "finished", "trigger": "saved train.py", "progress": "", "elapsed_s": 4.0,
            "first_figures_s": 3.2, "full_view_s": 4.0, "first": None},
    "error": None,
    "result": {"run_id": 2, "folder": "f", "step_ms": 12.5, "samples_per_s": 1280.0, "steps_per_s": 80.0,
               "device": "CPU", "verdict": {"id": "cpu_compute_bound", "title": "t", "share": 0.86},
               "fixes": [{"id": "cpu_threads", "title": "Use the free cores", "speedup": 1.5, "where": None}]},
    "changes": {"step": {"previous": shift(10000, 12500, True)}, "phase_source": "breakdown", "phases": [],
                "verdict_previous": "python_overhead", "verdict_baseline": "python_overhead",
                "noise": {"relative": 0.05, "basis": "reference steps"},
                "lines": [{"label": "train.py:15", "code": "out = model(x)", "gone": False, "forward_us": 2000.0,
                           "backward_us": 500.0, "memory_bytes": 262144,
                           "since_previous": {"forward_us": shift(1000, 2000, True),
                                              "backward_us": shift(550, 500, False)},
                           "since_baseline": {"forward_us": shift(400, 2000, True)}},
                          {"label": "train.py:18", "code": "loss.backward()", "gone": False, "forward_us": 10.0,
                           "backward_us": 0.0, "memory_bytes": 0,
                           "since_previous": {"forward_us": shift(9, 10, False)}, "since_baseline": {}}]},
    "batch": None,
}


def draw(view: dict, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, force_terminal=False).print(render(view, width))
    return out.getvalue()


def test_the_view_in_words_on_a_wide_terminal() -> None:
    text = draw(VIEW, 160)
    assert "run 2 (saved train.py): finished  first figures 3.2 s  full view 4.0 s" in text
    assert "CPU_COMPUTE_BOUND" not in text and "CPU COMPUTE BOUND" in text and "about 86% of each step" in text
    assert "step time 12.50 ms   samples/s 1,280.0" in text
    assert "step vs previous: +2.50 ms (+25%) slower" in text  # 10 -> 12.5 ms
    assert "verdict was python_overhead" in text and "1. ~1.50x Use the free cores [cpu_threads]" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("train.py:15"))
    assert "fwd +1.00 ms (+100%) slower" in row and "fwd +1.60 ms (+400%) slower" in row  # both columns
    assert "262.1 KB" in row  # 262,144 bytes, decimal units
    assert "bwd" not in row  # 550 -> 500 µs is within noise: not listed beside a real change
    assert "within noise" in next(ln for ln in text.splitlines() if ln.startswith("train.py:18"))


def test_a_narrow_terminal_drops_the_baseline_column_and_a_failure_is_one_line() -> None:
    text = draw({**VIEW, "error": {"run_id": 3, "text": "ValueError: planted"}}, 100)
    assert "vs baseline" not in text and "+400%" not in text and "+100%" in text
    assert "run 3 failed: ValueError: planted" in text
    assert max(len(ln) for ln in text.splitlines()) <= 100
