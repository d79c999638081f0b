"""One small rule per fix; each returns its recommendations (most return zero or one). Ranked by gain.

The rules live by the bottleneck they answer: dataloader (input_bound), copies (copy_bound), host (launch,
sync and CPU-work bound), gpu (compute bound), collectives (communication bound), cpu (CPU-only runs). A new
rule is one function in its module and one line in RULES."""

from __future__ import annotations

from collections.abc import Callable

from stepscope import forked
from stepscope.advice.context import Context
from stepscope.advice.rules import collectives, copies, cpu, dataloader, gpu, host
from stepscope.advice.whatif import REPLAY_MAX_EVENTS
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
    found = [r for results in _each_rule(ctx, patterns) for r in results]
    recs = [r for r in found if isinstance(r, s.Recommendation)]
    offered = {r.id for r in recs}
    considered = [c for c in found if isinstance(c, s.Considered) and c.id not in offered]
    return ranked(recs), considered


# Rules whose estimates replay the step's graph on the recorded timeline (advice/whatif.py), each a few tens of ms on a
# big trace: where allowed (stepscope.forked), a forked copy runs them while this process runs the others (the
# device-side ones among them share a replay without the profiler's cost).
FORKED_RULES = (dataloader.dataloader_workers, host.larger_batch, host.cuda_graphs)
# Below this many events the replays take a few ms: not worth a copy of the process.
FORK_MIN_EVENTS = 20_000


def _each_rule(ctx: Context, patterns: list[s.Pattern]) -> list[list[s.Recommendation | s.Considered]]:
    """Each rule's findings, in RULES' order, whichever process found them."""
    replays = ctx.accelerator == "gpu" and FORK_MIN_EVENTS <= len(ctx.facts.trace.events) <= REPLAY_MAX_EVENTS
    copy = forked.start(lambda: [rule(ctx, patterns) for rule in FORKED_RULES]) if replays else None
    found = {rule: rule(ctx, patterns) for rule in RULES if copy is None or rule not in FORKED_RULES}
    if copy is not None:
        theirs = copy.result()  # None: the copy failed, and the rules run here (meeting its error, if any)
        found.update(zip(FORKED_RULES, theirs or [rule(ctx, patterns) for rule in FORKED_RULES], strict=True))
    return [found[rule] for rule in RULES]


def ranked(recs: list[s.Recommendation]) -> list[s.Recommendation]:
    """Best estimated gain first (ties by id): the one order recommendations are given in."""
    return sorted(recs, key=lambda r: (-(r.estimated_speedup or 1.0), r.id))
