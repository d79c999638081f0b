"""This job on other GPUs: its step time, what it would cost and the energy it takes, predicted from one trace.

    from stepscope.analysis.facts import compute_facts
    from stepscope.predict import PredictRequest, predict
    section = predict(compute_facts(trace), PredictRequest(gpus=("h200", "a100-80gb")), batch_size=32,
                      recorded=True)  # a trace from a file: its profiler's host cost taken out (replay/recorded.py)

Each GPU activity is classed by what bounds it on the origin (work.py), scaled by the target/origin ratio of
that roof (scaling.py), and the steps are replayed with the host's timeline as measured (replay/; a recorded
trace's origin and targets alike without the profiler's host cost replay/recorded.py decides); the
replayed trace is analysed like a measured one (target.py). See docs/predict.md for the method and its
measured error.
"""

from __future__ import annotations

from stepscope.predict.section import PredictRequest, checked_request, parse_gpus, predict

__all__ = ["PredictRequest", "checked_request", "parse_gpus", "predict"]
