"""Which detected event marks the step: the strongest source seen so far, fixed once profiling starts.

Sources report completed steps. A training loop fires several (the DataLoader fetch, the model's
forward, the optimizer step); only the strongest one present drives the profiler, so the step is an
optimizer step when there is one, a DataLoader iteration in inference over a loader, and the model's
top-level forward otherwise. An explicit `stepscope.step()` (or a trainer callback) beats them all:
whoever writes it means it.
"""

from __future__ import annotations

import enum
from collections import Counter

# Lower is stronger.
PRIORITY = {"manual": 0, "lightning": 0, "huggingface": 0, "optimizer": 1, "dataloader": 2, "forward": 3}


class Mark(enum.Enum):
    IGNORE = 0  # a weaker source, or another source after the choice was fixed
    STEP = 1  # one more step of the leading source
    SWITCH = 2  # a stronger source took the lead; its step count starts over


class StepArbiter:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.leader: str | None = None
        self.locked = False

    @property
    def completed(self) -> int:
        """Steps completed by the leading source."""
        return self.counts[self.leader] if self.leader else 0

    def mark(self, source: str) -> Mark:
        self.counts[source] += 1
        if source == self.leader:
            return Mark.STEP
        if self.leader is None or (not self.locked and PRIORITY[source] < PRIORITY[self.leader]):
            self.leader = source
            return Mark.SWITCH
        return Mark.IGNORE

    def lock(self) -> None:
        """Fix the current leader (profiling has begun; a switch now would break the window)."""
        self.locked = True
