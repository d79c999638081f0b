"""Source attribution (`stepscope.attribution`) switched on for the recorded steps only, as a window listener."""

from __future__ import annotations

from stepscope.attribution import Attribution


class AttributionWindow:
    """Installs the line and module ranges when recording begins and removes them when it ends; the
    session calls both on the thread that runs the steps."""

    def __init__(self, code_root: str | None = None) -> None:
        self.attribution = Attribution(code_root)

    def window_started(self) -> None:
        self.attribution.start()

    def window_ended(self) -> None:
        self.attribution.stop()

    @property
    def notes(self) -> list[str]:
        return [text for text in (self.attribution.error, self.attribution.note) if text]
