"""The cross-rank section's parts for report/sections.py: its headline statements, its tables (the neutral
Table both renderers draw) and the rank x step heatmap. Selection and formatting only; every figure comes from
the report's `ranks` and `cross_rank`."""

from __future__ import annotations

from typing import Any

from stepscope.model.report import RankRow, Report
from stepscope.report.figures import LAYOUT, Figure, _spec, new_figure, plain
from stepscope.report.tables import Cell, Table
from stepscope.units import bytes_cell, share_cell, us_cell

TERMINAL_RANK_ROWS = 12  # the terminal shows the ranks that matter most (listed first); HTML and JSON have all
TERMINAL_COLLECTIVES = 5
TERMINAL_FAILURES = 5
INTRO = ("Per step: own work = step time less the rank's waiting in collectives; last = the share of its "
         "collectives it arrived last at; caused = what the other ranks waited, summed, at those. The heatmap: each "
         "rank's waiting in collectives per step (the straggler waits least: its row stays dark); its menu switches "
         "to each rank's step time.")


def _cell(x: float | None, text: str) -> Cell:
    return Cell(text, x)


def _rank(r: int | None) -> str:
    return "-" if r is None else str(r)


def _roles(report: Report) -> dict[int | None, str]:
    cr = report.cross_rank
    roles: dict[int | None, str] = {}
    if cr is None:
        return roles
    if cr.median_rank is not None:
        roles[cr.median_rank] = "median"
    roles[cr.slowest_rank] = "slowest"
    if cr.straggler is not None:
        roles[cr.straggler.rank] = "straggler"
    return roles


def _row_rank(row: RankRow, index: int) -> int:
    return row.rank if row.rank is not None else index


def ranks_table(report: Report) -> Table | None:
    """Every rank: step time, its own work, its waiting, how often it came last, the waiting it caused; the
    ranks that matter most first (see _ordered_rows)."""
    cr = report.cross_rank
    if not report.ranks or cr is None:
        return None
    rows = [[_cell(r.rank, _rank(r.rank)), Cell(role, None, "text"),
             _cell(r.step_time_us, us_cell(r.step_time_us)), _cell(r.own_time_us, us_cell(r.own_time_us)),
             _cell(r.wait_us, us_cell(r.wait_us)), _cell(r.arrived_last_share, share_cell(r.arrived_last_share)),
             _cell(r.wait_caused_us, us_cell(r.wait_caused_us)), _cell(r.exposed_communication_us,
                                                                 us_cell(r.exposed_communication_us)),
             _cell(r.overlap_ratio, share_cell(r.overlap_ratio)), _cell(r.clock_offset_us, us_cell(r.clock_offset_us)),
             _cell(r.gpu_utilization, share_cell(r.gpu_utilization)), Cell(r.primary_pattern or "", None, "text"),
             Cell(r.path, None, "text mono")] for r, role in _ordered_rows(report)]
    columns = [("rank", ""), ("role", "text"), ("step time", ""), ("own work", ""), ("wait", ""),
               ("last", ""), ("caused", ""), ("exposed comm", ""), ("overlap", ""),
               ("clock offset", ""), ("GPU util", ""), ("pattern", "text"), ("file", "text")]
    return Table(columns, rows, id="ranks", title="Every rank, per step",
                 note=f"The rest of this report is rank {_rank(report.rank)}'s full diagnosis.",
                 terminal_rows=TERMINAL_RANK_ROWS)


def headline(report: Report) -> str:
    cr = report.cross_rank
    if cr is None:
        return ""
    text = f"{cr.ranks} ranks"
    if cr.collectives:
        text += f", {cr.collectives:,} collectives matched by {cr.matched_by}"
        if cr.arrival_skew_us:
            text += f", arrival skew p50 {us_cell(cr.arrival_skew_us['p50'])}, max {us_cell(cr.arrival_skew_us['max'])}"
    text += f"; step time spread {share_cell(cr.step_time_spread, 1)}"
    return text


def lead(report: Report) -> list[str]:
    """The section's headline statements: the job's shape, the straggler and why, the exposed communication."""
    cr = report.cross_rank
    if cr is None or not report.ranks:
        return []
    lines = [headline(report)]
    if cr.straggler is not None:
        lines.append(f"Straggler: {cr.straggler.statement}")
    elif cr.collectives:
        lines.append("No straggler: no rank makes the others wait a material share of a step.")
    if cr.exposed_communication_us is not None and cr.collectives:
        lines.append(f"Exposed communication {us_cell(cr.exposed_communication_us)} per step on average "
                     f"(overlap with compute {share_cell(cr.overlap_ratio)}).")
    return lines


def straggler_table(report: Report) -> Table | None:
    """The straggler's lead-in to the collectives it was late for, against the median rank's, by category."""
    cr = report.cross_rank
    st = cr.straggler if cr else None
    if st is None or not st.lead_in_us:
        return None
    rows = []
    for cat, mine in st.lead_in_us.items():
        theirs = st.median_lead_in_us.get(cat, 0.0)
        if mine or theirs:
            ratio = mine / theirs if theirs else None
            grew = round(mine - theirs, 3) + 0.0  # no "-0.00" from rounding
            rows.append([Cell(cat.replace("_", " "), None, "text"), _cell(mine, us_cell(mine)),
                         _cell(theirs, us_cell(theirs)),
                         _cell(grew, us_cell(grew)),
                         _cell(ratio, "-" if ratio is None else f"{ratio:,.1f}x")])
    return Table([("before arriving", "text"), (f"straggler (rank {_rank(st.rank)})", ""),
                  (f"median rank {_rank(st.median_rank)}", ""), ("difference", ""), ("ratio", "")], rows,
                 id="straggler", title=f"Before its late arrivals: rank {_rank(st.rank)} against the median rank",
                 note=f"Summed over the {st.late_collectives} collectives it arrived last at: what each rank did "
                      "between its previous collective's end and its arrival.")


def collectives_table(report: Report) -> Table | None:
    cr = report.cross_rank
    if cr is None or not cr.top_collectives:
        return None
    rows = [[Cell(c.name, None, "text mono"), Cell(c.group, None, "text mono"), _cell(c.seq, _rank(c.seq)),
             Cell(c.step or "", None, "text"), _cell(c.bytes, bytes_cell(c.bytes)), _cell(c.ranks, str(c.ranks)),
             _cell(c.arrival_skew_us, us_cell(c.arrival_skew_us)), _cell(c.last_rank, _rank(c.last_rank)),
             _cell(c.max_wait_us, us_cell(c.max_wait_us)), _cell(c.mean_wait_us, us_cell(c.mean_wait_us))]
            for c in cr.top_collectives]
    return Table([("name", "text"), ("group", "text"), ("seq", ""), ("step", "text"), ("bytes", ""),
                  ("ranks", ""), ("arrival skew", ""), ("last rank", ""), ("max wait", ""), ("mean wait", "")],
                 rows, id="collectives", title=f"The {len(rows)} collectives with the largest arrival skew",
                 terminal_rows=TERMINAL_COLLECTIVES)


def diagnoses_table(report: Report) -> Table | None:
    cr = report.cross_rank
    if cr is None or not cr.diagnoses:
        return None
    rows = [[Cell(d.role, None, "text"), _cell(d.rank, _rank(d.rank)), _cell(d.step_time_us, us_cell(d.step_time_us)),
             Cell(", ".join(p.id for p in d.patterns) or "-", None, "text"),
             Cell(d.recommendations[0].title if d.recommendations else "-", None, "text")] for d in cr.diagnoses]
    return Table([("role", "text"), ("rank", ""), ("step time", ""), ("patterns", "text"), ("top fix", "text")],
                 rows, id="diagnoses", title="Full single-rank diagnoses")


def failures_table(report: Report) -> Table | None:
    cr = report.cross_rank
    if cr is None or not cr.failures:
        return None
    return Table([("file", "text"), ("error", "text")],
                 [[Cell(f.path, None, "text mono"), Cell(f.error, None, "text")] for f in cr.failures],
                 id="rank-failures", title=f"{len(cr.failures)} rank files could not be analysed",
                 terminal_rows=TERMINAL_FAILURES)


def rank_tables(report: Report) -> list[Table]:
    tables = (straggler_table(report), ranks_table(report), diagnoses_table(report), collectives_table(report),
              failures_table(report))
    return [t for t in tables if t is not None]


def heatmap_figure(report: Report) -> Figure | None:
    """Ranks x steps: each rank's waiting in collectives per step (the straggler's row stays dark), or from the
    menu its step time."""
    cr = report.cross_rank
    if cr is None or not cr.step_ids or len(report.ranks) < 2:
        return None
    labels = [f"rank {_rank(r.rank)}" if r.rank is not None else plain(r.path) for r in report.ranks]
    steps = [f"step {plain(s)}" for s in cr.step_ids]

    def ms_matrix(field: str) -> list[list[float | None]]:
        return [[None if v is None else v / 1000 for v in getattr(r, field)] for r in report.ranks]

    times, waits = ms_matrix("step_times_us"), ms_matrix("step_wait_us")
    fig = new_figure({**LAYOUT, "height": min(200 + 14 * len(labels), 900),
                      "xaxis": {"type": "category"},
                      "yaxis": {"type": "category", "autorange": "reversed", "automargin": True}})
    fig.add_heatmap(z=waits, x=steps, y=labels, colorscale="Viridis", colorbar={"title": {"text": "ms"}},
                    hovertemplate="%{y}, %{x}: %{z:.2f} ms<extra></extra>")
    buttons: list[dict[str, Any]] = [
        {"label": "wait in collectives", "method": "restyle", "args": [{"z": [waits]}]},
        {"label": "step time", "method": "restyle", "args": [{"z": [times]}]},
    ]
    fig.update_layout(updatemenus=[{"buttons": buttons, "direction": "right", "x": 0, "y": 1.12,
                                    "xanchor": "left", "showactive": True, "type": "buttons"}])
    return _spec(fig)


def _ordered_rows(report: Report) -> list[tuple[RankRow, str]]:
    """The ranks with their role, those that matter most first: the named roles, then by the waiting they
    caused (the page's table sorts by any column)."""
    roles = _roles(report)
    tagged = [(r, roles.get(_row_rank(r, i), "")) for i, r in enumerate(report.ranks)]
    first = [t for t in tagged if t[1]]
    rest = sorted((t for t in tagged if not t[1]), key=lambda t: -(t[0].wait_caused_us or 0.0))
    return first + rest
