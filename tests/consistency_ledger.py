"""What the consistency check keeps: every figure checked and each one shown with a value that is not the Report's
(tests/consistency_checks.py), and how a figure shown as text is read back."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

CELL = r"[-+~]?[\d,]*\.?\d+(?: ?(?:ms|µs|s|%|x)(?![\w/]))?"
UNITS = {"ms": 1000.0, "µs": 1.0, "s": 1e6, "%": 0.01, "x": 1.0, "": 1.0}


def number(text: str) -> tuple[float, float]:
    """A figure as shown -> (value in the Report's unit, half its last printed digit): '9.5 ms' -> (9500, 50),
    '~1.85x' -> (1.85, 0.005), '6,747.7' -> (6747.7, 0.05)."""
    m = re.fullmatch(r"\s*[~]?([-+]?[\d,]*\.?(\d*))\s*(ms|µs|s|%|x)?\s*", text)
    if m is None or not re.search(r"\d", m.group(1)):
        raise ValueError(f"not a figure: {text!r}")
    scale = UNITS[m.group(3) or ""]
    digits = len(m.group(2)) if "." in m.group(1) else 0
    return float(m.group(1).replace(",", "")) * scale, 0.5 * 10 ** -digits * scale


@dataclass
class Ledger:
    """Every figure checked, and each one shown with a value that is not the Report's."""

    checked: int = 0
    problems: list[str] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)  # what was checked: "step time", "line", "fix", "phase", ...

    def _count(self, figure: str) -> None:
        self.checked += 1
        self.kinds.add(figure.split(" ")[0] if figure.split(" ")[0] in ("line", "fix", "phase", "batch") else figure)

    def shown(self, figure: str, where: str, text: str | None, value: float | None) -> None:
        """`text` (as a place shows `figure`) must read as `value` to its printed precision."""
        if text is None or value is None:
            if (text is None) != (value is None):
                self.problems.append(f"{figure}: {where} shows {text!r}, the Report has {value!r}")
            return
        self._count(figure)
        got, half = number(text)
        if abs(got - value) > half * 1.001 + 1e-9 * max(1.0, abs(value)):
            self.problems.append(f"{figure}: {where} shows {text.strip()!r}, the Report has {value:g}")

    def same(self, figure: str, where: str, other: object, value: object) -> None:
        """A value another JSON or struct carries must be the Report's (numbers to the Report's precision)."""
        self._count(figure)
        if isinstance(value, float) and isinstance(other, (int, float)) and not isinstance(other, bool):
            if math.isclose(other, value, rel_tol=1e-6, abs_tol=1e-3):
                return
        elif other == value:
            return
        self.problems.append(f"{figure}: {where} has {other!r}, the Report has {value!r}")
