"""What recording op shapes (record_shapes, on by default in `stepscope run`) costs a profiled step.

Three settings, interleaved round by round so a busy machine affects them alike: no profiler, the profiler as
stepscope runs it (CPU activities, profile_memory, plus CUDA when there is a GPU) without shapes, and with
shapes. Per setting, the median step time over the rounds; printed as ratios against the profiler without
shapes, in this same run. Workloads: an MLP, a small conv net and a transformer block (training steps).

    .venv/bin/python benchmarks/bench_record_shapes.py [--rounds 5] [--steps 10] [--device cuda]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn


def workloads(device: torch.device) -> dict[str, tuple[nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    big = device.type == "cuda"
    # Small tensors on purpose: the cost of recording shapes is per op, so it shows most where ops are cheap.
    d = 512 if big else 64
    mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d), nn.ReLU(), nn.Linear(d, 10))
    conv = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1),
                         nn.ReLU(), nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
    layer = nn.TransformerEncoderLayer(d_model=d, nhead=4, dim_feedforward=2 * d, batch_first=True)
    batch = 64 if big else 8
    return {
        "mlp": (mlp.to(device), torch.randn(batch * 4, d, device=device)),
        "conv": (conv.to(device), torch.randn(batch, 3, 16, 16, device=device)),
        "transformer": (layer.to(device), torch.randn(batch, 32, d, device=device)),
    }


def clock() -> float:
    """Process CPU time on a CPU run (robust to other jobs sharing the cores: it counts the work this process
    does, the profiler's included); wall time on a GPU run (the device's time is what a step costs there)."""
    return time.process_time() if CPU_CLOCK else time.perf_counter()


CPU_CLOCK = True


def step_times(model: nn.Module, x: torch.Tensor, steps: int, profiler: dict | None) -> list[float]:
    from torch.profiler import profile

    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    times = []

    def one() -> None:
        t0 = clock()
        opt.zero_grad(set_to_none=True)
        model(x).float().square().mean().backward()
        opt.step()
        if x.is_cuda:
            torch.cuda.synchronize()
        times.append(clock() - t0)

    one()  # warm-up outside any profiler
    times.clear()
    if profiler is None:
        for _ in range(steps):
            one()
        return times
    with profile(**profiler) as prof:
        for _ in range(steps):
            one()
            prof.step()
    return times


def main() -> None:
    from torch.profiler import ProfilerActivity

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads on a CPU run (1: no OpenMP spin-waiting inflating the CPU time)")
    args = p.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    global CPU_CLOCK
    CPU_CLOCK = device.type == "cpu"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    settings = {
        "no profiler": None,
        "profiler": {"activities": activities, "profile_memory": True, "record_shapes": False},
        "profiler + shapes": {"activities": activities, "profile_memory": True, "record_shapes": True},
    }
    print(f"device {device}, torch {torch.__version__}, {args.rounds} rounds x {args.steps} steps, "
          f"{'process CPU time' if CPU_CLOCK else 'wall time'} per step")
    for name, (model, x) in workloads(device).items():
        medians: dict[str, list[float]] = {k: [] for k in settings}
        for _ in range(args.rounds):
            for setting, options in settings.items():
                medians[setting].append(statistics.median(step_times(model, x, args.steps, options)))
        base = statistics.median(medians["profiler"])
        plain = statistics.median(medians["no profiler"])
        shapes = statistics.median(medians["profiler + shapes"])
        print(f"{name:12s} step: no profiler {plain * 1e3:8.2f} ms, profiler {base * 1e3:8.2f} ms, "
              f"+ shapes {shapes * 1e3:8.2f} ms: shapes add {shapes / base - 1:+.1%} to a profiled step "
              f"({shapes / plain - 1:+.1%} over no profiler)")


if __name__ == "__main__":
    main()
