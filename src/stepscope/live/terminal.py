"""`stepscope watch` in the terminal: the session's view as rich renderables (drawn by a rich Live)."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from stepscope.units import bytes_cell

METRIC_NAMES = {"forward_us": "fwd", "backward_us": "bwd"}
CODE_WIDTH = 40
CHANGE_WIDTH = 26
FIXED_WIDTH = 12 + 9 + 9 + 10 + 5 * 3  # line, fwd, bwd, memory and the separators
WIDE = 130  # narrower terminals show the changes since the previous run only


def render(view: dict[str, Any], width: int = 160) -> RenderableType:
    parts: list[RenderableType] = [_header(view)]
    if view.get("error"):
        parts.append(Text(f"run {view['error']['run_id']} failed: {view['error']['text']}", style="bold red"))
    if view.get("result"):
        parts.append(_figures(view))
    if view.get("changes"):
        parts.append(_lines(view["changes"], width))
    parts += [Text(note, style="dim") for note in view.get("notes", ())]
    return Group(*parts)


def ms(us: float | None) -> str:
    if us is None:
        return "-"
    return f"{us / 1e3:.2f} ms" if abs(us) >= 1000 else f"{us:.0f} µs"


def _signed(shift: dict[str, Any] | None, unit: str = "us") -> Text:
    if shift is None:
        return Text("")
    d = shift["delta"]
    size = ms(abs(d)) if unit == "us" else bytes_cell(abs(int(d)))
    ratio = f" ({(shift['ratio'] - 1) * 100:+.0f}%)" if shift.get("ratio") else ""
    word = "slower" if d > 0 else "faster"
    if unit != "us":
        word = "more" if d > 0 else "less"
    if not shift["beyond_noise"]:
        return Text(f"{'+' if d >= 0 else '-'}{size}{ratio} noise", style="dim")
    return Text(f"{'+' if d >= 0 else '-'}{size}{ratio} {word}", style="bold red" if d > 0 else "bold green")


def _header(view: dict[str, Any]) -> Text:
    text = Text(f"stepscope watch  {view['program']}", style="bold")
    run = view.get("run")
    if run:
        state = run["state"]
        text.append(f"\nrun {run['run_id']} ({run['trigger']}): {state}")
        if run.get("first_figures_s") is not None:
            text.append(f"  first figures {run['first_figures_s']:.1f} s")
        if run.get("full_view_s") is not None:
            text.append(f"  full view {run['full_view_s']:.1f} s")
        elif state == "running":
            text.append(f"  {run['elapsed_s']:.1f} s  {run.get('progress', '')}", style="dim")
        first = run.get("first")
        if first and state == "running":
            text.append(f"\nfirst figures: step {first['step_ms']:.2f} ms", style="cyan")
            if first.get("samples_per_s"):
                text.append(f"   samples/s {first['samples_per_s']:,.1f}", style="cyan")
            top = sorted(first["phases"].items(), key=lambda kv: -kv[1])[:3]
            text.append("   " + ", ".join(f"{name} {share * 100:.0f}%" for name, share in top if share > 0),
                        style="cyan")
    if view.get("baseline_run") is not None:
        text.append(f"\nbaseline: run {view['baseline_run']}", style="dim")
    return text


def _figures(view: dict[str, Any]) -> Panel:
    r = view["result"]
    lines = Text()
    v = r.get("verdict")
    lines.append(f"{v['id'].upper().replace('_', ' ')}" if v else "no pattern found", style="bold")
    if v and v.get("share") is not None:
        lines.append(f"  about {v['share'] * 100:.0f}% of each step")
    lines.append(f"\nstep time {r['step_ms']:.2f} ms")
    if r.get("samples_per_s"):
        lines.append(f"   samples/s {r['samples_per_s']:,.1f}")
    step = (view.get("changes") or {}).get("step") or {}
    for name in ("previous", "baseline"):
        if step.get(name):
            lines.append(f"\nstep vs {name}: ")
            lines.append_text(_signed(step[name]))
    changes = view.get("changes") or {}
    if changes.get("verdict_previous") and v and changes["verdict_previous"] != v["id"]:
        lines.append(f"\nverdict was {changes['verdict_previous']}", style="yellow")
    for i, f in enumerate(r.get("fixes") or [], 1):
        gain = f"~{f['speedup']:.2f}x " if f.get("speedup") else ""
        lines.append(f"\n{i}. {gain}{f['title']} [{f['id']}]")
    return Panel(lines, title=Text(f"run {r['run_id']}"), title_align="left")  # a Text: the id is no markup


def _lines(changes: dict[str, Any], width: int) -> Table:
    """Per line: its figures now and its changes; on a narrow terminal the code is cut short first, then the
    baseline's column goes."""
    noise = changes["noise"]
    cols = ["line", "code", "fwd", "bwd", "memory", "vs previous"] + (["vs baseline"] if width >= WIDE else [])
    code = max(8, min(CODE_WIDTH, width - FIXED_WIDTH - (CHANGE_WIDTH + 3) * (len(cols) - 5)))
    table = Table(title=f"lines (per step; noise: {noise['basis']}, ±{noise['relative'] * 100:.0f}% each run)",
                  title_justify="left", show_edge=False, pad_edge=False)
    for col in cols:
        change = col.startswith("vs ")
        table.add_column(col, overflow="fold" if change else "ellipsis", no_wrap=not change,
                         width=code if col == "code" else None, min_width=CHANGE_WIDTH if change else None,
                         justify="right" if col in ("fwd", "bwd", "memory") else "left")
    for row in changes["lines"]:
        cells = [row["label"], row["code"], ms(row["forward_us"]), ms(row["backward_us"]),
                 bytes_cell(row["memory_bytes"]) if row["memory_bytes"] is not None else "-",
                 _change(row["since_previous"]), _change(row["since_baseline"])]
        table.add_row(*cells[:len(cols)])
    return table


def _change(shifts: dict[str, Any]) -> Text:
    """The changes beyond noise; "within noise" when there are figures to compare but none is."""
    out = Text()
    for key in ("forward_us", "backward_us", "memory_bytes"):
        s = shifts.get(key)
        if s is None or not s["beyond_noise"]:
            continue
        if out:
            out.append("\n")
        out.append(f"{METRIC_NAMES.get(key, 'mem')} ")
        out.append_text(_signed(s, "us" if key != "memory_bytes" else "bytes"))
    return out if out or not shifts else Text("within noise", style="dim")
