"""The annotated trace: the original events plus stepscope's own tracks (the verdict over each step, GPU
idle gaps by cause, sync points with their source line, DataLoader waits) as gzipped Chrome trace-event
JSON, the format ui.perfetto.dev and chrome://tracing open."""

from __future__ import annotations

import gzip
from typing import Any

import msgspec
import numpy as np

from stepscope.analysis.annotations import Annotations
from stepscope.model.report import Report
from stepscope.trace.model import Kind, Trace

VERDICT_TID, LOADER_TID, SYNC_TID, IDLE_TID = 1, 2, 3, 10  # IDLE_TID + device for each device's idle gaps
IDLE_NAMES = (("host_wait", "host wait"), ("kernel_wait", "kernel wait"), ("other", "other idle"))
CATEGORY = "stepscope"


class PerfettoRenderer:
    """Report + the trace and its annotations -> JSON bytes, gzipped unless told otherwise. `original` is
    the source file's JSON (its events are copied byte for byte); without it (nsys) the trace's own table
    is written instead."""

    def __init__(self, trace: Trace, annotations: Annotations, original: bytes | bytearray | memoryview | None = None,
                 compress: bool = True) -> None:
        self.trace = trace
        self.annotations = annotations
        self.original = original
        self.compress = compress

    def render(self, report: Report) -> bytes:
        doc: dict[str, Any]
        if self.original is not None:
            top = msgspec.json.decode(self.original, type=dict[str, msgspec.Raw] | list[msgspec.Raw])
            doc = top if isinstance(top, dict) else {}  # a bare list of events, which Chrome accepts too
            events: list[Any] = top if isinstance(top, list) else msgspec.json.decode(
                doc.get("traceEvents", b"[]"), type=list[msgspec.Raw])
        else:
            doc, events = {"displayTimeUnit": "ms"}, _events_of(self.trace)
        doc["traceEvents"] = events + self.own_events(report)
        data = msgspec.json.encode(doc)
        return gzip.compress(data, compresslevel=5, mtime=0) if self.compress else data

    def own_events(self, report: Report) -> list[dict[str, Any]]:
        """stepscope's tracks, on a process of their own, with times in the source's µs."""
        ev, a = self.trace.events, self.annotations
        pid = int(max([0, *np.unique(ev.pid).tolist(), *self.trace.meta.process_names])) + 1  # a pid of our own
        ts = self._ts
        out: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "stepscope"}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}},
        ]
        threads = {VERDICT_TID: "verdict per step", LOADER_TID: "DataLoader waits", SYNC_TID: "sync points"}
        threads.update({IDLE_TID + d.device: f"GPU {d.device} idle (by cause)" for d in a.idle})
        out += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
                for tid, name in sorted(threads.items())]
        out += [{"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}
                for tid in sorted(threads)]
        verdict = report.patterns[0].id.replace("_", " ") if report.patterns else None
        rows = {r.id: r for r in report.steps}
        for i, step_id in enumerate(a.steps.ids):
            row = rows.get(step_id)
            args: dict[str, Any] = {"patterns": {p.id: p.share for p in report.patterns}}
            if row is not None:
                args |= {"duration_us": row.duration_us, "breakdown_us": row.breakdown_us,
                         "gpu_utilization": row.gpu_utilization}
            largest = max(row.breakdown_us, key=row.breakdown_us.__getitem__) if row and row.breakdown_us else None
            label = verdict or (f"mostly {largest.replace('_', ' ')}" if largest else "step")
            out.append(_span(f"step {step_id}: {label}", ts(a.steps.start[i]), a.steps.end[i] - a.steps.start[i], pid,
                             VERDICT_TID, args))
        for d in a.idle:
            for cause, name in IDLE_NAMES:
                gaps = getattr(d, cause)
                out += [_span(name, ts(s), e - s, pid, IDLE_TID + d.device, {"device": d.device})
                        for s, e in zip(gaps.starts.tolist(), gaps.ends.tolist(), strict=True)]
        for r in a.dataloader.tolist():
            out.append(_span(self.trace.name_of(r), ts(ev.start[r]), ev.dur[r], pid, LOADER_TID,
                             {"thread": int(ev.tid[r])}))
        s = a.syncs
        for j, r in enumerate(s.rows.tolist()):
            where = s.location[j]
            args = {"op": s.op[j], "inner_op": s.inner_op[j], "dur_us": round(int(ev.dur[r]) / 1000, 3),
                    "thread": int(ev.tid[r])}
            if where is not None:
                args["source"] = f"{where.label} ({where.function or '?'})"
                if where.code:
                    args["code"] = where.code
            out.append({"ph": "i", "s": "t", "name": self.trace.name_of(r), "cat": CATEGORY, "pid": pid,
                        "tid": SYNC_TID, "ts": ts(ev.start[r]), "args": args})
        return out

    def _ts(self, ns: int | np.integer) -> float:
        """The source's own µs: the reader rebased times to the first event; undo that so tracks line up."""
        return round(self.trace.meta.origin_us + int(ns) / 1000, 3)


def _span(name: str, ts: float, dur_ns: int | np.integer, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": CATEGORY, "pid": pid, "tid": tid, "ts": ts,
            "dur": round(int(dur_ns) / 1000, 3), "args": args}


def _events_of(trace: Trace) -> list[dict[str, Any]]:
    """The trace's own table as trace events (for sources that are not Chrome JSON, such as nsys)."""
    ev = trace.events
    kinds = {int(k): k.name.lower() for k in Kind}
    gpu = trace.is_gpu_activity
    pid = np.where(gpu, ev.device, ev.pid).tolist()
    tid = np.where(gpu, ev.stream, ev.tid).tolist()
    origin = trace.meta.origin_us
    return [{"ph": "X", "name": trace.strings[n], "cat": kinds[k], "pid": p, "tid": t,
             "ts": round(origin + s / 1000, 3), "dur": round(d / 1000, 3)}
            for n, k, p, t, s, d in zip(ev.name.tolist(), ev.kind.tolist(), pid, tid, ev.start.tolist(),
                                        ev.dur.tolist(), strict=True)]
