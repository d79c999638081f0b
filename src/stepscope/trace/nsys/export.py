"""Turn an Nsight Systems report (.nsys-rep) into SQLite with the `nsys` tool, then read it."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from stepscope.errors import StepscopeError
from stepscope.trace.model import Trace
from stepscope.trace.nsys.reader import read_nsys


def export_and_read(path: Path) -> Trace:
    if not path.exists():
        raise StepscopeError(f"{path}: no such file or folder")
    nsys = shutil.which("nsys")
    if nsys is None:
        raise StepscopeError(
            f"{path}: reading .nsys-rep needs the `nsys` tool on the PATH",
            hint=f"export it by hand: nsys export --type sqlite --output report.sqlite {path}; "
            "then: stepscope analyze report.sqlite",
        )
    with tempfile.TemporaryDirectory(prefix="stepscope-nsys-") as tmp:
        out = Path(tmp) / (path.stem + ".sqlite")
        done = subprocess.run(
            [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(path)],
            capture_output=True, text=True, check=False,
        )
        if done.returncode != 0 or not out.exists():
            detail = (done.stderr or done.stdout).strip().splitlines()
            raise StepscopeError(f"{path}: nsys export failed ({detail[-1] if detail else done.returncode})")
        return read_nsys(out)
