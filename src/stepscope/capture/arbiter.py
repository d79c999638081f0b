"""Which detected event marks the step: the strongest source seen so far, fixed once profiling starts.

Sources report completed steps. A training loop fires several (the DataLoader fetch, the model's
forward, the backward pass, the optimizer step); only the strongest one present drives the profiler,
so the step is an optimizer step when there is one, a backward pass when there is no optimizer step (or
none yet), a DataLoader iteration in inference over a loader, and the model's top-level forward
otherwise. An explicit `stepscope.step()` (or a trainer callback) beats them all: whoever writes it
means it. A source the user chose (`--step-on`) is the only one counted.
"""

from __future__ import annotations

import enum
from collections import Counter

# Lower is stronger.
PRIORITY = {"manual": 0, "lightning": 0, "huggingface": 0, "optimizer": 1, "backward": 2, "dataloader": 3,
            "forward": 4}
# Sources whose steps are training steps: a window of anything weaker may be evaluation before training.
TRAINING = ("manual", "lightning", "huggingface", "optimizer")
# `--step-on` names -> the source they count ("marker": stepscope.step() and the trainer callbacks).
CHOSEN = {"optimizer": "optimizer", "backward": "backward", "dataloader": "dataloader", "forward": "forward",
          "marker": "manual"}


class Mark(enum.Enum):
    IGNORE = 0  # a weaker source, or another source after the choice was fixed
    STEP = 1  # one more step of the leading source
    SWITCH = 2  # a stronger source took the lead; its step count starts over


class StepArbiter:
    def __init__(self, chosen: str | None = None) -> None:
        """`chosen`: a `--step-on` name; then only that source counts."""
        self.chosen = CHOSEN[chosen] if chosen is not None else None
        self.counts: Counter[str] = Counter()
        self.leader: str | None = None
        self.locked = False

    @property
    def completed(self) -> int:
        """Steps completed by the leading source."""
        return self.counts[self.leader] if self.leader else 0

    def _eligible(self, source: str) -> bool:
        if self.chosen is None:
            return True
        return source == self.chosen or (self.chosen == "manual" and PRIORITY[source] == 0)

    def mark(self, source: str) -> Mark:
        self.counts[source] += 1
        if not self._eligible(source):
            return Mark.IGNORE
        if source == self.leader:
            return Mark.STEP
        if self.leader is None or (not self.locked and PRIORITY[source] < PRIORITY[self.leader]):
            self.leader = source
            self.counts[source] = 1  # its count starts over with the lead
            return Mark.SWITCH
        return Mark.IGNORE

    def lock(self) -> None:
        """Fix the current leader (profiling has begun; a switch now would break the window)."""
        self.locked = True

    def reopen(self) -> None:
        """A window of a weak source is recorded: a stronger source may still take the lead."""
        self.locked = False

    def final(self) -> bool:
        """Whether a window of the current leader answers the question: a chosen source or a training step.
        A backward pass without any optimizer step yet may be one micro-batch of gradient accumulation."""
        return self.chosen is not None or self.leader in TRAINING
