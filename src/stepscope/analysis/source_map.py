"""The source map: which user line and module each piece of host time and each GPU activity belongs to.

Time is charged to anchors, pieces of host time that do not overlap except by nesting:
- an op is an anchor when it is the outermost op inside its innermost line range (so a custom autograd
  Function is one anchor at the line that applied it, and the ops its forward runs are anchors at their
  own lines, charged separately: an anchor's exclusive time leaves out the anchors nested in it);
- a DataLoader `__next__`, an optimizer step or a `zero_grad` is one anchor, charged whole to the line
  that called it;
- a backward autograd node is an anchor charged to the line and module of the forward op that created
  it, found through the (sequence number, forward thread) pair the profiler records on both; when no
  forward op is found the node stays unlinked and is reported as such.
Every host row is charged to the innermost anchor around it, and a GPU activity to the anchor of the
runtime call that launched it. Lines and modules come from stepscope's own annotations when the trace
has them, else from the profiler's Python stacks (`with_stack`), at function granularity.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stepscope.analysis import nesting
from stepscope.analysis.categories import DATALOADER
from stepscope.analysis.launches import launching_call
from stepscope.analysis.steps import PROFILER_STEP
from stepscope.model.kinds import Location
from stepscope.trace.model import Kind, Trace, distinct
from stepscope.trace.source_annotations import (
    LINE_PREFIX,
    MODULE_PREFIX,
    parse_line_annotation,
    parse_module_annotation,
)

FORWARD, BACKWARD, BACKWARD_UNLINKED = 0, 1, 2
BACKWARD_NODE_PREFIX = "autograd::engine::evaluate_function: "
UNIT = re.compile(DATALOADER.pattern + r"|^Optimizer\.(step|zero_grad)#")
# A Python frame as the profiler names it (with_stack=True): "path/train.py(42): train_step".
FRAME = re.compile(r"^(?P<file>[^<].*?)\((?P<line>\d+)\): (?P<function>.+)$")
LIBRARY_FILE = re.compile(r"site-packages|dist-packages|/lib/python\d|(^|/)torch/|(^|/)stepscope/|^<")
PY_MODULE_PREFIX = "nn.Module: "


@dataclass(frozen=True)
class SourceLine:
    """A line of the user's code; `line` is a function's first line at function granularity."""

    file: str
    line: int
    function: str = ""
    code: str = ""

    @property
    def label(self) -> str:
        return f"{self.file}:{self.line}"

    def location(self) -> Location:
        return Location(file=self.file, line=self.line, function=self.function, code=self.code)


@dataclass(frozen=True, eq=False)
class SourceMap:
    """The user's lines and modules the trace's ranges name, and each range's exclusive time."""

    source: str  # "stepscope annotations" | "python stacks"
    granularity: str  # "line" | "function"
    lines: tuple[SourceLine, ...]
    modules: tuple[str, ...]
    anchors: np.ndarray  # event rows, ascending
    exclusive: np.ndarray  # per anchor: ns not inside a nested anchor
    line: np.ndarray  # per anchor: index into lines, or -1
    module: np.ndarray  # per anchor: index into modules, or -1
    direction: np.ndarray  # per anchor: FORWARD, BACKWARD or BACKWARD_UNLINKED
    row_anchor: np.ndarray  # per event row: index into anchors, or -1 (GPU rows: through their launch)
    module_rows: np.ndarray  # rows of the module ranges (one per module call)
    module_of_row: np.ndarray  # per module range row: index into modules


@dataclass
class _Sources:
    """The line and module ranges of a trace: name id -> index into lines / modules (-1 elsewhere)."""

    source: str
    granularity: str
    lines: list[SourceLine]
    line_of_name: np.ndarray
    modules: list[str]
    module_of_name: np.ndarray  # stepscope annotations: the path; python stacks: the one-level name
    chained: bool  # python stacks: a module's path is the chain of the nn.Module frames around it


def _sources(trace: Trace) -> _Sources | None:
    strings = trace.strings
    own_lines = [i for i, s in enumerate(strings) if s.startswith(LINE_PREFIX)]
    own_modules = [i for i, s in enumerate(strings) if s.startswith(MODULE_PREFIX)]
    line_of_name = np.full(len(strings), -1, dtype=np.int64)
    module_of_name = np.full(len(strings), -1, dtype=np.int64)
    lines: dict[SourceLine, int] = {}
    modules: dict[str, int] = {}
    if own_lines:
        source, granularity, chained = "stepscope annotations", "line", False
        for i in own_lines:
            parsed = parse_line_annotation(strings[i])
            if parsed is not None:
                line_of_name[i] = lines.setdefault(SourceLine(*parsed), len(lines))
    else:
        python_names = set(distinct(trace.events.name[trace.events.kind == Kind.PYTHON]).tolist())
        source, granularity = "python stacks", "function"
        for i in python_names:
            match = FRAME.match(strings[i])
            if match and not LIBRARY_FILE.search(match["file"]):
                key = SourceLine(match["file"], int(match["line"]), match["function"])
                line_of_name[i] = lines.setdefault(key, len(lines))
        own_modules = [] if own_modules else [i for i in python_names if strings[i].startswith(PY_MODULE_PREFIX)]
        chained = bool(own_modules)
        for i in own_modules:
            modules_name = strings[i][len(PY_MODULE_PREFIX):]
            module_of_name[i] = modules.setdefault(modules_name, len(modules))
    if not lines:
        return None
    if not chained:
        for i in own_modules:
            path = parse_module_annotation(strings[i])
            if path is not None:
                module_of_name[i] = modules.setdefault(path, len(modules))
    return _Sources(source, granularity, list(lines), line_of_name, list(modules), module_of_name, chained)


def source_map(trace: Trace) -> SourceMap | None:
    """The source map of a trace (once per trace); None when it carries neither stepscope annotations nor
    Python stacks."""
    return trace.derived("source_map", lambda: _source_map(trace))


def _source_map(trace: Trace) -> SourceMap | None:
    sources = _sources(trace)
    if sources is None:
        return None
    ev = trace.events
    host = np.flatnonzero((ev.device < 0) & ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON, Kind.RUNTIME))
    is_unit = _name_table(trace, lambda s: UNIT.match(s) is not None)
    is_step = _name_table(trace, lambda s: PROFILER_STEP.match(s) is not None)
    builder = _Builder(trace, sources)
    for positions in nesting.thread_groups(ev.pid[host], ev.tid[host]):
        builder.thread(host[positions], is_unit, is_step)
    return builder.finish()


def _take(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """values[index] where index >= 0, else -1 (also when `values` is empty)."""
    if len(values) == 0:
        return np.full(len(index), -1, dtype=np.int64)
    return np.where(index >= 0, values[np.maximum(index, 0)], -1)


def _name_table(trace: Trace, predicate: Callable[[str], bool]) -> np.ndarray:
    """Per string id: whether the name satisfies `predicate`."""
    return np.fromiter((predicate(s) for s in trace.strings), dtype=bool, count=len(trace.strings))


class _Builder:
    """Collects anchors thread by thread, then links backward nodes to forward ops."""

    def __init__(self, trace: Trace, sources: _Sources) -> None:
        self.trace, self.sources = trace, sources
        self.row_anchor_row = np.full(len(trace.events), -1, dtype=np.int64)  # row of the anchor, for now
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in ("anchors", "exclusive", "line", "module")}
        self.module_rows: list[np.ndarray] = []
        self.module_of_row: list[np.ndarray] = []
        self.modules = [] if sources.chained else list(sources.modules)
        self.chains: dict[tuple[int, ...], int] = {}

    def thread(self, rows: np.ndarray, is_unit: np.ndarray, is_step: np.ndarray) -> None:
        ev, src = self.trace.events, self.sources
        start, end, kind, name = ev.start, ev.end, ev.kind, ev.name
        ranges = rows[src.line_of_name[name[rows]] >= 0]
        mods = rows[src.module_of_name[name[rows]] >= 0]
        units = rows[is_unit[name[rows]] & (kind[rows] != Kind.PYTHON)]
        units = units[nesting.parents(start[units], end[units]) < 0]
        # Ops and runtime calls; a runtime call outside any op (torch.cuda.synchronize()) stands on its own.
        plain = (src.line_of_name[name[rows]] < 0) & (src.module_of_name[name[rows]] < 0)
        ops = rows[((kind[rows] == Kind.CPU_OP) | (kind[rows] == Kind.RUNTIME)) & plain & ~is_unit[name[rows]]
                   & ~is_step[name[rows]]]
        range_parent = nesting.parents(start[ranges], end[ranges])
        ops = ops[_outside_units(start, end, units, ranges, range_parent, ops)]
        op_parent = nesting.parents(start[ops], end[ops])
        op_range = nesting.innermost(start[ranges], end[ranges], range_parent, start[ops], end[ops])
        range_row = _take(ranges, op_range)
        parent_row = _take(ops, op_parent)
        top = (op_parent < 0) | (range_row > parent_row)
        op_anchors, op_lines = ops[top], range_row[top]

        unit_range = nesting.innermost(start[ranges], end[ranges], range_parent, start[units], end[units])
        inside = nesting.first_inside(start[ranges], start[units], end[units])
        unit_range = np.where(unit_range >= 0, unit_range, inside)
        unit_lines = _take(ranges, unit_range)

        anchors = np.concatenate([op_anchors, units])
        line_rows = np.concatenate([op_lines, unit_lines])
        order = np.argsort(anchors, kind="stable")
        anchors, line_rows = anchors[order], line_rows[order]
        anchor_parent = nesting.parents(start[anchors], end[anchors])
        exclusive = ev.dur[anchors].copy()
        nested = anchor_parent >= 0
        np.subtract.at(exclusive, anchor_parent[nested], ev.dur[anchors[nested]])

        charged = nesting.innermost(start[anchors], end[anchors], anchor_parent, start[rows], end[rows])
        self.row_anchor_row[rows] = _take(anchors, charged)

        module_index = self._module_index(mods)
        mod_parent = nesting.parents(start[mods], end[mods])
        anchor_mod = nesting.innermost(start[mods], end[mods], mod_parent, start[anchors], end[anchors])
        self.parts["anchors"].append(anchors)
        self.parts["exclusive"].append(np.maximum(exclusive, 0))
        self.parts["line"].append(np.where(line_rows >= 0, src.line_of_name[name[np.maximum(line_rows, 0)]], -1))
        self.parts["module"].append(_take(module_index, anchor_mod))
        self.module_rows.append(mods)
        self.module_of_row.append(module_index)

    def _module_index(self, mods: np.ndarray) -> np.ndarray:
        """Index into modules of each module range; python stacks join the chain of nn.Module frames."""
        index = self.sources.module_of_name[self.trace.events.name[mods]]
        if not self.sources.chained or len(mods) == 0:
            return index
        parent = nesting.parents(self.trace.events.start[mods], self.trace.events.end[mods])
        chains: list[tuple[int, ...]] = []
        result = np.empty(len(mods), dtype=np.int64)
        for i, (own, up) in enumerate(zip(index.tolist(), parent.tolist(), strict=True)):
            chain = (*chains[up], own) if up >= 0 else (own,)
            chains.append(chain)
            if chain not in self.chains:
                self.chains[chain] = len(self.modules)
                self.modules.append(".".join(self.sources.modules[j] for j in chain))
            result[i] = self.chains[chain]
        return result

    def finish(self) -> SourceMap:
        ev = self.trace.events
        cat = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in self.parts.items()}
        order = np.argsort(cat["anchors"], kind="stable")
        anchors = cat["anchors"][order]
        line, module = cat["line"][order], cat["module"][order]
        index_of_row = np.full(len(ev), -1, dtype=np.int64)
        index_of_row[anchors] = np.arange(len(anchors))
        row_anchor = _take(index_of_row, self.row_anchor_row)
        row_anchor = _through_launches(self.trace, row_anchor)
        direction = _link_backward(self.trace, anchors, row_anchor, line, module)
        return SourceMap(
            source=self.sources.source, granularity=self.sources.granularity,
            lines=tuple(self.sources.lines), modules=tuple(self.modules),
            anchors=anchors, exclusive=cat["exclusive"][order], line=line, module=module, direction=direction,
            row_anchor=row_anchor,
            module_rows=np.concatenate(self.module_rows) if self.module_rows else np.zeros(0, np.int64),
            module_of_row=np.concatenate(self.module_of_row) if self.module_of_row else np.zeros(0, np.int64),
        )


def _outside_units(start: np.ndarray, end: np.ndarray, units: np.ndarray, ranges: np.ndarray,
                   range_parent: np.ndarray, ops: np.ndarray) -> np.ndarray:
    """Mask of the ops that are anchors of their own: outside any unit, or inside a line range that is itself
    inside the unit (`optimizer.step(closure)`: the closure's forward and backward keep their own lines; only
    the update is the step's)."""
    unit = nesting.innermost(start[units], end[units], np.full(len(units), -1), start[ops], end[ops])
    inner = nesting.innermost(start[ranges], end[ranges], range_parent, start[ops], end[ops])
    unit_row, range_row = _take(units, unit), _take(ranges, inner)
    has = (unit >= 0) & (range_row >= 0)
    nested = np.zeros(len(ops), dtype=bool)
    nested[has] = (start[range_row[has]] >= start[unit_row[has]]) & (end[range_row[has]] <= end[unit_row[has]])
    return (unit < 0) | nested


def _through_launches(trace: Trace, row_anchor: np.ndarray) -> np.ndarray:
    """GPU activities take the anchor of the runtime call that launched them."""
    launcher = launching_call(trace)
    gpu = np.flatnonzero(launcher >= 0)
    out = row_anchor.copy()
    out[gpu] = row_anchor[launcher[gpu]]
    return out


def _link_backward(trace: Trace, anchors: np.ndarray, row_anchor: np.ndarray, line: np.ndarray,
                   module: np.ndarray) -> np.ndarray:
    """Backward nodes take the line and module of their forward op (updated in place); their direction."""
    ev = trace.events
    direction = np.full(len(anchors), FORWARD, dtype=np.int8)
    is_node = trace.names_where(lambda s: s.startswith(BACKWARD_NODE_PREFIX))[anchors]
    if not is_node.any():
        return direction
    direction[is_node] = BACKWARD_UNLINKED
    line[is_node] = module[is_node] = -1
    nodes = np.flatnonzero(is_node & (ev.sequence[anchors] >= 0))
    # Forward ops: ops with a sequence number charged to a forward anchor.
    candidates = np.flatnonzero((ev.kind == Kind.CPU_OP) & (ev.sequence >= 0) & (row_anchor >= 0))
    candidates = candidates[~is_node[row_anchor[candidates]]]
    if len(nodes) == 0 or len(candidates) == 0:
        return direction
    thread = nesting.thread_numbers(ev.pid[candidates], ev.tid[candidates])
    fwd_thread_of = _forward_threads(thread, ev.sequence[candidates], ev.fwd_tid[anchors[nodes]],
                                     ev.sequence[anchors[nodes]])
    # The op that created node (seq, thread) is the last forward op with that sequence number on that thread.
    order = np.lexsort((ev.start[candidates], ev.sequence[candidates], thread))
    key = thread[order].astype(np.int64) * (1 << 40) + ev.sequence[candidates][order]
    last = np.append(key[1:] != key[:-1], True)
    keys, creators = key[last], candidates[order][last]
    node_thread = np.array([fwd_thread_of.get(int(t), -1) for t in ev.fwd_tid[anchors[nodes]]], dtype=np.int64)
    wanted = node_thread * (1 << 40) + ev.sequence[anchors[nodes]]
    pos = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    found = (node_thread >= 0) & (keys[pos] == wanted)
    forward_anchor = row_anchor[creators[pos[found]]]
    linked = nodes[found]
    line[linked] = line[forward_anchor]
    module[linked] = module[forward_anchor]
    direction[linked] = BACKWARD
    unlinked = direction == BACKWARD_UNLINKED
    line[unlinked] = module[unlinked] = -1  # not spread around: reported as unlinked
    return direction


def _forward_threads(thread: np.ndarray, sequence: np.ndarray, node_fwd_tid: np.ndarray,
                     node_sequence: np.ndarray) -> dict[int, int]:
    """The profiler's forward thread id (on backward nodes) -> the thread whose forward ops share the most
    sequence numbers with those nodes. The id is the profiler's own small number, not the system tid."""
    mapping: dict[int, int] = {}
    threads = np.unique(thread)
    for fwd_tid in np.unique(node_fwd_tid).tolist():
        seqs = np.unique(node_sequence[node_fwd_tid == fwd_tid])
        hits = [int(np.isin(seqs, sequence[thread == t]).sum()) for t in threads.tolist()]
        if max(hits, default=0) > 0:
            mapping[int(fwd_tid)] = int(threads[int(np.argmax(hits))])
    return mapping
