"""Source attribution (`stepscope.attribution`) switched on for the recorded steps only, as a window listener.

During the warm-up steps the torch calls of each user line are counted; when one line makes nearly all of
them (`trainer.train()`: a trainer's own code runs the loop), the recorded steps are attributed to the
lines below it, in the libraries it calls, rather than to that one line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from stepscope.attribution import Attribution, Survey

# One user line making this share of the torch calls tells nothing by itself: show the lines below it.
DRILL_SHARE = 0.9


class AttributionWindow:
    """Installs the line and module ranges when recording begins and removes them when it ends; the
    session calls both on the thread that runs the steps."""

    def __init__(self, code_root: str | None = None, fetch: Callable[[Any], bool] | None = None) -> None:
        """`fetch`: the instrumentation layer's fetch slot (StepMeter.around_fetch): the line range of a DataLoader
        fetch runs inside the layer's own hook instead of a second patch of `__next__`."""
        self.code_root = code_root
        self.fetch = fetch
        self.attribution = Attribution(code_root, fetch=fetch)
        self._survey: Survey | None = None
        self.drill_note: str | None = None

    def warmup_started(self) -> None:
        self._survey = Survey(self.code_root)
        self._survey.start()

    def window_started(self) -> None:
        if self._survey is not None:
            share, line = self._survey.stop()
            self._survey = None
            if share >= DRILL_SHARE and line is not None and not self.attribution.active:
                self.attribution = Attribution(self.code_root, libraries=True, fetch=self.fetch)
                self.drill_note = (f"{line} made {share:.0%} of the torch calls of the warm-up steps: the lines "
                                   "below it, in the libraries it calls, are shown instead of that one line")
        self.attribution.start()

    def window_ended(self) -> None:
        if self._survey is not None:
            self._survey.stop()
            self._survey = None
        self.attribution.stop()

    def between_steps(self) -> None:
        """At each step hook: a mode stopped inside its own handler comes off the stack now (line_ranges.sweep)."""
        ranges = sys.modules.get("stepscope.attribution.line_ranges")  # never imported: no mode was pushed
        if ranges is not None:
            ranges.sweep()

    def session_closed(self) -> None:
        """The program is over: no stepscope mode stays on its mode stack (see line_ranges.take_off)."""
        self.window_ended()
        ranges = sys.modules.get("stepscope.attribution.line_ranges")  # never imported: no mode was pushed
        if ranges is not None:
            ranges.forget_stranded()

    @property
    def notes(self) -> list[str]:
        return [text for text in (self.drill_note, self.attribution.error, self.attribution.note) if text]
