"""Cross-rank figures on hand-built NCCL-style ranks with hand-computed answers (µs).

Two ranks, one step [0, 1000]. Each collective is issued early on the host (c10d::allreduce_ > record_param_comms
> nccl:all_reduce > cudaLaunchKernel) and runs as a kernel on stream 20:

    rank 0: seq 2 kernel [300, 500], seq 3 kernel [600, 800]; compute kernels [100, 290], [450, 520], [550, 580];
            a CPU op [510, 590]
    rank 1: seq 1 kernel [50, 90] (rank 0's profile missed it), seq 2 [200, 500], seq 3 [750, 800];
            a CPU op [510, 740]

Matched by (group, Seq): seq 2 and seq 3 (order alone would pair rank 0's seq 2 with rank 1's seq 1).
seq 2: rank 0 arrives last, skew 100; rank 1 waits 300 - 200 = 100.
seq 3: rank 1 arrives last, skew 150; rank 0 waits 200 - 50 = 150.
Ends coincide, so the clock offsets are 0. Rank 1 caused 150 of waiting, rank 0 100: rank 1 is the straggler
(150 per step > 5% of the 1000 µs step). Its lead-in to seq 3 is [500, 750): CPU op 230, nothing else 20; rank 0's
to the same collective is [500, 600): kernels [500, 520] + [550, 580] = 50, the CPU op less those = 40, other 10.
Rank 0's communication [300, 500] + [600, 800] = 400, of which [450, 500] overlaps compute: exposed 350.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from builder import TraceBuilder
from stepscope import analyze
from stepscope.ranks.reduce import cross_rank
from stepscope.ranks.summarize import summarize_file
from stepscope.trace.kineto import read_kineto

NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _collective(b: TraceBuilder, issue: float, run: tuple[float, float], seq: int | None) -> None:
    args = {"Collective name": "allreduce", "Process Group Name": "0", "In msg nelems": 1024, "dtype": "Float",
            "Group size": 2}
    if seq is not None:
        args["Seq"] = seq
    b.op("c10d::allreduce_", issue, issue + 8)
    b.op("record_param_comms", issue + 1, issue + 7, **args)
    b.annotation("nccl:all_reduce", issue + 2, issue + 6)
    b.launch(NCCL_KERNEL, (issue + 3, issue + 5), run, stream=20)


def _rank(rank: int, with_seq: bool = True) -> TraceBuilder:
    b = TraceBuilder(rank=rank)
    b.step(1, 0, 1000)
    if rank == 0:
        runs = {2: (300, 500), 3: (600, 800)}
        for i, (start, end) in enumerate([(100, 290), (450, 520), (550, 580)]):
            b.launch(f"gemm_{i}", (60 + 10 * i, 65 + 10 * i), (start, end))
        b.op("aten::mul", 510, 590)
    else:
        runs = {1: (50, 90), 2: (200, 500), 3: (750, 800)}
        b.op("aten::mul", 510, 740)
    for i, (seq, run) in enumerate(runs.items()):
        _collective(b, 10 + 12 * i, run, seq if with_seq else None)
    return b


@pytest.fixture
def two_ranks(tmp_path: Path) -> list[Path]:
    return [_rank(r).write(tmp_path / f"rank{r}.json") for r in (0, 1)]


def test_collectives_match_by_seq_and_give_hand_computed_skew_and_waits(two_ranks: list[Path]) -> None:
    a = cross_rank([summarize_file(p) for p in two_ranks])
    al = a.alignment
    assert al.keys == ("seq|0|2", "seq|0|3")
    assert al.offset.tolist() == [0, 0]
    assert (al.skew / 1000).tolist() == [100, 150]
    assert al.last.tolist() == [0, 1]
    assert (al.wait / 1000).tolist() == [[0, 150], [100, 0]]
    assert a.waits.arrived_last.tolist() == [1, 1] and a.waits.collectives.tolist() == [2, 2]
    assert (a.waits.wait_caused / 1000).tolist() == [100, 150]
    assert a.straggler is not None and a.straggler.index == 1 and a.straggler.median == 0
    cause = a.straggler.cause
    assert cause is not None and cause.category == "cpu_exec"
    assert cause.straggler_lead_in["cpu_exec"] == 230_000 and cause.straggler_lead_in["other"] == 20_000
    assert cause.median_lead_in["kernel"] == 50_000 and cause.median_lead_in["cpu_exec"] == 40_000
    assert cause.median_lead_in["other"] == 10_000


def test_message_size_and_group_come_from_record_param_comms(two_ranks: list[Path]) -> None:
    c = summarize_file(two_ranks[1]).collectives
    assert c.groups == ("0", "0", "0") and c.seq.tolist() == [1, 2, 3]
    assert c.bytes.tolist() == [1024 * 4] * 3  # In msg nelems x sizeof(Float)
    assert c.names == ("allreduce",) * 3 and c.on_device


def test_without_seq_the_order_in_the_step_is_the_key(tmp_path: Path) -> None:
    paths = [_rank(r, with_seq=False).write(tmp_path / f"r{r}.json") for r in (0, 1)]
    a = cross_rank([summarize_file(p) for p in paths])
    assert a.alignment.keys == ("order|1|0|allreduce|0", "order|1|0|allreduce|1")
    # Rank 0's first collective (seq 2, [300, 500]) now meets rank 1's first (seq 1, [50, 90]): the profile's
    # missing collective shifts the pairing, which is why Seq is preferred when the trace has it.
    assert (a.alignment.duration[:, 0] / 1000).tolist() == [200, 40]


def test_exposed_communication_and_overlap(two_ranks: list[Path]) -> None:
    s = summarize_file(two_ranks[0])
    assert s.communication.tolist() == [400_000]
    assert s.exposed_communication.tolist() == [350_000]
    report = analyze([read_kineto(p) for p in two_ranks])
    row = report.ranks[0]
    assert row.exposed_communication_us == 350.0 and row.overlap_ratio == 0.125


def test_report_heads_with_the_straggler_and_diagnoses_the_median(two_ranks: list[Path]) -> None:
    report = analyze([read_kineto(p) for p in two_ranks])
    cr = report.cross_rank
    assert cr is not None and report.rank == 1
    assert cr.straggler is not None and cr.straggler.rank == 1 and cr.straggler.median_rank == 0
    assert cr.straggler.cause is not None and cr.straggler.cause.ratio == round(230 / 40, 2)
    assert cr.straggler.wait_caused_per_rank_us == 150.0
    assert [d.role for d in cr.diagnoses] == ["straggler", "median"]
    assert [d.rank for d in cr.diagnoses] == [1, 0]
    assert cr.matched_by == "seq" and cr.collectives == 2
    assert cr.arrival_skew_us == {"mean": 125.0, "p50": 125.0, "p90": 145.0, "max": 150.0}
    assert [(c.arrival_skew_us, c.last_rank, c.seq, c.bytes) for c in cr.top_collectives] == [
        (150.0, 1, 3, 4096), (100.0, 0, 2, 4096)]
    assert [r.step_wait_us for r in report.ranks] == [[150.0], [100.0]]
