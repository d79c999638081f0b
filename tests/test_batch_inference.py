"""The batch size a trace shows (analysis/batch.py) and what the report does with it: samples/s and the cost per
sample from it, said to be inferred; a given batch size wins; without one, a note names --batch-size."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from builder import TraceBuilder
from stepscope.analysis.batch import inferred_batch
from stepscope.analysis.steps import find_steps
from stepscope.pipeline import analyze
from stepscope.predict import PredictRequest
from stepscope.trace.load import read_trace

TUTORIAL = Path(__file__).parent / "data" / "tutorial_v100_resnet50" / "worker0.1623143089861.pt.trace.json.gz"
F32 = "float"


def dims(*shapes: list[int]) -> dict:
    """An op's recorded inputs: tensors of these shapes (a [] is a scalar argument)."""
    return {"Input Dims": list(shapes), "Input type": [F32 if s else "Scalar" for s in shapes]}


def training(b: TraceBuilder, step_id: int, t: float, copy: list[int], layer: str, layer_input: list[int],
             copies: int = 1) -> None:
    """One step at t (µs): `copies` host-to-device copies of `copy` (aten::to > aten::copy_ > the runtime call >
    the memcpy), then the model's first layer on `layer_input`, launching a kernel."""
    b.step(step_id, t, t + 100)
    nbytes = 4
    for d in copy:
        nbytes *= d
    for i in range(copies):
        at = t + 5 + 20 * i
        b.op("aten::to", at, at + 15, **dims(copy, [], [], [], []))
        b.op("aten::copy_", at + 1, at + 14, **dims(copy, copy, []))
        b.copy("HtoD", (at + 2, at + 12), (at + 3, at + 11), nbytes)
    b.op(layer, t + 60, t + 80, **dims(layer_input, [64, layer_input[1], 3, 3] if "conv" in layer else [10, 16]))
    b.launch("implicit_gemm", (t + 65, t + 70), (t + 71, t + 95))


def inferred(b: TraceBuilder, tmp_path: Path) -> tuple[int | None, str]:
    trace = read_trace(b.write(tmp_path / "t.json"))
    found = inferred_batch(trace, find_steps(trace))
    return found.size, found.evidence


def test_the_copy_and_the_first_layer_agree_on_the_batch(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(3):
        training(b, i + 1, 1000 + 100 * i, [8, 3, 32, 32], "aten::conv2d", [8, 3, 32, 32])
    size, evidence = inferred(b, tmp_path)
    assert size == 8
    assert evidence == ("the first host-to-device copy and the first aten::conv2d's input share a first dimension "
                        "of 8 in 3 of 3 steps")


def test_a_flattened_input_is_no_batch(tmp_path: Path) -> None:
    """Token ids [4, 16] copied, the first linear layer on [64, 16] (batch x sequence folded): not shown."""
    b = TraceBuilder()
    for i in range(2):
        training(b, i + 1, 1000 + 100 * i, [4, 16], "aten::linear", [64, 16])
    size, evidence = inferred(b, tmp_path)
    assert size is None and "(4) and the first aten::linear's (64) differ" in evidence


def test_several_batches_copied_per_step_is_no_batch(tmp_path: Path) -> None:
    """Gradient accumulation: two micro-batches of 8 copied per step; the step holds 16 samples, not 8."""
    b = TraceBuilder()
    for i in range(2):
        training(b, i + 1, 1000 + 100 * i, [8, 3, 32, 32], "aten::conv2d", [8, 3, 32, 32], copies=2)
    size, evidence = inferred(b, tmp_path)
    assert size is None and "copies 2 inputs" in evidence


def test_steps_that_disagree_show_no_batch(tmp_path: Path) -> None:
    """A last, smaller batch (drop_last=False): 8 then 5."""
    b = TraceBuilder()
    training(b, 1, 1000, [8, 3, 32, 32], "aten::conv2d", [8, 3, 32, 32])
    training(b, 2, 1100, [5, 3, 32, 32], "aten::conv2d", [5, 3, 32, 32])
    size, evidence = inferred(b, tmp_path)
    assert size is None and evidence == "the steps show different batch sizes (5, 8)"


def test_without_a_layer_there_is_no_batch(tmp_path: Path) -> None:
    b = TraceBuilder()
    training(b, 1, 1000, [8, 3, 32, 32], "aten::relu", [8, 3, 32, 32])
    assert inferred(b, tmp_path) == (None, "no convolution or linear layer with recorded shapes in the steps")


def without_shapes() -> TraceBuilder:
    b = TraceBuilder()
    for i in range(2):
        training(b, i + 1, 1000 + 100 * i, [8, 3, 32, 32], "aten::conv2d", [8, 3, 32, 32])
    for e in b.events:
        e["args"].pop("Input Dims", None)
        e["args"].pop("Input type", None)
    return b


def test_without_recorded_shapes_there_is_no_batch(tmp_path: Path) -> None:
    assert inferred(without_shapes(), tmp_path) == (None, "the trace has no recorded input shapes (record_shapes)")


def test_the_report_uses_an_inferred_batch_and_a_given_one_wins(tmp_path: Path) -> None:
    b = TraceBuilder()
    for i in range(3):
        training(b, i + 1, 1000 + 100 * i, [8, 3, 32, 32], "aten::conv2d", [8, 3, 32, 32])
    path = b.write(tmp_path / "t.json")
    report = analyze(path)
    s = report.summary
    assert (s.batch_size, s.batch_size_source) == (8, "inferred from the trace")
    assert s.samples_per_s == round(s.steps_per_s * 8, 2)
    assert sum("batch size 8 inferred from the trace" in n for n in report.notes) == 1
    given = analyze(path, batch_size=5).summary
    assert (given.batch_size, given.batch_size_source) == (5, "given")
    assert given.samples_per_s == round(given.steps_per_s * 5, 2)
    assert not any("batch size" in n for n in analyze(path, batch_size=5).notes)


def test_without_a_batch_the_report_names_the_option(tmp_path: Path) -> None:
    report = analyze(without_shapes().write(tmp_path / "t.json"))
    assert report.summary.samples_per_s is None and report.summary.batch_size_source is None
    (note,) = [n for n in report.notes if "--batch-size" in n]
    assert note.startswith("no batch size: --batch-size N gives samples/s and cost per sample")


def _raw_first_dims() -> tuple[int, int]:
    """From the tutorial's raw JSON: the first conv2d's input batch in ProfilerStep#5, and the images per step the
    largest host-to-device copy holds (bytes over one float32 3x224x224 image)."""
    events = json.loads(gzip.decompress(TUTORIAL.read_bytes()))["traceEvents"]
    step = next(e for e in events if e.get("name") == "ProfilerStep#5")
    inside = sorted((e for e in events if e.get("ph") == "X" and step["ts"] <= e["ts"] < step["ts"] + step["dur"]),
                    key=lambda e: e["ts"])
    conv = next(e for e in inside if e["name"] == "aten::conv2d")
    htod = [e for e in events if e.get("cat") == "Memcpy" and "HtoD" in e["name"]]
    copy = max(htod, key=lambda e: e["args"]["bytes"])
    return conv["args"]["Input Dims"][0][0], copy["args"]["bytes"] // (3 * 224 * 224 * 4)


def test_the_tutorial_trace_shows_a_batch_of_32() -> None:
    assert _raw_first_dims() == (32, 32)
    trace = read_trace(TUTORIAL)
    assert inferred_batch(trace, find_steps(trace)).size == 32
    report = analyze(TUTORIAL, predict=PredictRequest(gpus=("h100",)))
    s = report.summary
    assert (s.batch_size, s.batch_size_source) == (32, "inferred from the trace")
    assert s.samples_per_s == pytest.approx(32 / (s.step_time_us / 1e6), rel=1e-3)
    (h100,) = report.prediction.targets
    assert h100.samples_per_s == pytest.approx(32 / (h100.step_time_us / 1e6), rel=1e-3)
    assert h100.cost_per_million_samples == pytest.approx(
        h100.price_per_gpu_hour / 3600 / h100.samples_per_s * 1e6, rel=1e-3)
