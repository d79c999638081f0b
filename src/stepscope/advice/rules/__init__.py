"""One small rule per fix; each returns its recommendations (most return zero or one). Ranked by gain.

The rules live by the bottleneck they answer: dataloader (input_bound), copies (copy_bound), host (launch,
sync and CPU-work bound), gpu (compute bound), collectives (communication bound), cpu (CPU-only runs). A new
rule is one function in its module and one line in RULES."""

from __future__ import annotations

from collections.abc import Callable

from stepscope.advice.context import Context
from stepscope.advice.rules import collectives, copies, cpu, dataloader, gpu, host
from stepscope.analysis.facts import Facts
from stepscope.model import report as s

# A rule returns its recommendations; a rule that weighed its fix for this run and left it out may say why (a
# Considered, e.g. a CPU rule: threads already on every core).
Rule = Callable[[Context, list[s.Pattern]], list[s.Recommendation | s.Considered]]

RULES: tuple[Rule, ...] = (
    dataloader.dataloader_workers,
    dataloader.persistent_workers,
    copies.pin_memory,
    copies.non_blocking_copy,
    copies.uint8_transfer,
    copies.resident_tensors,
    copies.copy_overlap,
    copies.half_transfer,
    host.larger_batch,
    host.set_to_none,
    gpu.amp,
    gpu.tf32,
    host.torch_compile,
    host.cuda_graphs,
    host.remove_sync,
    host.offload_cpu_work,
    host.fused_optimizer,
    collectives.overlap_communication,
    cpu.cpu_threads,
    cpu.channels_last,
    cpu.cpu_bf16,
)


def recommend(facts: Facts, patterns: list[s.Pattern],
              ctx: Context | None = None) -> tuple[list[s.Recommendation], list[s.Considered]]:
    """Every fix the trace calls for, best estimated gain first; and the fixes weighed and left out, with why."""
    ctx = ctx or Context(facts)
    if len(facts.steps) == 0 or not ctx.step_ns:
        return [], []
    found = [r for rule in RULES for r in rule(ctx, patterns)]
    recs = [r for r in found if isinstance(r, s.Recommendation)]
    offered = {r.id for r in recs}
    considered = [c for c in found if isinstance(c, s.Considered) and c.id not in offered]
    return ranked(recs), considered


def ranked(recs: list[s.Recommendation]) -> list[s.Recommendation]:
    """Best estimated gain first (ties by id): the one order recommendations are given in; a fix whose estimate
    builds on another (`after`) comes right after that one, and without it is not given (its gain was measured
    against a step that fix makes)."""
    order = sorted(recs, key=lambda r: (-(r.estimated_speedup or 1.0), r.id))
    ids = {r.id for r in order}
    out = [r for r in order if r.after is None]
    for r in order:
        if r.after is not None and r.after in ids:
            out.insert(next(i for i, o in enumerate(out) if o.id == r.after) + 1, r)
    return out
