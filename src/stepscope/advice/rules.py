"""One small rule per fix; each returns its recommendations (most return zero or one). Ranked by gain."""

from __future__ import annotations

from collections.abc import Callable

from stepscope.advice import rules_comm, rules_copy, rules_cpu, rules_gpu, rules_host, rules_input
from stepscope.advice.context import Context
from stepscope.analysis.facts import Facts
from stepscope.model import report as s

Rule = Callable[[Context, list[s.Pattern]], list[s.Recommendation]]

RULES: tuple[Rule, ...] = (
    rules_input.dataloader_workers,
    rules_input.persistent_workers,
    rules_copy.pin_memory,
    rules_copy.non_blocking_copy,
    rules_copy.uint8_transfer,
    rules_host.larger_batch,
    rules_host.set_to_none,
    rules_gpu.amp,
    rules_gpu.tf32,
    rules_host.torch_compile,
    rules_host.cuda_graphs,
    rules_host.remove_sync,
    rules_host.offload_cpu_work,
    rules_host.fused_optimizer,
    rules_comm.overlap_communication,
    rules_cpu.cpu_threads,
    rules_cpu.channels_last,
    rules_cpu.cpu_bf16,
)


def recommend(facts: Facts, patterns: list[s.Pattern], ctx: Context | None = None) -> list[s.Recommendation]:
    """Every fix the trace calls for, best estimated gain first."""
    ctx = ctx or Context(facts)
    if len(facts.steps) == 0 or not ctx.step_ns:
        return []
    found = [r for rule in RULES for r in rule(ctx, patterns)]
    return sorted(found, key=lambda r: (-(r.estimated_speedup or 1.0), r.id))
