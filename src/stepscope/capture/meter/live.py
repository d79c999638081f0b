"""The line that shows the meter while the program runs: step, step time, samples/s and the phases' shares over the
latest steps. Only on a terminal (a log file gets the report at the end, not a line redrawn every second)."""

from __future__ import annotations

from typing import TextIO

from stepscope.capture.meter.phases import FIELDS, NAMED, StepLog
from stepscope.model.meter import PHASES

RECENT = 20  # steps the line averages over
SHORT = {"data": "data", "forward": "fwd", "backward": "bwd", "optimizer": "opt", "sync": "sync"}


def status_text(log: StepLog, batch_size: int | None) -> str:
    """"step 120 · 46.1 ms · 694 samples/s · data 50% fwd 20% bwd 25% opt 3% other 2%" over the latest steps."""
    rows = log.rows
    n = min(RECENT, len(rows) // FIELDS)
    if n == 0:
        return f"step {log.count}"
    recent = rows[len(rows) - n * FIELDS:]
    wall = sum(recent[1::FIELDS])
    parts = [sum(recent[2 + i::FIELDS]) for i in range(NAMED)]
    step_ms = wall / n / 1e6
    text = f"step {log.count} · {step_ms:.1f} ms"
    if batch_size and wall > 0:
        text += f" · {batch_size * n / (wall / 1e9):,.0f} samples/s"
    if wall > 0:
        shares = [f"{SHORT[p]} {v / wall:.0%}" for p, v in zip(PHASES, parts, strict=True) if v / wall >= 0.005]
        shares.append(f"other {max(wall - sum(parts), 0) / wall:.0%}")
        text += " · " + " ".join(shares)
    return text


class LiveLine:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.on = _is_terminal(stream)
        self._shown = False

    def show(self, log: StepLog, batch_size: int | None) -> None:
        if not self.on:
            return
        try:
            self.stream.write(f"\r\x1b[2Kstepscope: {status_text(log, batch_size)}")
            self.stream.flush()
            self._shown = True
        except (OSError, ValueError):
            self.on = False

    def close(self) -> None:
        if self._shown:
            try:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()
            except (OSError, ValueError):
                pass
            self._shown = False


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
