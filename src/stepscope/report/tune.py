"""A tune (`stepscope.tune/1`) rendered: the ladder as a neutral table (drawn by the terminal and the HTML page in
`report.pages`) and the progress line while it runs. Every figure is the Tune's own; this module only formats."""

from __future__ import annotations

import dataclasses

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.text import Text

from stepscope.model.tune import Trial, Tune
from stepscope.report.fit import table as fitted
from stepscope.report.tables import Cell, Table
from stepscope.units import share_cell


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}" if x >= 10 else f"{x:,.3g}"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def unit(tune: Tune) -> str:
    """samples/s when the batch size is known, steps/s otherwise."""
    return "samples/s" if tune.baseline is not None and tune.baseline.samples_per_s else "steps/s"


def _per_s(tune: Tune, trial: Trial) -> float | None:
    """The candidate's rate in its comparison (the side of its gain); a tune written before paired rates were
    recorded has only its runs pooled."""
    if trial.paired_rate is not None:
        return trial.paired_rate
    return trial.samples_per_s if unit(tune) == "samples/s" else trial.steps_per_s


def trial_label(trial: Trial) -> str:
    params = ", ".join(f"{k}={v}" for fix in trial.tried for k, v in trial.params.get(fix, {}).items())
    return f"+ {' + '.join(trial.tried)}" + (f" ({params})" if params else "")


def _builds_on(trial: Trial) -> str:
    """The rung it builds on, at the candidate's times: '548.8 on 0'."""
    if trial.paired_reference_rate is None:
        return f"on {trial.builds_on}"
    return f"{_rate(trial.paired_reference_rate)} on {trial.builds_on}"


def ladder_table(tune: Tune) -> Table:
    """Rung, fix, its throughput and that of the rung it builds on in the same alternating runs, the gain (their
    ratio), the speed-up against the baseline (the gains multiplied along the rungs), the estimate stepscope had
    made, kept or not and why."""
    b = tune.baseline
    u = unit(tune)
    rows: list[list[Cell]] = []
    if b is not None:
        base_rate = b.samples_per_s if u == "samples/s" else b.steps_per_s
        rows.append([Cell("0", 0), Cell("baseline (as written)", None, "text"), Cell(_rate(base_rate), base_rate),
                     Cell(""), Cell(""), Cell("1.00x", 1.0), Cell(""), Cell("", None, "text"),
                     Cell(_baseline_note(tune), None, "text")])
    for t in tune.trials:
        rows.append([Cell(str(t.rung), t.rung), Cell(trial_label(t), None, "text mono"),
                     Cell(_rate(_per_s(tune, t)), _per_s(tune, t)),
                     Cell(_builds_on(t) if t.gain is not None else "", t.paired_reference_rate),
                     Cell(_x(t.gain) if t.gain is not None else "", t.gain), Cell(_x(t.speedup), t.speedup),
                     Cell("~" + _x(t.estimated_speedup) if t.estimated_speedup else "-", t.estimated_speedup),
                     Cell("kept" if t.accepted else "no", None, "text"), Cell(t.reason, None, "text")])
    columns = [("rung", ""), ("fix", "text wrap"), (u, ""), ("builds on", ""), ("gain", ""),
               ("vs baseline", ""), ("estimated", ""), ("kept", "text"), ("why", "text wrap")]
    return Table(columns, rows, id="ladder", title="Ladder", keep=(u, "vs baseline", "kept", "why"),
                 note=f"Each rung adds its fix to the last kept rung, in runs alternating with it: {u} is its "
                      "throughput there and 'builds on' that rung's at the same times (geometric means over its "
                      f"runs), so gain = {u} / builds on; kept when the gain's 95% interval is above 1 + the "
                      "smallest gain worth a change. vs baseline = the gain times the vs baseline of the rung built "
                      "on. The baseline row pools all its runs (the machine drifts: a rung's 'builds on' may differ "
                      "from it). Throughput: samples over wall time across windows of steps, unprofiled.")


def _baseline_note(tune: Tune) -> str:
    b = tune.baseline
    if b is None:
        return ""
    windows = sum(len(r.windows) for r in b.runs)
    parts = [f"{len(b.runs)} run{'s' if len(b.runs) != 1 else ''}" + (f", {windows} windows" if windows else "")]
    if b.drift is not None:
        parts.append(f"first and last {share_cell(b.drift, 1)} apart")
    if b.noise_band is not None:
        parts.append(f"noise band ±{share_cell(b.noise_band)}")
    return ", ".join(parts)


def not_tried_table(tune: Tune) -> Table | None:
    if not tune.not_tried:
        return None
    rows = [[Cell(n.id, None, "text mono"), Cell("~" + _x(n.estimated_speedup) if n.estimated_speedup else "-",
                                                 n.estimated_speedup),
             Cell(n.reason + (f": {n.suggestion}" if n.suggestion else ""), None, "text")] for n in tune.not_tried]
    return Table([("fix", "text"), ("estimated", ""), ("why not tried", "text wrap")], rows, id="not-tried",
                 title="Not tried")


def headline(tune: Tune) -> list[str]:
    lines = [f"stepscope tune: {' '.join(tune.command)}"]
    d = tune.device
    if d is not None:
        extra = f", {d.cpu_cores} CPU cores" if d.cpu_cores else ""
        lines.append(f"device: {d.name} ({d.kind}{', cc ' + d.compute_capability if d.compute_capability else ''}"
                     f"{extra}), torch {d.torch}; seed {tune.seed} in every trial")
    if tune.status != "finished":
        lines.append(f"status: {tune.status}")
    if tune.applied:
        lines.append(f"tuned: {speedup_text(tune)}, keeping {', '.join(tune.applied)}")
        if tune.final_paired_rate and tune.final_paired_baseline_rate:
            lines.append(f"throughput: {_rate(tune.final_paired_baseline_rate)} -> {_rate(tune.final_paired_rate)} "
                         f"{unit(tune)} (the program as it is and tuned, in alternating runs; unprofiled, "
                         f"{timed_by(tune)})")
        else:  # a tune written before paired rates were recorded
            before = tune.baseline.samples_per_s if unit(tune) == "samples/s" and tune.baseline else (
                tune.baseline.steps_per_s if tune.baseline else None)
            after = tune.final_samples_per_s if unit(tune) == "samples/s" else tune.final_steps_per_s
            if before and after:
                lines.append(f"throughput: {_rate(before)} -> {_rate(after)} {unit(tune)} (unprofiled, "
                             f"{timed_by(tune)})")
    elif tune.status == "finished":
        lines.append("tuned: no fix was faster beyond the noise; the program is kept as it is")
    if tune.final_patterns:
        now = ", ".join(f"{p.id} {share_cell(p.share)}" for p in tune.final_patterns[:3])
        lines.append(f"{'now' if tune.applied else 'diagnosis'}: {now}")
    if tune.final_recommendations:  # the final diagnosis, less what the ladder applied or measured
        nxt = ", ".join(f"{r.id}" + (f" ~{_x(r.estimated_speedup)}" if r.estimated_speedup else "")
                        for r in tune.final_recommendations[:4])
        lines.append(f"next: {nxt}")
    return lines


def speedup_text(tune: Tune) -> str:
    """'3.21x (2.95-3.48, 6 windows) measured against the program as it is', or why there is none."""
    if tune.speedup is None:
        return "this tune recorded no overall speed-up"
    if tune.speedup_interval:
        low, high = tune.speedup_interval
        return (f"{tune.speedup:.2f}x ({low:.2f}-{high:.2f}, {tune.speedup_windows} windows) measured against the "
                "program as it is")
    return f"{tune.speedup:.2f}x measured"


def to_rich(table: Table) -> RenderableType:
    """A neutral table drawn in the terminal as every report draws its tables (fitted to the width it is printed
    at: prose wraps between words, so a fix id is never cut)."""
    return fitted(table)


# Below this width the ladder leaves out the estimate and the gain column (its figure is in `why`), whatever the
# tune: every ladder printed at one width has the same columns.
LADDER_FULL_WIDTH = 120
LADDER_NARROW_LEAVES_OUT = ("estimated", "gain")


class _Ladder:
    """The ladder with its columns chosen by the width it is printed at alone, never by what the rungs hold."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        spec = self.table
        if options.max_width < LADDER_FULL_WIDTH:
            for name in LADDER_NARROW_LEAVES_OUT:
                spec = _without(spec, name)
            spec = dataclasses.replace(spec, note=f"{spec.note} Left out below {LADDER_FULL_WIDTH} columns: "
                                                  f"{', '.join(LADDER_NARROW_LEAVES_OUT)} (tune.html and tune.json "
                                                  "have them).")
        yield fitted(spec)


def _without(table: Table, label: str) -> Table:
    keep = [i for i, (name, _) in enumerate(table.columns) if name != label]
    return dataclasses.replace(table, columns=[table.columns[i] for i in keep],
                               rows=[[row[i] for i in keep] for row in table.rows],
                               footer=[[row[i] for i in keep] for row in table.footer])


def ladder_rich(tune: Tune) -> RenderableType:
    """The ladder in the terminal: the same columns for every tune at a given width (rung, fix, throughput, speed-up,
    kept, why; the estimate and the gain from 120 columns)."""
    return _Ladder(ladder_table(tune))


def progress_line(phase: str, elapsed_s: float, budget_s: float | None) -> Text:
    left = f", budget left {_clock(max(budget_s - elapsed_s, 0))}" if budget_s else ""
    return Text(f"{phase}  [elapsed {_clock(elapsed_s)}{left}]", style="cyan")


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def patch_how(tune: Tune) -> str:
    """The commands that apply the patch, where they run; a tune written before they were recorded points to
    the patch's header."""
    if not tune.patch_apply:
        return "apply it with the command in its header"
    where = f" in {tune.patch_apply_in}" if tune.patch_apply_in else ""
    return f"apply it{where} with `{'` or `'.join(tune.patch_apply)}`"


class TuneTerminalRenderer:
    """Tune -> a rich renderable."""

    def render(self, tune: Tune) -> RenderableType:
        parts: list[RenderableType] = [Text("\n".join(headline(tune)), style="bold"), ladder_rich(tune)]
        if (skipped := not_tried_table(tune)) is not None:
            parts.append(to_rich(skipped))
        if tune.patch:
            parts.append(Text(f"patch: {tune.patch} (the kept fixes as code; {patch_how(tune)})"))
        parts += [Text(f"note: {n}", style="dim") for n in tune.notes]
        return Group(*parts)


def timed_by(tune: Tune) -> str:
    """Who timed the baseline's windows, in words (the step meter since it was there; a clock before)."""
    timing = tune.baseline.runs[0].timing if tune.baseline and tune.baseline.runs else "synchronised windows"
    return {"step meter": "windows timed by the step meter", "host clock": "windows on the host clock"}.get(
        timing, "synchronised windows")
