"""The reader's note on categories no dialect uses lists them by count, ties by name: the same trace says the same
thing in every process. Before, ties came in the order of a set of strings, which Python's per-process hash seed
decides, so the note could change from one run to the next."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
from stepscope.trace.kineto import read_kineto
trace = read_kineto(sys.argv[1])
print(next(n for n in trace.meta.notes if "no profiler dialect uses" in n))
"""


def test_unknown_categories_are_listed_by_count_then_name_in_every_process(tmp_path: Path) -> None:
    # Five unknown categories: 'zeta' 3 events, then four with 2 each (a tie), and a known one ('cpu_op').
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]
    t = 10
    for cat, n in (("delta", 2), ("zeta", 3), ("alpha", 2), ("omega", 2), ("kappa", 2)):
        for _ in range(n):
            events.append({"ph": "X", "cat": cat, "name": f"{cat} work", "pid": 1, "tid": 1, "ts": t, "dur": 1})
            t += 2
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    expected = "(cat 'zeta': 3, 'alpha': 2, 'delta': 2, 'kappa': 2, 'omega': 2)"
    for seed in ("0", "1", "2", "3", "4", "5"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", SCRIPT, str(path)], capture_output=True, text=True, env=env,
                              check=True)
        assert expected in done.stdout, (seed, done.stdout)
