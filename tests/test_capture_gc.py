"""A stopped profiler's native results are freed between sessions (capture/release.py). Left to the garbage
collector, they were freed at any moment, during the next session too, and libkineto crashed the process there
(SIGSEGV in ~MemoryTraceLogger under gdb). A low GC threshold makes collections land inside the sessions: with the
results left to the collector this test's five in-process `stepscope run`s crashed in 2 of 3 processes; with them
released, 5 of 5 passed (2026-11-28, this machine)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

PROGRAM = """
import torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for (x,) in DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=4):
    model(x).sum().backward()
    opt.step()
"""

DRIVER = """
import gc, sys, torch
gc.set_threshold(20, 3, 3)
torch.set_num_threads(1)
from stepscope.cli import main
for k in range(5):
    code = main(["run", "-o", sys.argv[1] + f"/out{k}", "--skip", "1", "--warmup", "0", "--steps", "2", sys.argv[2]])
    assert code == 0, code
print("five runs done")
"""


def test_profiler_sessions_survive_frequent_garbage_collection(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(PROGRAM))
    done = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path), str(script)], capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and "five runs done" in done.stdout, (done.returncode, done.stderr[-2000:])
