"""The seam for source attribution: which line of the user's code a recommendation points at."""

from __future__ import annotations

import re

import numpy as np

from stepscope.analysis.time_by_line import location_of_rows
from stepscope.model import report as s
from stepscope.trace.model import Trace


def locate(trace: Trace, rows: np.ndarray | None) -> s.Location | None:
    """The user's source line for the host rows behind a fix, when the trace carries source information."""
    if rows is None or len(rows) == 0:
        return None
    return location_of_rows(trace, rows)


def rows_named(trace: Trace, pattern: re.Pattern[str]) -> np.ndarray:
    """The rows whose name matches, to locate a fix about them (DataLoader waits, optimizer steps, ...)."""
    return np.flatnonzero(trace.names_where(lambda s: pattern.match(s) is not None))
