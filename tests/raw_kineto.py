"""A second, naive reading of a Kineto trace, for tests: the figures a person would compute by hand from the
raw JSON (plain Python over the event dicts, none of stepscope's code), to check stepscope's verdicts against.

Steps are the ProfilerStep ranges, each stretched to the end of the GPU work launched inside it and the next
one starting where the previous ended (as the TensorBoard plugin counts a step). Times are in µs, as in the
file.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from conftest import kineto_trace

GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME_CATEGORIES = {"cuda_runtime", "cuda_driver", "Runtime"}
COLLECTIVE_KERNEL = re.compile(r"nccl", re.IGNORECASE)
STEP = re.compile(r"^ProfilerStep#(\d+)$")
TB_FIXTURES = Path(__file__).parent / "data" / "tb_overview"

Interval = tuple[float, float]


@dataclass(frozen=True)
class Raw:
    events: tuple[dict, ...]
    steps: tuple[tuple[str, float, float], ...]  # (id, start, end), device windows in µs
    meta: dict  # the file's top level less its events: deviceProperties, distributedInfo, ...

    @property
    def step_us(self) -> float:
        """The mean step."""
        return sum(end - start for _, start, end in self.steps) / len(self.steps)

    def gpu(self, categories: Iterable[str] = GPU_CATEGORIES) -> list[dict]:
        """GPU activities of these categories that start inside a step."""
        wanted = set(categories)
        return [e for e in self.events if e.get("cat") in wanted and e.get("ph") == "X" and self.step_of(e["ts"])]

    def kernels(self, name: str = "") -> list[dict]:
        """Kernels inside the steps whose name matches `name` (a regex, case-insensitive)."""
        pattern = re.compile(name, re.IGNORECASE)
        return [e for e in self.gpu({"kernel", "Kernel"}) if pattern.search(e["name"])]

    def host(self, name: str) -> list[dict]:
        """Host events with exactly this name that start inside a step."""
        return [e for e in self.events if e.get("name") == name and e.get("ph") == "X" and self.step_of(e["ts"])
                and e.get("cat") not in GPU_CATEGORIES]

    def step_of(self, ts: float) -> str | None:
        return next((i for i, start, end in self.steps if start <= ts < end), None)

    def per_step(self, total: float) -> float:
        return total / len(self.steps)

    def with_steps(self, steps: Iterable[tuple[str, float, float]]) -> Raw:
        return Raw(self.events, tuple(steps), self.meta)

    def runtime(self) -> list[dict]:
        """Runtime (and driver) API calls that start inside a step."""
        return [e for e in self.events if e.get("cat") in RUNTIME_CATEGORIES and e.get("ph") == "X"
                and self.step_of(e["ts"])]

    def launches(self) -> list[dict]:
        """The runtime calls that put a GPU activity (kernel, copy, memset) on the GPU, inside the steps."""
        launched = {e.get("args", {}).get("correlation") for e in self.gpu()}
        return [e for e in self.runtime() if e.get("args", {}).get("correlation") in launched]

    def launched_inside(self, name: str) -> list[dict]:
        """GPU activities launched from inside host ranges with this name (on the range's thread)."""
        ranges = [(e["ts"], e["ts"] + e["dur"], e.get("tid")) for e in self.host(name)]
        calls = {e["args"]["correlation"]: e for e in self.launches()}
        inside = {c for c, e in calls.items() if any(a <= e["ts"] < b and tid == e.get("tid") for a, b, tid in ranges)}
        return [e for e in self.gpu() if e.get("args", {}).get("correlation") in inside]

    def while_gpu_idle(self, events: Iterable[dict]) -> float:
        """How long these (host) events run while no GPU activity does, in µs."""
        mine = spans(events)
        return length(mine) - overlap(mine, spans(self.gpu()))


def total(events: Iterable[dict]) -> float:
    return sum(e["dur"] for e in events)


def union(intervals: Iterable[Interval]) -> list[Interval]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def length(intervals: Iterable[Interval]) -> float:
    return sum(b - a for a, b in intervals)


def overlap(a: list[Interval], b: list[Interval]) -> float:
    """Length of the intersection of two merged interval lists."""
    i = j = 0
    out = 0.0
    while i < len(a) and j < len(b):
        out += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def spans(events: Iterable[dict]) -> list[Interval]:
    return union((e["ts"], e["ts"] + e["dur"]) for e in events)


@cache
def read(name: str) -> Raw:
    document = json.loads(gzip.decompress(kineto_trace(name).read_bytes()))
    events = tuple(document.pop("traceEvents"))
    return Raw(events, _device_steps(events), document)


def without_one_off(raw: Raw) -> Raw:
    """The steps the verdict weighs (docs/patterns.md): a first step over 1.25x the median of three or more is a
    one-off (start-up, first calls) and left out."""
    durations = sorted(end - start for _, start, end in raw.steps)
    first = raw.steps[0][2] - raw.steps[0][1]
    one_off = len(durations) >= 3 and first > 1.25 * durations[len(durations) // 2]
    return raw.with_steps(raw.steps[1:]) if one_off else raw


def gpu_span(raw: Raw) -> Raw:
    """A trace with no steps as one window from its first launch to its last GPU end (docs/patterns.md)."""
    gpu = [e for e in raw.events if e.get("cat") in GPU_CATEGORIES and e.get("ph") == "X"]
    launched = {e.get("args", {}).get("correlation") for e in gpu}
    first = min(e["ts"] for e in raw.events if e.get("cat") in RUNTIME_CATEGORIES
                and e.get("args", {}).get("correlation") in launched)
    return raw.with_steps([("all", first, max(e["ts"] + e["dur"] for e in gpu))])


def _device_steps(events: tuple[dict, ...]) -> tuple[tuple[str, float, float], ...]:
    host = sorted((e["ts"], e["ts"] + e["dur"], m.group(1)) for e in events
                  if e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation"
                  and (m := STEP.match(str(e.get("name", "")))))
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in events
                 if e.get("cat") in RUNTIME_CATEGORIES and "correlation" in e.get("args", {})}
    gpu = [(launch_ts.get(e.get("args", {}).get("correlation")), e["ts"] + e["dur"]) for e in events
           if e.get("cat") in GPU_CATEGORIES and e.get("ph") == "X"]
    steps, previous_end = [], None
    for start, end, step_id in host:
        launched = [gpu_end for ts, gpu_end in gpu if ts is not None and start <= ts < end]
        start = start if previous_end is None else previous_end
        previous_end = max([end, *launched])
        steps.append((step_id, start, previous_end))
    return tuple(steps)


def tb_overview(name: str) -> list[dict]:
    """The TensorBoard plugin's per-step breakdown of a shared trace (µs; tests/data/tb_overview)."""
    return json.loads((TB_FIXTURES / f"{name.removesuffix('.json.gz')}.json").read_text())["steps"]


def tb_share(name: str, *categories: str) -> float:
    """The plugin's share of the step time in these categories, over all its steps."""
    rows = tb_overview(name)
    return sum(row[c] for row in rows for c in categories) / sum(row["total"] for row in rows)


def shares(raw: Raw) -> dict[str, float]:
    """Each step's time split as HTA and stepscope's docs define it, over all steps: `compute` (a compute
    kernel runs), `exposed_communication` (only a collective kernel runs), `host_wait` (the GPU idles and the
    activity that ends the idle was launched after it began: the host was late) and `device_wait` (the GPU
    idles with that activity already launched)."""
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in raw.events
                 if e.get("cat") in RUNTIME_CATEGORIES and "correlation" in e.get("args", {})}
    out = dict.fromkeys(("compute", "exposed_communication", "host_wait", "device_wait"), 0.0)
    for _, start, end in raw.steps:
        activity = [e for e in raw.gpu() if start <= e["ts"] < end]
        kernels = [e for e in activity if e["cat"] in ("kernel", "Kernel")]
        compute = spans(e for e in kernels if not COLLECTIVE_KERNEL.search(e["name"]))
        collective = spans(e for e in kernels if COLLECTIVE_KERNEL.search(e["name"]))
        out["compute"] += length(compute)
        out["exposed_communication"] += length(collective) - overlap(collective, compute)
        busy_until = start
        for e in sorted(activity, key=lambda e: e["ts"]):
            if e["ts"] > busy_until:
                launched = launch_ts.get(e.get("args", {}).get("correlation"), start)
                out["host_wait" if launched > busy_until else "device_wait"] += e["ts"] - busy_until
            busy_until = max(busy_until, e["ts"] + e["dur"])
    steps = sum(end - start for _, start, end in raw.steps)
    return {k: v / steps for k, v in out.items()}
