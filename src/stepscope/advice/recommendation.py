"""Building a Recommendation: the one place rules turn a finding and its estimate into the report's type."""

from __future__ import annotations

from typing import Any

import numpy as np

from stepscope.advice.context import Context
from stepscope.advice.location import locate
from stepscope.advice.whatif import Estimate
from stepscope.model import report as s

# A fix whose estimated gain is under 1% of the step is not worth the reader's attention.
MIN_GAIN = 1.01


def recommendation(ctx: Context, rec_id: str, title: str, evidence: dict[str, Any], estimate: Estimate,
                   rows: np.ndarray | None = None, location: dict[str, Any] | None = None) -> s.Recommendation:
    """`location`: the line the fix goes on when capture saw it (the line that built the DataLoader or the
    optimizer); else the user's line behind the host `rows`, when the trace carries source information."""
    return s.Recommendation(id=rec_id, title=title, evidence=evidence,
                            location=location if location is not None else locate(ctx.facts.trace, rows),
                            estimated_speedup=round(estimate.speedup, 2), estimate=estimate.text)
