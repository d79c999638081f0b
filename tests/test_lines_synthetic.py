"""Line and module attribution on hand-built GPU traces with exact answers: kernel time through the launch
correlation, backward nodes on the autograd thread linked to their forward ops, syncs located."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder import BACKWARD_TID, TraceBuilder
from stepscope.model.kinds import Location
from stepscope.trace.source_annotations import line_annotation, module_annotation

MATMUL = line_annotation("train.py", 40, "Net.forward", "h = x @ w")
RELU = line_annotation("train.py", 41, "Net.forward", "h = h.relu()")
ITEM = line_annotation("train.py", 57, "main", "loss.item()")
LOADER = line_annotation("train.py", 50, "main", "for x in loader:")


def gpu_trace(cat: str = "cpu_op") -> TraceBuilder:
    """Two steps; each: DataLoader, a module with two lines (matmul, relu), backward on the autograd
    thread (one node per forward op, plus AccumulateGrad with no forward op), then loss.item()."""
    b = TraceBuilder()
    seq = 10
    for step, t in ((1, 0.0), (2, 1000.0)):
        b.step(step, t, t + 1000)
        b.span(cat, LOADER, t + 5, t + 100)
        b.dataloader(t + 10, t + 95)
        b.span(cat, module_annotation("model.encoder"), t + 100, t + 300)
        b.span(cat, MATMUL, t + 110, t + 200)
        b.op("aten::mm", t + 120, t + 190, **{"Sequence number": seq, "Fwd thread id": 0})
        b.launch("sgemm_128x64", call=(t + 130, t + 140), run=(t + 300, t + 400))
        b.span(cat, RELU, t + 210, t + 290)
        b.op("aten::relu", t + 220, t + 280, **{"Sequence number": seq + 1, "Fwd thread id": 0})
        b.launch("relu_kernel", call=(t + 230, t + 240), run=(t + 400, t + 410))
        # backward on the autograd thread, in reverse order
        b.op("autograd::engine::evaluate_function: ReluBackward0", t + 400, t + 450, tid=BACKWARD_TID,
             **{"Sequence number": seq + 1, "Fwd thread id": 1})
        b.launch("threshold_backward", call=(t + 410, t + 420), run=(t + 450, t + 470), tid=BACKWARD_TID)
        b.op("autograd::engine::evaluate_function: MmBackward0", t + 460, t + 560, tid=BACKWARD_TID,
             **{"Sequence number": seq, "Fwd thread id": 1})
        b.launch("sgemm_bwd", call=(t + 470, t + 480), run=(t + 480, t + 680), tid=BACKWARD_TID)
        b.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", t + 570, t + 590,
             tid=BACKWARD_TID)
        b.launch("accumulate", call=(t + 575, t + 585), run=(t + 680, t + 690), tid=BACKWARD_TID)
        b.span(cat, ITEM, t + 700, t + 900)
        b.op("aten::item", t + 710, t + 890, **{"Sequence number": seq + 2, "Fwd thread id": 0})
        b.op("aten::_local_scalar_dense", t + 720, t + 880)
        b.runtime("cudaMemcpyAsync", t + 730, t + 740)
        b.runtime("cudaStreamSynchronize", t + 740, t + 870)
        seq += 3
    return b


@pytest.fixture(params=["cpu_op", "user_annotation"])
def trace_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The fast record_function API writes the ranges as cpu_op, record_function as user_annotation."""
    return gpu_trace(request.param).write(tmp_path / "trace.json")


def test_kernel_time_by_line_forward_and_backward(trace_file: Path) -> None:
    from stepscope import analyze

    report = analyze(trace_file)
    assert report.lines is not None and report.lines.source == "stepscope annotations"
    rows = {r.label: r for r in report.lines.rows}
    matmul, relu, item = rows["train.py:40"], rows["train.py:41"], rows["train.py:57"]
    assert (matmul.cpu_fwd_us, matmul.cpu_bwd_us, matmul.gpu_fwd_us, matmul.gpu_bwd_us) == (70, 100, 100, 200)
    assert (relu.cpu_fwd_us, relu.cpu_bwd_us, relu.gpu_fwd_us, relu.gpu_bwd_us) == (60, 50, 10, 20)
    assert matmul.kernels == 2 and relu.kernels == 2 and matmul.code == "h = x @ w"
    assert (item.cpu_fwd_us, item.gpu_fwd_us) == (180, 0)
    assert rows["train.py:50"].cpu_fwd_us == 85  # the DataLoader wait, on the line that iterates
    (unlinked,) = report.lines.unattributed
    assert unlinked.label == "backward: forward op not found: torch::autograd::AccumulateGrad"
    assert (unlinked.cpu_fwd_us, unlinked.cpu_bwd_us, unlinked.gpu_fwd_us, unlinked.gpu_bwd_us) == (0, 20, 0, 10)
    assert matmul.share == pytest.approx(300 / 1000)  # GPU time, the larger
    (sync,) = report.lines.syncs
    assert (sync.file, sync.line, sync.op, sync.via) == ("train.py", 57, "aten::item", "cudaStreamSynchronize")
    assert sync.count_per_step == 1 and sync.time_us_per_step == 130
    # The syncs section's cause carries the same location, for the report and for advice.
    cause = report.syncs.causes[0]
    assert cause.op == "aten::item" and cause.location.file == "train.py" and cause.location.line == 57


def test_module_table(trace_file: Path) -> None:
    from stepscope import analyze

    modules = analyze(trace_file).modules
    assert modules is not None
    (encoder,) = modules.rows
    assert encoder.path == "model.encoder" and encoder.calls == 1
    assert (encoder.cpu_fwd_us, encoder.cpu_bwd_us, encoder.gpu_fwd_us, encoder.gpu_bwd_us) == (130, 150, 110, 220)
    assert encoder.kernels == 4 and encoder.own_gpu_us == 330


def test_locations_for_advice(trace_file: Path) -> None:
    from stepscope.analysis.time_by_line import line_of_row, location_of_ops, location_of_rows
    from stepscope.trace.kineto import read_kineto
    from stepscope.trace.model import Kind

    trace = read_kineto(trace_file)
    kernels = [r for r in range(len(trace.events)) if trace.events.kind[r] == Kind.KERNEL]
    assert {line_of_row(trace, r).line for r in kernels if trace.name_of(r).startswith("sgemm")} == {40}
    assert line_of_row(trace, next(r for r in kernels if trace.name_of(r) == "accumulate")) is None
    assert location_of_rows(trace, kernels).line == 40  # the most kernel time
    loader = location_of_ops(trace, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    assert loader == Location(file="train.py", line=50, function="main", code="for x in loader:")


def test_no_source_information_means_no_sections(tmp_path: Path) -> None:
    from stepscope import analyze

    b = TraceBuilder()
    b.step(1, 0, 100)
    b.op("aten::mm", 10, 20)
    b.launch("k", call=(12, 14), run=(20, 30))
    report = analyze(b.write(tmp_path / "plain.json"))
    assert report.lines is None and report.modules is None


def test_backward_links_to_the_forward_thread_with_the_most_sequence_numbers() -> None:
    import numpy as np

    from stepscope.analysis.source_map import _forward_threads

    thread = np.array([0, 0, 1, 1])
    sequence = np.array([5, 6, 5, 9])
    mapping = _forward_threads(thread, sequence, np.array([1, 1, 2]), np.array([5, 6, 9]))
    assert mapping == {1: 0, 2: 1}
