"""Write N rank traces of one synthetic job from one real rank trace, with known answers.

Every generated rank is the base trace with time inserted at two points per step:
- `delay[r, k]` inside the rank's DataLoader range (cause "dataloader") or inside its longest CPU op before the
  step's first collective (cause "compute"): a small random jitter for every rank, plus `delay_ms` for the
  straggler;
- `max(delay[:, k]) - delay[r, k]` inside that first collective: the early ranks wait for the last one, so every
  rank leaves the collective at the same moment, as a real collective would.
Then each rank's clock is shifted by its own offset. The ground truth is exact: the straggler, its cause, each
collective's arrival skew (max - min of the step's delays), each rank's wait, and each clock offset.

    python tests/rank_generator.py BASE.json.gz OUT_DIR --ranks 1024 --straggler 17 [--cause compute] [--small]

`--small` keeps only the ranges that matter here (steps, DataLoader, collectives, ops of 100 µs or more), for
tests that need many ranks quickly.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

STEP = re.compile(r"^ProfilerStep#\d+$")
DATALOADER = re.compile(r"^enumerate\(DataLoader\)#.*__next__")
COLLECTIVE = re.compile(r"^(gloo|nccl):")
KEEP_SMALL = re.compile(r"^ProfilerStep#|^enumerate\(DataLoader\)|^(gloo|nccl):|^c10d::")
SMALL_MIN_DUR_US = 100.0


@dataclass(frozen=True)
class Truth:
    """What the generated folder holds, for tests to check against (µs)."""

    ranks: int
    straggler: int
    cause: str
    clock_offset_us: np.ndarray  # per rank, added to every timestamp
    delay_us: np.ndarray  # ranks x steps: the time inserted before each step's first collective
    files: list[Path]

    @property
    def skew_us(self) -> np.ndarray:
        """Per step: the first collective's arrival skew."""
        return self.delay_us.max(axis=0) - self.delay_us.min(axis=0)


def load(path: Path) -> dict:
    with gzip.open(path, "rt") if path.suffix == ".gz" else path.open() as f:
        return json.load(f)


def _insertion_points(events: list[dict], cause: str) -> list[tuple[float, float]]:
    """Per step: (where the rank's delay goes, where its wait goes), in the base trace's µs."""
    spans = [e for e in events if e.get("ph") == "X"]
    points = []
    for step in sorted((e for e in spans if STEP.match(str(e.get("name")))), key=lambda e: e["ts"]):
        lo, hi, tid = step["ts"], step["ts"] + step["dur"], step["tid"]
        inside = [e for e in spans if lo <= e["ts"] < hi]
        loader = [e for e in inside if DATALOADER.match(str(e["name"]))]
        after = loader[0]["ts"] + loader[0]["dur"] if loader else lo
        collectives = sorted((e for e in inside if COLLECTIVE.match(str(e["name"])) and e["ts"] >= after),
                             key=lambda e: e["ts"])
        if not loader or not collectives:
            continue
        first = collectives[0]
        if cause == "dataloader":
            where = after - 1.0
        else:
            ops = [e for e in inside if e.get("cat") == "cpu_op" and e["tid"] == tid and e["ts"] >= after
                   and e["ts"] + e["dur"] <= first["ts"]]
            longest = max(ops, key=lambda e: e["dur"])
            where = longest["ts"] + longest["dur"] - 0.5
        points.append((where, first["ts"] + first["dur"] - 1.0))
    return points


def shifted(ts: np.ndarray, end: np.ndarray, at: np.ndarray, add: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Insert `add[i]` µs at time `at[i]`: what starts at or after a point moves; what spans it grows."""
    order = np.argsort(at)
    at, cum = at[order], np.concatenate([[0.0], np.cumsum(add[order])])
    new_ts = ts + cum[np.searchsorted(at, ts, side="right")]
    return new_ts, np.maximum(end + cum[np.searchsorted(at, end, side="left")], new_ts)


def generate(base: Path, out: Path, *, ranks: int, straggler: int, cause: str = "dataloader",
             delay_ms: float = 15.0, jitter_ms: float = 0.5, clock_skew_ms: float = 50.0, seed: int = 0,
             small: bool = False) -> Truth:
    doc = load(base)
    events = doc["traceEvents"]
    if small:
        events = [e for e in events if e.get("ph") != "X" or KEEP_SMALL.match(str(e.get("name")))
                  or float(e.get("dur", 0)) >= SMALL_MIN_DUR_US]
    points = np.array(_insertion_points(events, cause), dtype=np.float64).reshape(-1, 2)
    rng = np.random.default_rng(seed)
    delay = rng.uniform(0.0, jitter_ms * 1000, size=(ranks, len(points)))
    delay[straggler] += delay_ms * 1000
    offset = np.round(rng.uniform(-clock_skew_ms * 1000, clock_skew_ms * 1000, size=ranks), 3)
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    ts = np.array([float(e["ts"]) for e in timed])
    end = ts + np.array([float(e.get("dur", 0.0)) if e.get("ph") == "X" else 0.0 for e in timed])
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for r in range(ranks):
        at = np.concatenate([points[:, 0], points[:, 1]])
        add = np.concatenate([delay[r], delay.max(axis=0) - delay[r]])
        new_ts, new_end = shifted(ts, end, at, add)
        files.append(_write(doc, events, timed, new_ts + offset[r], new_end - new_ts, r, ranks, out))
    return Truth(ranks=ranks, straggler=straggler, cause=cause, clock_offset_us=offset, delay_us=delay, files=files)


def _write(doc: dict, events: list[dict], timed: list[dict], ts: np.ndarray, dur: np.ndarray, rank: int,
           ranks: int, out: Path) -> Path:
    timed_ids = {id(e): i for i, e in enumerate(timed)}
    rows = []
    for e in events:
        i = timed_ids.get(id(e))
        if i is not None:
            e = {**e, "ts": round(float(ts[i]), 3)}
            if e.get("ph") == "X":
                e["dur"] = round(float(dur[i]), 3)
        rows.append(e)
    info = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": ranks}
    payload = {"distributedInfo": info, **{k: v for k, v in doc.items() if k != "distributedInfo"}, "traceEvents": rows}
    # A space after the colon, as PyTorch writes it: HTA finds a file's rank with the regex '"rank":\s+(\d+)'.
    data = msgspec.json.encode(payload).replace(b'"rank":', b'"rank": ', 1)
    path = out / f"rank{rank:04d}.json.gz"
    path.write_bytes(gzip.compress(data, compresslevel=1))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--straggler", type=int, default=0)
    parser.add_argument("--cause", choices=("dataloader", "compute"), default="dataloader")
    parser.add_argument("--delay-ms", type=float, default=15.0)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    truth = generate(args.base, args.out, ranks=args.ranks, straggler=args.straggler, cause=args.cause,
                     delay_ms=args.delay_ms, small=args.small, seed=args.seed)
    print(f"wrote {truth.ranks} ranks to {args.out} (straggler {truth.straggler}, cause {truth.cause})")


if __name__ == "__main__":
    main()
