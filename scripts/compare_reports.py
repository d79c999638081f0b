"""Are the reports unchanged? Analyse every shared trace with this checkout and with another git ref, and
compare the report.json documents field by field.

    .venv/bin/python scripts/compare_reports.py REF [--traces DIR] [--ignore FIELD ...]

A refactor must leave every field identical; a deliberate change shows up here, field by field, to be
named in its commit. Each side runs in a fresh process with its own `src/` first on the path.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
OWN = ROOT / "tests" / "data"  # the traces stepscope recorded on real GPUs
ANALYZE = ("import sys, json; from stepscope.pipeline import analyze; from stepscope.model.report import to_json\n"
           "for path, out in zip(sys.argv[1::2], sys.argv[2::2]):\n"
           "    open(out, 'wb').write(to_json(analyze(path)))\n")
ANALYZE_OLD = ANALYZE.replace("stepscope.model.report import", "stepscope.report.schema import")


def traces(folder: Path) -> list[Path]:
    found = sorted(p for p in folder.rglob("*") if p.name.endswith((".json.gz", ".sqlite"))
                   and "two_rank_job" not in p.parts)
    return found + sorted({p.parent for p in folder.rglob("rank-*.json.gz")})


def run_side(src: Path, paths: list[Path], out: Path, code: str) -> None:
    args: list[str] = []
    for i, p in enumerate(paths):
        args += [str(p), str(out / f"{i}.json")]
    env = {**os.environ, "PYTHONPATH": str(src)}
    subprocess.run([sys.executable, "-c", code, *args], check=True, env=env)


def differences(a: object, b: object, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}.{k}: only in {'before' if k in a else 'after'}" for k in a.keys() ^ b.keys()]
        for k in a.keys() & b.keys():
            out += differences(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items before, {len(b)} after"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} -> {b!r}"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ref", help="the git ref to compare with (e.g. a commit before a refactor)")
    p.add_argument("--traces", type=Path, action="append", help="a folder of traces (default: shared and our own)")
    p.add_argument("--ignore", action="append", default=["generator"], help="top-level fields to skip")
    p.add_argument("--old-schema-module", action="store_true",
                   help="REF predates stepscope.model (its to_json lives in stepscope.report.schema)")
    args = p.parse_args()
    folders = args.traces or [SHARED, OWN]
    paths = [p for folder in folders for p in traces(folder)]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base / "ref"), args.ref],
                       check=True, capture_output=True)
        try:
            (base / "before").mkdir()
            (base / "after").mkdir()
            run_side(base / "ref" / "src", paths, base / "before", ANALYZE_OLD if args.old_schema_module else ANALYZE)
            run_side(ROOT / "src", paths, base / "after", ANALYZE)
            failed = 0
            for i, path in enumerate(paths):
                before = json.loads((base / "before" / f"{i}.json").read_bytes())
                after = json.loads((base / "after" / f"{i}.json").read_bytes())
                for key in args.ignore:
                    before.pop(key, None)
                    after.pop(key, None)
                diff = differences(before, after)
                print(f"{'same' if not diff else 'DIFFERENT'}  {path}")
                for d in diff[:20]:
                    print(f"    {d}")
                failed += bool(diff)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base / "ref")], check=False)
    print(f"{len(paths) - failed} of {len(paths)} reports identical")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
