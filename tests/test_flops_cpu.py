"""FLOP counts from recorded shapes against hand-computed values (2 FLOPs per multiply-add), forward and
backward, on small models of our own run on the CPU: an MLP, a conv net, a transformer block with attention;
recomputation under activation checkpointing; ops without a formula reported as uncovered."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stepscope.analysis.facts import compute_facts
from stepscope.trace.kineto import read_kineto

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional
STEPS = 2


def profile_steps(tmp_path: Path, step) -> Path:
    """Run `step` 1 + STEPS times under the profiler (one warm-up), record shapes, return the trace."""
    from torch.profiler import ProfilerActivity, profile, schedule

    path = tmp_path / "trace.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=STEPS, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(1 + STEPS):
            step()
            prof.step()
    return path


def utilization_of(path: Path):
    facts = compute_facts(read_kineto(path))
    assert len(facts.steps) == STEPS
    return facts.utilization


def linear_flops(rows: int, fan_in: int, fan_out: int) -> int:
    return 2 * rows * fan_in * fan_out


def check(u, forward: float, backward: float) -> None:
    assert u.forward_flops == pytest.approx(forward, rel=0.02)
    assert u.backward_flops == pytest.approx(backward, rel=0.02)
    assert u.recompute_flops == 0


def test_mlp_forward_and_backward(tmp_path) -> None:
    torch.manual_seed(0)
    b, d, h, c = 32, 64, 256, 10
    model = nn.Sequential(nn.Linear(d, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, c))
    x, y = torch.randn(b, d), torch.randint(0, c, (b,))

    def step() -> None:
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()

    u = utilization_of(profile_steps(tmp_path, step))
    layers = [(d, h), (h, h), (h, c)]
    forward = sum(linear_flops(b, i, o) for i, o in layers)
    # Backward: every weight's gradient; the inputs' gradients except the first layer's (x needs none).
    backward = forward + sum(linear_flops(b, i, o) for i, o in layers[1:])
    check(u, forward, backward)
    assert u.flops_by_dtype == {"fp32": pytest.approx(forward + backward, rel=0.02)}
    assert u.device == "CPU" and u.mfu is None  # no CPU peak without a census: said, not guessed
    assert "CPU peak" in u.why_no_mfu


def test_conv_net_forward_and_backward(tmp_path) -> None:
    torch.manual_seed(0)
    n = 4
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),  # 16x16 -> 8x8
                          nn.Conv2d(8, 16, 3, padding=1, dilation=1), nn.ReLU(),  # 8x8 -> 8x8
                          nn.Conv2d(16, 16, 3, groups=4), nn.Flatten(),  # 8x8 -> 6x6, grouped
                          nn.Linear(16 * 6 * 6, 10))
    x = torch.randn(n, 3, 16, 16)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()

    u = utilization_of(profile_steps(tmp_path, step))
    conv1 = 2 * n * (8 * 8) * 8 * (3 * 3 * 3)  # 2 x N x output pixels x C_out x (C_in x k x k)
    conv2 = 2 * n * (8 * 8) * 16 * (8 * 3 * 3)
    conv3 = 2 * n * (6 * 6) * 16 * (16 // 4 * 3 * 3)
    head = linear_flops(n, 16 * 6 * 6, 10)
    forward = conv1 + conv2 + conv3 + head
    backward = conv1 + 2 * (conv2 + conv3 + head)  # conv1's input needs no gradient
    check(u, forward, backward)


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def test_transformer_block_with_attention(tmp_path) -> None:
    torch.manual_seed(0)
    b, t, d, heads = 2, 32, 64, 4
    block = Block(d, heads)
    x = torch.randn(b, t, d)

    def step() -> None:
        block.zero_grad(set_to_none=True)
        block(x).square().mean().backward()

    u = utilization_of(profile_steps(tmp_path, step))
    rows = b * t
    qkv, proj, fc1, fc2 = (linear_flops(rows, d, 3 * d), linear_flops(rows, d, d), linear_flops(rows, d, 4 * d),
                           linear_flops(rows, 4 * d, d))
    attention = 2 * b * heads * t * t * (d // heads) * 2  # QK^T and PV, causal or not (as FlopCounterMode)
    forward = qkv + proj + fc1 + fc2 + attention
    # The qkv input (layer-normed x, x needs no grad) still needs a gradient: LayerNorm has weights.
    backward = 2 * (qkv + proj + fc1 + fc2) + 2 * attention
    check(u, forward, backward)


def test_checkpointed_forward_is_recomputation(tmp_path) -> None:
    """Activation checkpointing runs the forward again in the backward: HFU counts it, MFU does not."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    b, d = 16, 128
    inner = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))
    x = torch.randn(b, d, requires_grad=True)

    def step() -> None:
        inner.zero_grad(set_to_none=True)
        checkpoint(inner, x, use_reentrant=False).sum().backward()

    u = utilization_of(profile_steps(tmp_path, step))
    forward = 2 * linear_flops(b, d, d)
    assert u.forward_flops == pytest.approx(forward, rel=0.02)
    assert u.backward_flops == pytest.approx(2 * forward, rel=0.02)
    assert u.recompute_flops == pytest.approx(forward, rel=0.02)


def test_ops_without_a_formula_are_uncovered_not_zero(tmp_path) -> None:
    torch.manual_seed(0)
    a, w = torch.randn(64, 64), torch.randn(64, 64)

    def step() -> None:
        (a @ w).cumprod(dim=1).logcumsumexp(dim=0)

    path = profile_steps(tmp_path, step)
    facts = compute_facts(read_kineto(path))
    u = facts.utilization
    assert u.forward_flops == pytest.approx(2 * 64**3, rel=0.02)  # the matmul alone
    uncovered = dict(u.uncovered)
    assert "aten::cumprod" in uncovered and "aten::logcumsumexp" in uncovered
    assert u.covered_share is not None and u.covered_share < 1
    assert not any(facts.trace.name_of(r) in ("aten::cumprod", "aten::logcumsumexp") for r in facts.flops.rows)


def test_bytes_of_a_matrix_product(tmp_path) -> None:
    a, w = torch.randn(48, 32), torch.randn(32, 16)
    path = profile_steps(tmp_path, lambda: a @ w)
    counted = compute_facts(read_kineto(path)).flops
    assert len(counted) == STEPS
    assert np.all(counted.bytes == (48 * 32 + 32 * 16 + 48 * 16) * 4)  # inputs read once, output written once
    assert np.all(counted.flops == 2 * 48 * 32 * 16)
