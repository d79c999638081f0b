"""The cross-rank analysis as report fields: one row per rank, the `cross_rank` section, and the chosen ranks'
full diagnoses (stepscope.report/1; fields only ever added)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import msgspec
import numpy as np

from stepscope.analysis.categories import BREAKDOWN_CATEGORIES as BREAKDOWN
from stepscope.model import report as s
from stepscope.ranks.reduce import CrossRankAnalysis
from stepscope.ranks.stragglers import Straggler
from stepscope.ranks.summary import RankFailure, RankSummary
from stepscope.units import report_us as _us

TOP_COLLECTIVES = 20
CAUSE_LABELS = {
    "kernel": "GPU compute", "memcpy": "memory copies", "memset": "memsets",
    "communication": "other collectives", "runtime": "CUDA runtime calls", "sync": "host-device syncs",
    "dataloader": "DataLoader wait", "cpu_exec": "CPU ops",
    "other": "time outside any recorded op (a sleep, unprofiled Python, the OS)",
}


def _us_or_none(ns: float) -> float | None:
    return None if np.isnan(ns) else _us(ns)


def rank_label(summary: RankSummary, index: int) -> int:
    """The rank's own number, else its position (files without distributedInfo)."""
    return summary.rank if summary.rank is not None else index


def main_index(analysis: CrossRankAnalysis) -> int:
    """The rank whose full report heads the page: the straggler, else the slowest rank."""
    return analysis.straggler.index if analysis.straggler else analysis.slowest


def chosen_paths(a: CrossRankAnalysis) -> list[str]:
    """The files that get the full single-rank diagnosis: the main rank's, then the median rank's."""
    return list(dict.fromkeys([a.summaries[main_index(a)].path, a.summaries[a.median].path]))


def rank_rows(a: CrossRankAnalysis) -> list[s.RankRow]:
    rows = []
    for i, summary in enumerate(a.summaries):
        steps = max(len(summary.step_ids), 1)
        comm, exposed = float(summary.communication.sum()), float(summary.exposed_communication.sum())
        breakdown = summary.breakdown.mean(axis=0) if len(summary.breakdown) else np.zeros(len(BREAKDOWN))
        rows.append(s.RankRow(
            rank=summary.rank, path=summary.path,
            step_time_us=_us(summary.step_time_ns) if summary.step_time_ns is not None else None,
            breakdown_us={c: _us(v) for c, v in zip(BREAKDOWN, breakdown, strict=True)},
            gpu_utilization=round(summary.gpu_utilization, 4) if summary.gpu_utilization is not None else None,
            primary_pattern=summary.patterns[0] if summary.patterns else None,
            collectives=int(a.waits.collectives[i]),
            arrived_last_share=round(float(a.waits.last_share[i]), 4) if a.waits.collectives[i] else None,
            wait_us=_us(a.waits.wait[i] / a.waits.steps[i]),
            wait_caused_us=_us(a.waits.wait_caused[i] / a.waits.steps[i]),
            own_time_us=_us_or_none(a.own_time[i]),
            communication_us=_us(comm / steps), exposed_communication_us=_us(exposed / steps),
            overlap_ratio=round(1 - exposed / comm, 4) if comm > 0 else None,
            clock_offset_us=_us(a.alignment.offset[i]) if len(a.alignment.keys) else None,
            step_times_us=[_us_or_none(v) for v in a.step_times[i]],
            step_wait_us=[_us_or_none(v) for v in a.step_waits[i]],
        ))
    return rows


def cross_rank_section(a: CrossRankAnalysis, diagnoses: list[s.RankDiagnosis],
                       failures: list[RankFailure]) -> s.CrossRank:
    summaries = a.summaries
    means = np.array([x.step_time_ns if x.step_time_ns is not None else np.nan for x in summaries])
    timed = means[~np.isnan(means)]
    rows = rank_rows(a)
    with_comm = [r.overlap_ratio for r in rows if r.overlap_ratio is not None]
    return s.CrossRank(
        ranks=len(summaries),
        slowest_rank=rank_label(summaries[a.slowest], a.slowest),
        fastest_rank=rank_label(summaries[a.fastest], a.fastest),
        step_time_spread=round(float(timed.max() / timed.min() - 1), 4) if len(timed) and timed.min() > 0 else None,
        step_ids=list(a.step_ids),
        step_time_us=({"min": _us(timed.min()), "median": _us(np.median(timed)), "max": _us(timed.max())}
                      if len(timed) else None),
        matched_by=_matched_by(a.alignment.keys),
        collectives=len(a.alignment.keys),
        arrival_skew_us=_stats(a.alignment.skew) if len(a.alignment.keys) else None,
        median_rank=rank_label(summaries[a.median], a.median),
        straggler=straggler_section(a, a.straggler) if a.straggler else None,
        exposed_communication_us=round(float(np.mean([r.exposed_communication_us for r in rows])), 3),
        overlap_ratio=round(float(np.mean(with_comm)), 4) if with_comm else None,
        top_collectives=top_collectives(a),
        diagnoses=diagnoses,
        failures=[s.RankFailure(path=f.path, error=f.error) for f in failures],
        notes=list(a.notes),
        duplicate_ranks=list(a.duplicate_ranks),
    )


def _matched_by(keys: tuple[str, ...]) -> str:
    kinds = {k.split("|", 1)[0] for k in keys}
    return " and ".join(sorted(kinds, key=lambda k: k != "seq")) if kinds else ""


def _stats(values: np.ndarray) -> dict[str, float]:
    return {"mean": _us(values.mean()), "p50": _us(np.percentile(values, 50)),
            "p90": _us(np.percentile(values, 90)), "max": _us(values.max())}


def _metadata(a: CrossRankAnalysis, column: int) -> tuple[str, str, int | None, str | None, int | None]:
    """(name, group, seq, step, bytes) of a matched collective, as the rank that first had it says."""
    r, row = (int(v) for v in a.alignment.owner[column])
    c = a.summaries[r].collectives
    step = int(c.step[row])
    return (c.names[row], c.groups[row], int(c.seq[row]) if c.seq[row] >= 0 else None,
            a.summaries[r].step_ids[step] if step >= 0 else None, int(c.bytes[row]) if c.bytes[row] >= 0 else None)


def top_collectives(a: CrossRankAnalysis) -> list[s.CollectiveRow]:
    al = a.alignment
    if not len(al.keys):
        return []
    skew, last, present = al.skew, al.last, al.present
    wait = np.where(present, al.wait, np.nan)
    order = np.argsort(-skew, kind="stable")[:TOP_COLLECTIVES]
    result = []
    for c in order.tolist():
        name, group, seq, step, nbytes = _metadata(a, c)
        result.append(s.CollectiveRow(
            name=name, group=group, seq=seq, step=step, bytes=nbytes, ranks=int(present[:, c].sum()),
            arrival_skew_us=_us(skew[c]), last_rank=rank_label(a.summaries[last[c]], int(last[c])),
            max_wait_us=_us(np.nanmax(wait[:, c])), mean_wait_us=_us(np.nanmean(wait[:, c])),
        ))
    return result


def straggler_section(a: CrossRankAnalysis, st: Straggler) -> s.Straggler:
    summary = a.summaries[st.index]
    cause = None
    if st.cause is not None:
        c = st.cause
        cause = s.StragglerCause(category=c.category, label=CAUSE_LABELS[c.category], straggler_us=_us(c.straggler_ns),
                                 median_us=_us(c.median_ns),
                                 ratio=round(c.straggler_ns / c.median_ns, 2) if c.median_ns > 0 else None)
    draft = s.Straggler(
        rank=rank_label(summary, st.index), path=summary.path,
        median_rank=rank_label(a.summaries[st.median], st.median),
        arrived_last_share=round(float(a.waits.last_share[st.index]), 4), late_collectives=st.late_collectives,
        collectives=int(a.waits.collectives[st.index]), wait_caused_per_rank_us=_us(st.wait_caused_per_rank_step),
        cause=cause,
        lead_in_us={k: _us(v) for k, v in (st.cause.straggler_lead_in if st.cause else {}).items()},
        median_lead_in_us={k: _us(v) for k, v in (st.cause.median_lead_in if st.cause else {}).items()},
        statement="",
    )
    # The statement reads the section's own rounded figures, so it is written from the draft.
    return msgspec.structs.replace(draft, statement=statement(draft, _late_names(a, st.index)))


def _late_names(a: CrossRankAnalysis, index: int) -> str:
    late = np.flatnonzero(a.alignment.last == index)
    names = Counter(_metadata(a, int(c))[0] for c in late[:1000])
    return ", ".join(n for n, _ in names.most_common(3))


def statement(st: s.Straggler, names: str) -> str:
    """'rank 2 arrived last at 100% of its 3 collectives (all_reduce); each other rank waited 20.0 ms per step
    for it. Before those arrivals its DataLoader wait took 60.1 ms against 1.2 ms on the median rank 1 (50x).'"""
    text = (f"rank {st.rank} arrived last at {st.arrived_last_share:.0%} of its {st.collectives} collectives"
            f"{f' ({names})' if names else ''}; each other rank waited {st.wait_caused_per_rank_us / 1000:,.1f} ms "
            "per step for it.")
    c = st.cause
    if c is None:
        return text
    ratio = f" ({c.ratio:,.1f}x)" if c.ratio is not None else ""
    return (f"{text} Before those late arrivals its {c.label} took {c.straggler_us / 1000:,.1f} ms against "
            f"{c.median_us / 1000:,.1f} ms on the median rank {st.median_rank}{ratio}.")


def diagnosis(role: str, report: s.Report) -> s.RankDiagnosis:
    return s.RankDiagnosis(role=role, rank=report.rank, path=report.source.paths[0] if report.source.paths else "",
                           step_time_us=report.summary.step_time_us, patterns=report.patterns,
                           recommendations=report.recommendations)


@dataclass(frozen=True)
class JobParts:
    """What the job's Report adds to its main rank's (pipeline/assemble.py builds it)."""

    main_path: str  # the main rank's file: the straggler's, else the slowest rank's
    ranks: list[s.RankRow]
    paths: list[str]  # every rank's file
    cross_rank: s.CrossRank


def job_parts(a: CrossRankAnalysis, reports: dict[str, s.Report], failures: list[RankFailure]) -> JobParts:
    """Every rank's row, the cross-rank section, and the diagnoses of the main and the median rank."""
    main_i = main_index(a)
    main_path = a.summaries[main_i].path
    role = "straggler" if a.straggler else "slowest"
    chosen = [diagnosis(role, reports[main_path])]
    median_path = a.summaries[a.median].path
    if a.median != main_i and median_path in reports:
        chosen.append(diagnosis("median", reports[median_path]))
    return JobParts(main_path=main_path, ranks=rank_rows(a), paths=[x.path for x in a.summaries],
                    cross_rank=cross_rank_section(a, chosen, failures))
