"""One figure, one value, across every front end (issue 40 item 5): a run folder's report.json, report.txt and
report.html, `analyze RUN --json`, the job of two rank folders, `diff`, watch's view and terminal, and the LSP's
hints and lens. Each figure (step time, samples/s, steps/s, each meter phase, each line's forward and backward,
each fix's estimate, the noise verdict) is taken from report.json and every place that shows it is held to it:
a number shown as text is read back and must be the Report's within the precision it is printed with (the formats
of units.py and the front ends' own); a number another JSON carries must be the Report's. `check_run_folder`
returns every figure with two values, as problems in words; tests/test_consistency.py asserts there are none,
benchmarks/consistency.py runs it on every example and pattern workload."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import msgspec
from rich.console import Console

from consistency_ledger import CELL, Ledger
from stepscope.compare import compare as diff_reports
from stepscope.live import editor, view
from stepscope.live.compare import compare as live_compare
from stepscope.live.compare import line_figures
from stepscope.live.engine import Result, Target
from stepscope.live.terminal import render as watch_render
from stepscope.model.diff import Diff
from stepscope.model.report import Report, from_json
from stepscope.report.meter_table import LABELS as PHASE_LABELS


def figures(r: Report) -> dict[str, float | None]:
    """The figures a front end shows, by name, as the Report holds them."""
    s = r.summary
    out: dict[str, float | None] = {"step time": s.step_time_us, "samples/s": s.samples_per_s,
                                    "steps/s": s.steps_per_s}
    for p in r.meter.phases if r.meter else []:
        out[f"phase {p.name}"] = p.mean_us
    for row in r.lines.rows if r.lines else []:
        for k in ("cpu_fwd_us", "cpu_bwd_us", "gpu_fwd_us", "gpu_bwd_us"):
            out[f"line {row.label} {k}"] = getattr(row, k)
    for f in r.recommendations:
        out[f"fix {f.id}"] = f.estimated_speedup
    return out


def reports_agree(ledger: Ledger, base: Report, other: Report, where: str) -> None:
    mine, theirs = figures(base), figures(other)
    for name, value in mine.items():
        ledger.same(name, where, theirs.get(name, "missing"), value)
    for name in set(theirs) - set(mine):
        ledger.problems.append(f"{name}: {where} has it, the Report has not")


# -- the report's terminal text and HTML page ---------------------------------------------------------------------

def terminal_text(report: Report, width: int = 200) -> str:
    from stepscope.report import render

    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(render("terminal", report))
    return console.export_text()


def _panel_and_fixes(ledger: Ledger, r: Report, flat: str, where: str) -> None:
    """The verdict's figures and each fix's estimate (`~1.85x ... [id]`), in a text with its spaces collapsed."""
    s = r.summary
    for label, value in (("step time", s.step_time_us), ("steps/s", s.steps_per_s), ("samples/s", s.samples_per_s)):
        m = re.search(rf"{re.escape(label)} ({CELL})", flat)
        ledger.shown(label, f"{where} headline", m.group(1) if m else None, value)
    for f in r.recommendations:
        if f.estimated_speedup is None:
            continue
        m = re.search(rf"~([\d.]+x) (?:(?!~[\d.]+x).)*?\[{re.escape(f.id)}\]", flat)
        ledger.shown(f"fix {f.id}", f"{where} fixes", m.group(1) if m else None, f.estimated_speedup)
    estimates_start_at_the_headline(ledger, r, where)


def estimates_start_at_the_headline(ledger: Ledger, r: Report, where: str) -> None:
    """Each estimate that says the step it changes ('step 993 ms -> ~800 ms') starts from the headline's step: the
    figure at the top of the screen, not the profiled step the estimate was made on."""
    texts = [(f.id, f.estimate) for f in r.recommendations] + [(c.id, c.reason) for c in r.considered]
    for fix_id, text in texts:
        for m in re.finditer(rf"\bstep ({CELL}) -> ", " ".join(text.split())):
            ledger.shown(f"fix {fix_id} base step", f"{where} estimate", m.group(1), r.summary.step_time_us)


def _table_rows(lines: list[str], header: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """A terminal table's columns and rows (cells split on two spaces or more), found by its header's words."""
    top = next((i for i, ln in enumerate(lines) if all(h in ln for h in header)), None)
    if top is None:
        return [], []
    head = re.split(r"\s{2,}", lines[top].strip())
    rows = []
    for ln in lines[top + 2:]:
        if not ln.strip():
            break
        rows.append(re.split(r"\s{2,}", ln.strip()))
    return head, rows


def _lines_table(ledger: Ledger, r: Report, head: list[str], rows: list[list[str]], where: str) -> None:
    """The lines table, row by row in the Report's order: its time columns from the right (a code cell may hold
    two spaces of its own)."""
    columns = {"CPU fwd": "cpu_fwd_us", "CPU bwd": "cpu_bwd_us", "GPU fwd": "gpu_fwd_us", "GPU bwd": "gpu_bwd_us"}
    shown = [h for h in head if h in columns]
    tail = len(head) - head.index(shown[0]) if shown else 0
    for row, cells in zip(r.lines.rows if r.lines else [], rows, strict=False):
        label = cells[0]
        if not (label == row.label or (label.startswith("…") and row.label.endswith(label[1:]))):
            ledger.problems.append(f"lines: {where} row {label!r} where the Report has {row.label!r}")
            continue
        values = dict(zip(head[-tail:], cells[-tail:], strict=False))
        for h in shown:
            ledger.shown(f"line {row.label} {columns[h]}", where, values.get(h), getattr(row, columns[h]))


def check_terminal(ledger: Ledger, r: Report, text: str, where: str) -> None:
    lines = text.replace("│", " ").splitlines()
    _panel_and_fixes(ledger, r, " ".join(" ".join(lines).split()), where)
    if r.meter is not None:
        head, rows = _table_rows(lines, ("phase", "per step", "share"))
        by_label = {cells[0]: cells for cells in rows}
        for p in r.meter.phases:
            cells = by_label.get(PHASE_LABELS.get(p.name, p.name))
            ledger.shown(f"phase {p.name}", f"{where} meter table", cells[1] if cells else None, p.mean_us)
    if r.lines is not None and r.lines.rows:
        head, rows = _table_rows(lines, ("label", "function", "code"))
        _lines_table(ledger, r, head, rows, f"{where} lines table")


def check_html(ledger: Ledger, r: Report, html: str, where: str) -> None:
    from test_one_figure import Page

    page = Page(html)
    _panel_and_fixes(ledger, r, " ".join(" ".join(page.text).split()), where)
    if r.meter is not None:
        table = page.tables.get("table-meter", {"body": []})
        by_label = {cells[0]: cells for cells in table["body"]}
        for p in r.meter.phases:
            cells = by_label.get(PHASE_LABELS.get(p.name, p.name))
            ledger.shown(f"phase {p.name}", f"{where} meter table", cells[1] if cells else None, p.mean_us)
    if r.lines is not None and r.lines.rows:
        table = page.tables.get("table-lines", {"head": [[]], "body": []})
        _lines_table(ledger, r, table["head"][0], table["body"], f"{where} lines table")


# -- diff, watch and the editor ----------------------------------------------------------------------------------

def check_diff(ledger: Ledger, before: Report, after: Report, diff: Diff, where: str) -> None:
    for side, r in (("before", before), ("after", after)):
        d = getattr(diff, side)
        ledger.same("step time", f"{where} {side}", d.step_time_us, r.summary.step_time_us)
        ledger.same("samples/s", f"{where} {side}", d.samples_per_s, r.summary.samples_per_s)
        ledger.same("steps/s", f"{where} {side}", d.steps_per_s, r.summary.steps_per_s)
    if before.meter is not None and after.meter is not None:
        phases = {p.category: p for p in diff.phases}
        for side, r in (("before", before), ("after", after)):
            for p in r.meter.phases:
                row = phases.get(p.name)
                ledger.same(f"phase {p.name}", f"{where} {side}", getattr(row, f"{side}_us", None), p.mean_us)


def _session(current: Report, previous: Report | None) -> SimpleNamespace:
    """What live/view.py reads of a watch session, with the Reports of two runs (watch's own bookkeeping is
    tests/test_watch_session.py's)."""
    now = Result(2, Path("run-2"), current, None, 0.0, None, 1.0)
    before = Result(1, Path("run-1"), previous, None, 0.0, None, 1.0) if previous is not None else None
    return SimpleNamespace(version=1, target=Target(("train.py",), Path(".")), runs={}, current=now,
                           baseline=before or now, failed=None, changes=live_compare(current, previous, previous),
                           model=current.batch_sizes, measurements={}, batch_flag=None, notes=())


def check_watch(ledger: Ledger, current: Report, previous: Report, where: str) -> dict:
    """Watch's view (the page's data) and its terminal, the current run against the previous one."""
    session = _session(current, previous)
    v = msgspec.to_builtins(view.build(session))
    s = current.summary
    res = v["result"]
    ledger.same("step time", f"{where} view", res["step_ms"] * 1e3, s.step_time_us)
    ledger.same("samples/s", f"{where} view", res["samples_per_s"], s.samples_per_s)
    ledger.same("steps/s", f"{where} view", res["steps_per_s"], s.steps_per_s)
    for f, fix in zip(current.recommendations, res["fixes"], strict=False):
        ledger.same(f"fix {f.id}", f"{where} view", fix["speedup"], f.estimated_speedup)
    phases = {p["name"]: p["now_us"] for p in v["changes"]["phases"]}
    for p in current.meter.phases if current.meter else []:
        ledger.same(f"phase {p.name}", f"{where} view", phases.get(p.name), p.mean_us)
    rows = {(r.file, r.line): r for r in current.lines.rows} if current.lines else {}
    figs = line_figures(current)
    for line in v["changes"]["lines"]:
        file, _, number_ = line["label"].rpartition(":")
        row, fig = rows.get((file, int(number_))), figs.get((file, int(number_)))
        if line["gone"] or row is None or fig is None:
            continue
        ledger.same(f"line {row.label} fwd", f"{where} view", line["forward_us"], max(row.cpu_fwd_us, row.gpu_fwd_us))
        ledger.same(f"line {row.label} bwd", f"{where} view", line["backward_us"], max(row.cpu_bwd_us, row.gpu_bwd_us))
    batch = v["batch"]
    if current.batch_sizes is not None:
        [own] = [b for b in batch["rows"] if b["current"]]
        ledger.same("step time", f"{where} view batch row", own["step_us"], s.step_time_us)
        ledger.same("samples/s", f"{where} view batch row", own["samples_per_s"], s.samples_per_s)
        for b, row in zip(batch["rows"], current.batch_sizes.rows, strict=True):
            ledger.same(f"batch {row.batch_size} step", f"{where} view batch rows", b["step_us"], row.step_us)
    # The watch terminal draws the same view.
    out = io.StringIO()
    Console(file=out, width=200, color_system=None, force_terminal=False).print(watch_render(v, 200))
    text = " ".join(out.getvalue().replace("│", " ").split())
    m = re.search(r"step time ([\d.,]+ ms)", text)
    ledger.shown("step time", f"{where} terminal", m.group(1) if m else None, s.step_time_us)
    if s.samples_per_s:
        m = re.search(r"samples/s ([\d.,]+)", text)
        ledger.shown("samples/s", f"{where} terminal", m.group(1) if m else None, s.samples_per_s)
    for f in current.recommendations[:view.TOP_FIXES]:
        if f.estimated_speedup:
            m = re.search(rf"~([\d.]+x) (?:(?!~[\d.]+x).)*?\[{re.escape(f.id)}\]", text)
            ledger.shown(f"fix {f.id}", f"{where} terminal", m.group(1) if m else None, f.estimated_speedup)
    return v


def check_noise(ledger: Ledger, before: Report, after: Report, where: str, bases: tuple[Path, ...],
                script: Path | None) -> None:
    """The change of the step judged once: the diff's verdict, watch's step shift, its terminal word and the LSP
    lens say the same (beyond the runs' noise or within it)."""
    diff = diff_reports(before, after)
    changes = live_compare(after, before, before)
    step = changes.step.get("previous")
    if diff.verdict == "inconclusive" or step is None:
        return
    beyond = diff.verdict in ("faster", "slower")
    ledger.same("noise verdict", f"{where} watch (step vs previous)", step.beyond_noise, beyond)
    v = msgspec.to_builtins(view.build(_session(after, before)))
    ledger.same("noise verdict", f"{where} view", v["changes"]["step"]["previous"]["beyond_noise"], beyond)
    out = io.StringIO()
    Console(file=out, width=200, color_system=None, force_terminal=False).print(watch_render(v, 200))
    m = re.search(r"step vs previous: ([^│\n]*)", out.getvalue())
    ledger.same("noise verdict", f"{where} watch terminal", bool(m) and not m.group(1).rstrip().endswith("noise"),
                beyond)
    if script is not None and script.is_file():
        lens = editor.verdict_lens(after, changes, script, script.read_text())
        m = re.search(r"since the last run(, noise)?\)", lens.title)
        ledger.same("noise verdict", f"{where} LSP lens", bool(m) and m.group(1) is None, beyond)


def check_editor(ledger: Ledger, current: Report, previous: Report, where: str, bases: tuple[Path, ...],
                 script: Path | None) -> None:
    """The LSP's inlay hints (each line's fwd and bwd) and its lens (the step, samples/s)."""
    changes = live_compare(current, previous, previous)
    rows = {(r.file, r.line): r for r in current.lines.rows if r.file} if current.lines else {}
    for hint in editor.line_hints(changes, bases):
        row = next((r for (file, n), r in rows.items() if n == hint.line and
                    editor.resolve(file, bases) == hint.path), None)
        if row is None:
            ledger.problems.append(f"hint: {hint.path}:{hint.line} has no line in the Report")
            continue
        for name, value in (("fwd", max(row.cpu_fwd_us, row.gpu_fwd_us)), ("bwd", max(row.cpu_bwd_us, row.gpu_bwd_us))):
            m = re.search(rf"\b{name} ([\d.,]+ ms)", hint.label)
            if m is not None:
                ledger.shown(f"line {row.label} {name}", f"{where} LSP hint", m.group(1), value)
    if script is not None and script.is_file():
        lens = editor.verdict_lens(current, changes, script, script.read_text()).title
        s = current.summary
        m = re.search(rf"step ({CELL})", lens)
        ledger.shown("step time", f"{where} LSP lens", m.group(1) if m else None, s.step_time_us)
        if s.samples_per_s:
            m = re.search(r"([\d,.]+) samples/s", lens)
            ledger.shown("samples/s", f"{where} LSP lens", m.group(1) if m else None, s.samples_per_s)


# -- the whole road for one run folder ---------------------------------------------------------------------------

def stepscope(*args: str) -> None:
    """The CLI as a user runs it, in its own process (a job's ranks go to a process pool)."""
    done = subprocess.run([sys.executable, "-m", "stepscope", *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=600)
    assert done.returncode == 0, (args, done.stderr[-2000:])


def analyze_json(paths: Sequence[Path], out: Path) -> Report:
    stepscope("analyze", *map(str, paths), "--json", str(out))
    return from_json(out.read_bytes())


def slower(r: Report, factor: float) -> Report:
    """The Report with its step `factor` times longer (a planted change: a step that long is beyond any noise the
    run measured), every other figure as it was."""
    s = r.summary
    summary = msgspec.structs.replace(
        s, step_time_us=s.step_time_us * factor if s.step_time_us else None,
        steps_per_s=s.steps_per_s / factor if s.steps_per_s else None,
        samples_per_s=s.samples_per_s / factor if s.samples_per_s else None)
    return msgspec.structs.replace(r, summary=summary)


def check_run_folder(folder: Path, work: Path, *, bases: tuple[Path, ...] = (), script: Path | None = None,
                     ranks: bool = True) -> Ledger:
    """Every front end on one `stepscope run` folder; `work` is scratch space."""
    ledger = Ledger()
    work.mkdir(parents=True, exist_ok=True)
    r = from_json((folder / "report.json").read_bytes())
    if r.meter is not None:
        ledger.same("step time", "report.json meter section", r.meter.step_us, r.summary.step_time_us)
    check_terminal(ledger, r, (folder / "report.txt").read_text(), "report.txt")
    check_terminal(ledger, r, terminal_text(r), "the terminal report")
    if (folder / "report.html").is_file():
        check_html(ledger, r, (folder / "report.html").read_text(), "report.html")
    again = analyze_json([folder], work / "analyze.json")
    reports_agree(ledger, r, again, "analyze RUN --json")
    if ranks:  # the folder as one rank of a job of two (its copy the other): the main rank's figures are its own
        other = work / "rank-b"
        shutil.rmtree(other, ignore_errors=True)
        shutil.copytree(folder, other)
        job = analyze_json([folder, other], work / "job.json")
        reports_agree(ledger, r, job, "analyze RUN_A RUN_B --json (the job's main rank)")
        for d in job.cross_rank.diagnoses if job.cross_rank else []:
            estimates = {f.id: f.estimated_speedup for f in d.recommendations}
            for f in r.recommendations:
                ledger.same(f"fix {f.id}", f"job's {d.role} rank diagnosis", estimates.get(f.id, "missing"),
                            f.estimated_speedup)
    stepscope("diff", str(folder), str(work / "analyze.json"), "--json", str(work / "diff.json"))
    diff = msgspec.json.decode((work / "diff.json").read_bytes(), type=Diff)
    check_diff(ledger, r, again, diff, "diff --json")
    check_watch(ledger, again, r, "watch")
    check_editor(ledger, again, r, "lsp", bases, script)
    for factor in (1.0, 10.0):  # the same run (within noise) and a planted 10x slower step (beyond it)
        check_noise(ledger, r, slower(again, factor), f"x{factor:g}", bases, script)
    return ledger


def optimizer_line_fits(r: Report) -> list[str]:
    """Issue 40: the line calling the optimizer's step shows no more than the meter's optimizer phase; the lines add
    up to no more than the step. Problems in words (none: it holds)."""
    problems = []
    if r.meter is None or r.lines is None or not r.lines.rows:
        return ["no meter or no lines: nothing to hold"]
    opt = r.meter.phase_us("optimizer")
    for row in r.lines.rows:
        calls_step = re.search(r"\.step\(", row.code) and "scheduler" not in row.code
        if calls_step and row.cpu_fwd_us > opt * 1.001 + 0.01:
            problems.append(f"{row.label} `{row.code}` {row.cpu_fwd_us} µs over the optimizer phase {opt} µs")
    total = sum(row.cpu_fwd_us + row.cpu_bwd_us for row in (*r.lines.rows, *r.lines.unattributed))
    if total > r.summary.step_time_us * 1.001 + 0.01:
        problems.append(f"the lines add up to {total:.1f} µs, over the step {r.summary.step_time_us} µs")
    return problems


def dump(ledger: Ledger) -> str:
    return json.dumps({"checked": ledger.checked, "kinds": sorted(ledger.kinds), "problems": ledger.problems},
                      indent=1)
