"""Work on a forked copy (stepscope.forked): a big trace read by two processes (trace/kineto/halves.py) is the trace
one process reads, wherever the split falls, and this process reads on by itself when the copy fails or starts
somewhere else; the advice rules that replay the step find on a copy what they find here; forking only where the
caller allowed it."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from builder import TraceBuilder
from conftest import kineto_trace
from stepscope import forked
from stepscope.advice import rules
from stepscope.advice.context import Context
from stepscope.advice.patterns import classify
from stepscope.analysis.facts import compute_facts
from stepscope.trace import files
from stepscope.trace.kineto import halves, reader, stream
from stepscope.trace.kineto.columns import ColumnBuilder
from stepscope.trace.load import read_trace
from test_streaming import same_trace, tricky_doc

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the copy is forked on Linux only")


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many batches, many cuts tried against the tricky text: the text arrives in small pieces."""
    monkeypatch.setattr(stream, "BATCH_BYTES", 1500)
    monkeypatch.setattr(files, "_OUT_CHUNK", 1024)


@pytest.fixture
def may_fork(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(forked, "_idle_core", lambda: True)  # whatever else the machine runs meanwhile
    with forked.allowing():
        yield


@pytest.fixture
def merges(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many events each merge took in from the copy (none: this process read everything itself)."""
    taken: list[int] = []
    merge = ColumnBuilder.merge

    def counted(self: ColumnBuilder, later: ColumnBuilder) -> None:
        taken.append(later.columns["kind"]._size if "kind" in later.columns else 0)
        merge(self, later)

    monkeypatch.setattr(ColumnBuilder, "merge", counted)
    return taken


def varied_doc() -> dict:
    """Names, recorded inputs, allocator samples, an unknown category and thread names that first appear on
    either side of any split, some of them seen again on the other side."""
    b = TraceBuilder()
    for i in range(80):
        t = i * 100.0
        b.step(i, t, t + 90)
        b.op(f"aten::op_{i % 7 if i < 40 else i}", t + 1, t + 50,
             **{"Input Dims": [[i % 3, 4]], "Input type": ["float"], "Concrete Inputs": [""]})
        b.launch("kernel }, {\"x\": 1}" if i % 2 else f"kernel_{i // 10}", (t + 2, t + 6), (t + 10, t + 40))
        b.span(f"mystery_{(i >= 40) + (i >= 65)}", "odd", t + 51, t + 52)  # 40, 25 and 15: the note's order
        b.memory_sample(t + 3, 1000 + i, 2000 + i)
    doc = b.to_dict()
    doc["traceEvents"] += [{"ph": "M", "name": "thread_name", "pid": 1000, "tid": 1000, "args": {"name": "main"}},
                           {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}]
    return doc


def written(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


@pytest.mark.parametrize("doc", [tricky_doc, varied_doc])
@pytest.mark.parametrize("first", [1, 2, 5])
def test_two_processes_read_the_trace_one_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_batches: None,
                                                may_fork: None, merges: list[int], doc, first: int) -> None:
    monkeypatch.setattr(halves, "split_point", lambda path: first)
    path = written(tmp_path, doc())
    same_trace(reader._read_streaming(path, None), reader._read_whole(path))
    assert len(merges) == 1 and merges[0] > 0


def test_a_trace_shorter_than_the_split_is_read_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     small_batches: None, may_fork: None, merges: list[int]) -> None:
    monkeypatch.setattr(halves, "split_point", lambda path: 10_000)
    path = written(tmp_path, varied_doc())
    same_trace(reader._read_streaming(path, None), reader._read_whole(path))
    assert merges == []


@pytest.mark.parametrize("copy", ["fails", "starts elsewhere"])
def test_this_process_reads_on_when_the_copy_cannot_help(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         small_batches: None, may_fork: None, merges: list[int],
                                                         copy: str) -> None:
    monkeypatch.setattr(halves, "split_point", lambda path: 3)
    later_batches = halves.later_batches

    def broken(path: Path, first: int, decoder) -> halves.Later | None:
        if copy == "fails":
            raise MemoryError("the copy ran out")
        later = later_batches(path, first, decoder)
        return halves.Later(later.start + 1, later.outline, later.builder) if later else None

    monkeypatch.setattr(halves, "later_batches", broken)  # the copy is forked from here: it runs the broken one
    path = written(tmp_path, varied_doc())
    same_trace(reader._read_streaming(path, None), reader._read_whole(path))
    assert merges == []


def test_the_split_falls_near_the_middle_of_big_traces_only(tmp_path: Path) -> None:
    small, big = tmp_path / "small.json", tmp_path / "big.json.gz"
    small.write_bytes(b" " * (halves.MIN_BATCHES * stream.BATCH_BYTES - 1))
    big.write_bytes(gzip.compress(b" " * (7 * stream.BATCH_BYTES)))  # its trailer says 7 batches of text
    assert halves.split_point(small) is None
    assert halves.split_point(big) == 3


def test_forking_only_where_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked, "_idle_core", lambda: True)
    assert forked.start(lambda: 1) is None
    with forked.allowing():
        copy = forked.start(lambda: {"sum": sum(range(10))})
        assert copy is not None and copy.result() == {"sum": 45}
        copy.cancel()  # once its result is taken: nothing to stop
        failing = forked.start(lambda: 1 / 0)
        assert failing is not None and failing.result() is None
        endless = forked.start(lambda: [None for _ in iter(int, 1)])
        assert endless is not None
        endless.cancel()
    monkeypatch.setattr(forked, "_idle_core", lambda: False)
    with forked.allowing():
        assert forked.start(lambda: 1) is None  # no idle core: the work stays here


def test_the_replaying_rules_on_a_copy_find_what_they_find_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """advice/rules: the rules that replay the step run on a forked copy, the others here; the findings are the
    same, in the same order, as when they all run here, and where the copy fails they run here."""
    facts = compute_facts(read_trace(kineto_trace("a100_convnet_ddp_rank0.json.gz")))
    ctx = Context(facts)
    patterns = classify(facts, ctx)
    alone = rules.recommend(facts, patterns, ctx)
    monkeypatch.setattr(forked, "_idle_core", lambda: True)
    monkeypatch.setattr(rules, "FORK_MIN_EVENTS", 0)
    started = []
    start = forked.start
    monkeypatch.setattr(forked, "start", lambda work: started.append(1) or start(work))
    with forked.allowing():
        assert rules.recommend(facts, patterns, Context(facts)) == alone
        monkeypatch.setattr(rules, "FORKED_RULES", (*rules.FORKED_RULES, lambda ctx, patterns: 1 / 0))
        with pytest.raises(ZeroDivisionError):  # failed on the copy, then run here: the error is met here
            rules.recommend(facts, patterns, Context(facts))
    assert started == [1, 1]
