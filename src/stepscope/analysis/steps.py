"""Find the training steps: ProfilerStep ranges, else step annotations, else NVTX ranges, else one window."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from stepscope.analysis.launches import launching_call
from stepscope.errors import StepscopeError
from stepscope.trace.model import Kind, Trace
from stepscope.trace.source_annotations import OWN_ANNOTATION_PREFIX

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
# A communication backend's own range around a collective (the breakdown's communication ops).
COLLECTIVE_OP = re.compile(r"^(nccl|gloo|rccl|hccl|mpi|ucc):")
CUT_TOLERANCE_NS = 1_000  # an op ending this close to the trace's last instant was cut by the profiler's stop
OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")
PHASE_ANNOTATION = re.compile(r"^## .* ##$")
# A cut-off last step: fewer GPU activities than this fraction of its predecessor's.
TRUNCATED_STEP_RATIO = 0.8
MIN_REPEATS_FOR_STEP_RANGE = 3
MAX_LISTED = 5  # left-out steps named one by one in the notes, then counted
# With no step in the trace, the window is the GPU's working span: start-up before the first launch is no step.
GPU_SPAN = "GPU activity span"
# The events columns find_steps reads (start and dur give `end`), besides the launch links: a table of these columns
# and of `step_rows` finds the same steps (a what-if's replay, which only asks for its median step, builds no more).
STEP_COLUMNS = ("kind", "start", "dur", "name", "pid", "tid", "correlation")


@dataclass(frozen=True)
class Steps:
    """The steps as back-to-back windows [start, end) in ns, stretched to the end of their GPU work."""

    ids: tuple[str, ...]
    start: np.ndarray
    end: np.ndarray
    cpu_start: np.ndarray  # the range as the host recorded it
    cpu_end: np.ndarray
    gpu_activity_count: np.ndarray  # GPU activities launched from inside each step
    source: str  # "ProfilerStep", "optimizer step", "## annotations ##", "range NAME", GPU_SPAN, "whole trace"
    dropped: tuple[str, ...] = ()  # why steps were left out, for the user

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start

    def index_of(self, times: np.ndarray, host: bool = False) -> np.ndarray:
        """The index of the step each time falls in, -1 for times outside every step.

        host=True: by the steps' host ranges, for host-side events (ops, runtime calls, syncs, DataLoader
        waits). With a deep GPU queue the stretched windows run far behind the host (on an H100, a matmul
        loop's windows began 36 ms after its recorded host ranges had ended), so a host event belongs to
        the step whose host range holds it, and its GPU work follows it through the launch link."""
        times = np.asarray(times)
        start, end = (self.cpu_start, self.cpu_end) if host else (self.start, self.end)
        k = np.searchsorted(start, times, side="right")
        k -= 1  # in place: on a trace of gigabytes, k is MB
        inside = k >= 0
        inside[inside] &= times[inside] < end[k[inside]]
        k[~inside] = -1
        return k

    def per_step(self, times: np.ndarray, weights: np.ndarray | None = None, host: bool = False) -> np.ndarray:
        """Per step, how many of the times fall in it (or the sum of their weights)."""
        k = self.index_of(times, host)
        inside = k >= 0
        return np.bincount(k[inside], weights=None if weights is None else weights[inside], minlength=len(self))


def step_rows(trace: Trace) -> np.ndarray:
    """Row mask of the events find_steps may read: all but the CPU ops it never names (ProfilerStep, optimizer step,
    phase and collective ranges stay; user annotations, runtime calls and GPU work all stay), keeping the first to
    start and the last to end, which bound the trace (a collective that runs to its end; the whole-trace step)."""
    return trace.derived("steps.rows", lambda: _step_rows(trace))


def _step_rows(trace: Trace) -> np.ndarray:
    ev = trace.events
    keep = ~ev.of_kind(Kind.CPU_OP) | trace.names_where(lambda s: any(
        p.match(s) is not None for p in (PROFILER_STEP, OPTIMIZER_STEP, PHASE_ANNOTATION, COLLECTIVE_OP)))
    if len(ev):
        keep[int(np.argmin(ev.start))] = keep[int(np.argmax(ev.end))] = True
    return keep


def _host_ranges(trace: Trace) -> np.ndarray:
    return trace.events.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION)


def _profiler_steps(trace: Trace) -> tuple[list[str], np.ndarray, list[str]] | None:
    """ProfilerStep#N ranges, one per id, and why others were left out."""
    mask = _host_ranges(trace) & trace.names_where(lambda s: PROFILER_STEP.match(s) is not None)
    rows = np.flatnonzero(mask)
    if len(rows) == 0:
        return None
    # A step recorded on several threads appears once per thread, overlapping: keep the first of each id.
    # The same id again at another time is a second step under one name: left out, and said so.
    ev = trace.events
    ids = [PROFILER_STEP.match(trace.name_of(r)).group(1) for r in rows]  # type: ignore[union-attr]
    first: dict[str, int] = {}
    repeated: Counter[str] = Counter()
    for step_id, row in zip(ids, rows.tolist(), strict=True):
        kept = first.setdefault(step_id, row)
        if kept != row and ev.start[row] >= ev.end[kept]:
            repeated[step_id] += 1
    notes = [f"step {i}: recorded {n + 1} times at different times under one name; only the first is kept"
             for i, n in repeated.items()]
    return list(first), np.array(list(first.values()), dtype=np.int64), notes


def _optimizer_steps(trace: Trace) -> tuple[list[str], np.ndarray, np.ndarray] | None:
    """Steps that end where each optimizer step ends; the first, with no known start, is left out."""
    rows = np.flatnonzero(_host_ranges(trace) & trace.names_where(lambda s: OPTIMIZER_STEP.match(s) is not None))
    if len(rows) < 2:
        return None
    ends = trace.events.end[rows]
    keep = np.concatenate([[True], ends[1:] > ends[:-1]])  # nested duplicates share an end
    ends = np.unique(ends[keep])
    return [str(i) for i in range(1, len(ends))], ends[:-1], ends[1:]


def _phase_steps(trace: Trace) -> tuple[list[str], np.ndarray, np.ndarray] | None:
    """Steps from `## forward ##`-style annotations: each begins where the first phase name recurs."""
    rows = np.flatnonzero(_host_ranges(trace) & trace.names_where(lambda s: PHASE_ANNOTATION.match(s) is not None))
    if len(rows) < 2:
        return None
    first_name = trace.events.name[rows[0]]
    starts = trace.events.start[rows[trace.events.name[rows] == first_name]]
    if len(starts) < 2:
        return None
    last_end = int(trace.events.end[rows].max())
    ends = np.append(starts[1:], last_end)
    return [str(i) for i in range(len(starts))], starts, ends


def _named_range_steps(trace: Trace, name: str | None) -> tuple[list[str], np.ndarray, np.ndarray, str] | None:
    """Steps from a range the user names, or a top-level range name repeated on the busiest thread."""
    ev = trace.events
    annotations = np.flatnonzero(ev.kind == Kind.USER_ANNOTATION)
    if len(annotations) == 0:
        return None
    if name is None:
        # stepscope's own source-line and module ranges repeat too, but they are never steps.
        own = trace.names_where(lambda s: s.startswith(OWN_ANNOTATION_PREFIX))
        annotations = annotations[~own[annotations]]
        if len(annotations) == 0:
            return None
        name = _repeated_top_level_name(trace, annotations)
        if name is None:
            return None
    name_ids = [i for i, s in enumerate(trace.strings) if s == name]
    rows = annotations[np.isin(ev.name[annotations], name_ids)]
    if len(rows) == 0:
        return None
    return [str(i) for i in range(len(rows))], ev.start[rows], ev.end[rows], name


def _repeated_top_level_name(trace: Trace, annotations: np.ndarray) -> str | None:
    ev = trace.events
    threads = Counter(zip(ev.pid[annotations].tolist(), ev.tid[annotations].tolist(), strict=True))
    (pid, tid), _ = threads.most_common(1)[0]
    rows = annotations[(ev.pid[annotations] == pid) & (ev.tid[annotations] == tid)]
    # Top level: not inside an earlier range of the same thread (rows are sorted by start).
    running_end = np.maximum.accumulate(ev.end[rows])
    top = rows[np.concatenate([[True], ev.start[rows][1:] >= running_end[:-1]])]
    counts = Counter(ev.name[top].tolist())
    name_id, count = max(counts.items(), key=lambda kv: (kv[1], -kv[0]))
    return trace.strings[name_id] if count >= MIN_REPEATS_FOR_STEP_RANGE else None


def _gpu_span(trace: Trace) -> tuple[np.ndarray, np.ndarray] | None:
    """From the first launch of GPU work (the runtime call, else the activity itself) to the last GPU end."""
    ev = trace.events
    gpu = np.flatnonzero(trace.is_gpu_activity)
    if len(gpu) == 0:
        return None
    launcher = launching_call(trace)[gpu]
    starts = np.where(launcher >= 0, ev.start[np.maximum(launcher, 0)], ev.start[gpu])
    return np.array([starts.min()], dtype=np.int64), np.array([ev.end[gpu].max()], dtype=np.int64)


def find_steps(trace: Trace, step_range: str | None = None) -> Steps:
    """The steps of a trace, per DESIGN.md's definition; ranges no step can be are left out, with the reason. Found
    once per trace and range (the analyses and each what-if's baseline ask again); the arrays are read-only."""
    return trace.derived(("find_steps", step_range), lambda: _read_only(_find_steps(trace, step_range)))


def _read_only(steps: Steps) -> Steps:
    for array in (steps.start, steps.end, steps.cpu_start, steps.cpu_end, steps.gpu_activity_count):
        array.setflags(write=False)
    return steps


def _find_steps(trace: Trace, step_range: str | None) -> Steps:
    if step_range is not None:
        named = _named_range_steps(trace, step_range)
        if named is None:
            raise StepscopeError(f"{trace.meta.path}: no range named {step_range!r} to take as the step")
        candidates = iter([(*named[:3], f"range {step_range}", [])])
    else:
        candidates = _candidates(trace)
    notes: list[str] = []
    for ids, cpu_start, cpu_end, source, found_notes in candidates:
        if not len(ids):
            continue
        order = np.argsort(cpu_start, kind="stable")
        ids = [ids[i] for i in order]
        cpu_start = np.asarray(cpu_start, dtype=np.int64)[order]
        cpu_end = np.asarray(cpu_end, dtype=np.int64)[order]
        keep = _valid_ranges(ids, cpu_start, cpu_end, notes)
        notes += found_notes
        if keep.any():
            ids = [i for i, k in zip(ids, keep, strict=True) if k]
            cpu_end = _cut_overlaps(ids, cpu_start[keep], cpu_end[keep], notes)
            return _stretch_to_gpu(trace, ids, cpu_start[keep], cpu_end, source, notes)
        notes.append(f"no step from {source}: every range has zero length or lies inside another")
    if (span := _gpu_span(trace)) is not None:
        return _stretch_to_gpu(trace, ["all"], *span, GPU_SPAN, notes)
    ev = trace.events
    start = np.array([ev.start.min() if len(ev) else 0], dtype=np.int64)
    end = np.array([ev.end.max() if len(ev) else 0], dtype=np.int64)
    return _stretch_to_gpu(trace, ["all"], start, end, "whole trace", notes)


def _candidates(trace: Trace) -> Iterator[tuple[list[str], np.ndarray, np.ndarray, str, list[str]]]:
    """Step ranges from each source in order of preference, lazily: the first that holds a step wins."""
    ev = trace.events
    if (found := _profiler_steps(trace)) is not None:
        ids, rows, notes = found
        yield ids, ev.start[rows], ev.end[rows], "ProfilerStep", notes
    if (opt := _optimizer_steps(trace)) is not None:
        yield *opt, "optimizer step", []
    if (phases := _phase_steps(trace)) is not None:
        yield *phases, "## annotations ##", []
    if (named := _named_range_steps(trace, None)) is not None:
        ids, cpu_start, cpu_end, name = named
        yield ids, cpu_start, cpu_end, f"range {name}", []


def _valid_ranges(ids: list[str], start: np.ndarray, end: np.ndarray, notes: list[str]) -> np.ndarray:
    """Mask of the ranges (sorted by start) that can be steps: not zero-length, not inside an earlier one."""
    keep = end > start
    for i in np.flatnonzero(~keep)[:MAX_LISTED].tolist():
        notes.append(f"step {ids[i]}: zero length: left out")
    if (~keep).sum() > MAX_LISTED:
        notes.append(f"... and {int((~keep).sum()) - MAX_LISTED} more steps of zero length")
    reach = np.maximum.accumulate(np.where(keep, end, np.iinfo(np.int64).min))
    nested = keep[1:] & (end[1:] <= reach[:-1])
    for i in (np.flatnonzero(nested)[:MAX_LISTED] + 1).tolist():
        notes.append(f"step {ids[i]}: lies inside another step's range: left out")
    keep[1:] &= ~nested
    return keep


def _cut_overlaps(ids: list[str], start: np.ndarray, end: np.ndarray, notes: list[str]) -> np.ndarray:
    """The ends, each cut to where the next range (sorted by start) begins: a step's range that runs into the next
    one's was closed late (one step's host work cannot run inside another's), and left whole it would take the next
    step's work as its own and leave the next step short."""
    over = np.flatnonzero(end[:-1] > start[1:])
    if not len(over):
        return end
    worst = int((end[:-1] - start[1:])[over].max())
    listed = ", ".join(ids[i] for i in over[:MAX_LISTED].tolist())
    more = f" and {len(over) - MAX_LISTED} more" if len(over) > MAX_LISTED else ""
    notes.append(f"the ranges of steps {listed}{more} run into the next step's range (by up to {worst / 1e6:.3g} ms): "
                 "each is taken to end where the next begins")
    end = end.copy()
    end[over] = start[over + 1]
    return end


def _stretch_to_gpu(trace: Trace, ids: list[str], cpu_start: np.ndarray, cpu_end: np.ndarray, source: str,
                    notes: list[str]) -> Steps:
    """Move each end to the end of the GPU work launched inside the step; drop cut-off trailing steps.

    Matches the TensorBoard plugin: a launch counts for a step when the runtime call lies wholly inside the
    step's host range, and the first step starts no earlier than the end of GPU work launched before it.
    """
    ev = trace.events
    n = len(ids)
    launcher = launching_call(trace)
    gpu_rows = np.flatnonzero(launcher >= 0)
    launch_start, launch_end = ev.start[launcher[gpu_rows]], ev.end[launcher[gpu_rows]]
    step_of = np.searchsorted(cpu_start, launch_start, side="right") - 1
    valid = step_of >= 0
    valid[valid] &= launch_end[valid] <= cpu_end[step_of[valid]]
    gpu_end = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    gpu_first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.maximum.at(gpu_end, step_of[valid], ev.end[gpu_rows[valid]])
    np.minimum.at(gpu_first, step_of[valid], ev.start[gpu_rows[valid]])
    counts = np.bincount(step_of[valid], minlength=n).astype(np.int64)

    end = np.maximum(cpu_end, gpu_end)
    start = cpu_start.copy()
    if n and counts.any():
        # Earlier GPU work: launched outside every step, or before the recording began (its correlation id names
        # no recorded call), or, for work with no correlation id (its launch unknown), already running when the
        # first step's host range began, so not launched in it.
        unlinked = trace.is_gpu_activity & (launcher < 0)
        no_id = np.flatnonzero(unlinked & (ev.correlation < 0))
        unmatched_rows = np.concatenate([gpu_rows[~valid], np.flatnonzero(unlinked & (ev.correlation >= 0)),
                                         no_id[ev.start[no_id] < cpu_start[0]]])
        start[0] = max(start[0], _end_of_earlier_gpu_work(trace, unmatched_rows, gpu_first[0], start[0]))
    for i in range(n):  # back to back: a step starts no earlier than the previous (moved) end
        if i:
            start[i] = max(start[i], end[i - 1])
        end[i] = max(end[i], start[i])

    keep = np.ones(n, dtype=bool)
    dropped: list[str] = []
    if trace.has_device_events and counts.any() and n > 1:
        last = n - 1
        while last >= 0 and counts[last] == 0:  # trailing steps that launched no GPU work
            keep[last] = False
            dropped.append(f"step {ids[last]}: launched no GPU work")
            last -= 1
        if last >= 1 and counts[last] < TRUNCATED_STEP_RATIO * counts[last - 1]:
            keep[last] = False
            dropped.append(
                f"step {ids[last]}: {counts[last]} GPU activities vs {counts[last - 1]} in the step before "
                "(cut off by the end of profiling)"
            )
    kept = np.flatnonzero(keep)
    if len(kept) > 1 and (cut := _collective_cut_by_the_end(trace, start[kept[-1]], end[kept[-1]])):
        keep[kept[-1]] = False
        dropped.insert(0, f"step {ids[kept[-1]]}: its {cut} runs to the end of the trace (cut off by the end of "
                          "profiling: the step's wait in it is not its own)")
    return Steps(
        ids=tuple(i for i, k in zip(ids, keep, strict=True) if k),
        start=start[keep], end=end[keep], cpu_start=cpu_start[keep], cpu_end=cpu_end[keep],
        gpu_activity_count=counts[keep], source=source, dropped=(*notes, *reversed(dropped)),
    )


def _collective_cut_by_the_end(trace: Trace, start: int, end: int) -> str | None:
    """The name of a collective range in [start, end) that ends where the trace ends: the profiler stopped while it
    ran (a rank waiting for peers that had stopped profiling), so its length says nothing of this rank."""
    ev = trace.events
    if not len(ev):
        return None
    host = ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON)
    rows = np.flatnonzero(host & trace.names_where(lambda s: COLLECTIVE_OP.match(s) is not None)
                          & (ev.end >= ev.end.max() - CUT_TOLERANCE_NS) & (ev.start < end) & (ev.end > start))
    return trace.name_of(int(rows[0])) if len(rows) else None


def _end_of_earlier_gpu_work(trace: Trace, unmatched_rows: np.ndarray, first_gpu_start: int, default: int) -> int:
    """The latest end, before the first step's own GPU work, of GPU work not launched inside any step."""
    ends = trace.events.end[unmatched_rows]
    earlier = ends[ends < first_gpu_start] if first_gpu_start != np.iinfo(np.int64).max else ends[:0]
    return int(earlier.max()) if len(earlier) else default
