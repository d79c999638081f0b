"""Memory at the peak on a CPU run captured with profile_memory, against the allocator's own figures and the
model's sizes computed by hand; the run's census of parameters, gradients and optimizer state."""

from __future__ import annotations

import gzip
import json

import pytest

from stepscope.trace.census import read_census

torch = pytest.importorskip("torch")
nn = torch.nn

B, D, H, C = 256, 128, 1024, 10
LAYERS = [(D, H), (H, H), (H, C)]  # Linear(in, out): out x in weights + out biases, float32


def layer_bytes(fan_in: int, fan_out: int) -> int:
    return (fan_in * fan_out + fan_out) * 4


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    import stepscope

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU(), nn.Linear(H, C))
    opt = torch.optim.Adam(model.parameters())
    x, y = torch.randn(B, D), torch.randint(0, C, (B,))
    out = tmp_path_factory.mktemp("run")
    with stepscope.profile(out=out, skip=1, warmup=1, steps=3, profile_memory=True, record_shapes=True,
                           batch_size=B) as p:
        for _ in range(10):  # skip 1, then warm-up 1 + 3 steps twice: the timing pass and the recorded pass
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            p.step()
    return p


def test_the_census_counts_the_model_and_optimizer(captured) -> None:
    census = read_census(captured.trace_path)
    (host,) = census.devices
    params = sum(layer_bytes(i, o) for i, o in LAYERS)
    assert host.device == -1 and host.parameters_bytes == params and host.trainable_bytes == params
    assert host.gradients_bytes == params  # after the optimizer's step every parameter has its gradient
    # Adam: exp_avg and exp_avg_sq per parameter, and a 4-byte float32 step count per parameter tensor.
    assert host.optimizer_state_bytes == 2 * params + 4 * 2 * len(LAYERS)
    assert census.cpu is not None and census.cpu.threads == torch.get_num_threads()


def test_peak_and_categories_agree_with_the_allocator(captured) -> None:
    report = captured.report
    (m,) = report.memory_usage.devices
    with gzip.open(captured.trace_path) as f:
        events = json.load(f)["traceEvents"]
    totals = [e["args"]["Total Allocated"] for e in events if e.get("name") == "[memory]"]
    assert m.peak_allocated_bytes == max(totals)  # the allocator's own peak
    assert sum(c.bytes for c in m.categories) == m.peak_allocated_bytes
    assert m.device == -1 and m.counts_from_profiler_start
    # The CPU allocator counts from the profiler's start: the parameters, made before, are held outside it.
    outside = {c.name: c.bytes for c in m.outside_count}
    assert outside.get("parameters") == sum(layer_bytes(i, o) for i, o in LAYERS)
    grads = next(c.bytes for c in m.categories if c.name == "gradients")
    if m.phase == "backward":  # autograd makes gradients last layer first: the peak holds a suffix of them
        suffixes = {sum(layer_bytes(i, o) for i, o in LAYERS[k:]) for k in range(len(LAYERS))}
        assert grads in suffixes
    else:
        assert m.phase == "optimizer" and grads == sum(layer_bytes(i, o) for i, o in LAYERS)


def test_utilization_of_the_cpu_run(captured) -> None:
    u = captured.report.utilization
    forward = sum(2 * B * i * o for i, o in LAYERS)
    backward = forward + sum(2 * B * i * o for i, o in LAYERS[1:])
    assert u.forward_flops_per_step == pytest.approx(forward, rel=0.02)
    assert u.backward_flops_per_step == pytest.approx(backward, rel=0.02)
    if u.cpu_peak_gflops is not None:  # the census found the CPU's clock and SIMD width: an estimate, said so
        assert u.mfu is not None and "assumed" in u.cpu_peak_how and not u.peaks
