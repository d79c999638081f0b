"""A recorded trace's profiler settings (record_shapes, with_stack, profile_memory) are inferred from the trace and
their cost taken out of the device-side what-ifs (replay/recorded.py; issue 41, item 1).

The planted program is GPU-bound as it runs: 100 fp32 convolutions of 14 µs a step, each costing the host 7.8 µs.
Recorded with shapes and stacks, every op pays STACK_US more just after its start timestamp (where torch.profiler takes
the shapes and the stack), which makes the recorded host the bottleneck; the default cost alone does not undo that."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder import V100, scenario
from stepscope.advice.whatif import AMP_FACTOR
from stepscope.pipeline import analyze
from stepscope.replay import whatif as w
from stepscope.replay.host_clock import RECORDED_DEFAULT
from stepscope.replay.recorded import PLAIN_LEAF_NS, recorded_cost, settings_of
from stepscope.trace.load import read_trace

CONV = "volta_scudnn_128x64_relu_interior_nn_v1"
PREP_US, CONVS, KERNEL_US, OVERHEAD_US, VIEW_US, LAUNCH_US = 600.0, 100, 14.0, 1.0, 0.4, 5.5
STACK_US = 12.0  # planted: shapes and a Python stack, per op
OWN_US = 2 * OVERHEAD_US + VIEW_US + LAUNCH_US  # the program's own host time per convolution: 7.9 µs
ARGS = {"Input Dims": [[32, 64, 56, 56]], "Input type": ["float"], "Call stack": "train.py(40): <module>"}


def program(path: Path, profiled: bool) -> Path:
    b, tl = scenario(**V100)
    if profiled:
        tl.cost = {"op": RECORDED_DEFAULT.op_ns / 1e3, "launch": RECORDED_DEFAULT.launch_ns / 1e3,
                   "range": RECORDED_DEFAULT.range_ns / 1e3}
    args = ARGS if profiled else {}

    def op(name: str, body: float, inner: object = None) -> None:
        tl._pay("op")  # the default op cost outside the op's span, as a plain recorded view shows (0.4 µs long)
        start = tl.t
        tl.t += STACK_US if profiled else 0.0  # shapes and the stack, taken just after the start timestamp
        tl.t += body / 2
        if callable(inner):
            inner()
        tl.t += body / 2
        b.op(name, start, tl.t, **args)
        tl._pay("op")

    for i in range(4):
        with tl.step(i):
            tl.cpu("aten::randn", PREP_US)
            for _ in range(CONVS):
                op("aten::conv2d", 2 * OVERHEAD_US, lambda: (op("aten::view", VIEW_US),
                                                              tl.kernel(CONV, KERNEL_US, host_us=LAUNCH_US)))
            tl.sync()
    return b.write(path)


def test_settings_are_read_from_the_events_and_from_the_profilers_metadata(tmp_path: Path) -> None:
    recorded = read_trace(program(tmp_path / "recorded.json", profiled=True))
    s = settings_of(recorded)
    assert (s.record_shapes, s.with_stack, s.profile_memory) == ("events", "call stacks", None)
    assert settings_of(read_trace(program(tmp_path / "plain.json", profiled=False))).on() == []
    # torch.profiler's own metadata names the settings that were on (its start_trace writes "1" for each)
    doc = json.loads((tmp_path / "plain.json").read_text())
    doc.update(profile_memory="1", with_stack="1")
    (tmp_path / "named.json").write_text(json.dumps(doc))
    s = settings_of(read_trace(tmp_path / "named.json"))
    assert (s.record_shapes, s.with_stack, s.profile_memory) == (None, "metadata", "metadata")


def test_the_settings_cost_is_measured_from_the_leaf_metadata_ops(tmp_path: Path) -> None:
    rc = recorded_cost(read_trace(program(tmp_path / "recorded.json", profiled=True)))
    # every aten::view is VIEW_US + STACK_US long as recorded: its excess over the plain view is the planted cost
    (_, _, extra), = rc.cost.op_extra_ns
    assert extra == pytest.approx((VIEW_US + STACK_US) * 1e3 - PLAIN_LEAF_NS, rel=0.01)
    assert rc.measured_threads == 1 and rc.default == RECORDED_DEFAULT


def test_the_settings_correction_flips_the_recorded_host_bound_step_to_gpu_bound_and_offers_amp(tmp_path: Path) -> None:
    trace = read_trace(program(tmp_path / "recorded.json", profiled=True))
    rc = recorded_cost(trace)
    profiled_us = OWN_US + 2 * STACK_US  # the recorded host per convolution, beyond the default cost: 31.9 µs
    assert profiled_us > KERNEL_US
    with_default = w.amp(trace, AMP_FACTOR, host_cost=rc.default)
    assert with_default is not None
    # with the default alone the host still takes ~31.9 µs a convolution: host-bound, AMP gains nothing
    assert with_default.base_ns / 1e3 == pytest.approx(PREP_US + CONVS * profiled_us, rel=0.05)
    assert with_default.speedup < 1.02
    with_settings = w.amp(trace, AMP_FACTOR, host_cost=rc.cost)
    assert with_settings is not None
    # with the settings' cost out: the GPU's 14 µs per convolution sets the step, as the program runs
    assert with_settings.base_ns / 1e3 == pytest.approx(PREP_US + CONVS * KERNEL_US, rel=0.05)
    report = analyze(tmp_path / "recorded.json")
    amp = next(r for r in report.recommendations if r.id == "amp")
    # the program under AMP: kernels of 14/3 µs, its host's 7.9 µs a convolution bound the step
    truth = (PREP_US + CONVS * KERNEL_US) / (PREP_US + CONVS * OWN_US)
    assert amp.estimated_speedup == pytest.approx(truth, rel=0.05)
    text = amp.estimate or ""
    assert "with_stack (call stacks)" in text and "record_shapes (events)" in text
    assert "with its default per event alone" in text  # both readings said
