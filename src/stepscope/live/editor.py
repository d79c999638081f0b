"""What the editor shows for a capture, as plain values (live/lsp.py turns them into protocol messages): each line's
cost as an inlay hint, the sync lines and a failed run as diagnostics, the verdict as a code lens on the training
loop. Lines are 1-based here, as in the report."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from stepscope.live.compare import Changes, LineDelta, Shift
from stepscope.model.report import Report
from stepscope.units import share_cell, us_cell

# A file counts as a training script when it imports torch and runs a backward pass or an optimizer step.
_TORCH = re.compile(r"^\s*(?:import|from)\s+torch\b", re.MULTILINE)
_TRAINS = re.compile(r"\.backward\(|\.step\(")
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
ZERO_US = 0.5  # a time per step below this is shown as none


@dataclass(frozen=True)
class Hint:
    path: Path
    line: int
    label: str
    tooltip: str


@dataclass(frozen=True)
class Mark:
    """A diagnostic."""

    path: Path
    line: int
    severity: str  # "error" | "warning"
    message: str


@dataclass(frozen=True)
class Lens:
    path: Path
    line: int
    title: str


def is_training_script(text: str) -> bool:
    return bool(_TORCH.search(text) and _TRAINS.search(text))


def resolve(file: str, bases: tuple[Path, ...]) -> Path | None:
    """The report's display path of a user file (relative to the run's working folder or the script's folder, or
    absolute) as an absolute path, when it exists."""
    candidates = [Path(file)] if Path(file).is_absolute() else [base / file for base in bases]
    return next((p.resolve() for p in candidates if p.is_file()), None)


def ms(us: float) -> str:
    return f"{us / 1e3:.3f} ms" if abs(us) < 1e3 else f"{us / 1e3:.2f} ms"


def _change(shift: Shift | None) -> str:
    if shift is None:
        return ""
    return f" ({'+' if shift.delta >= 0 else '-'}{ms(abs(shift.delta))}{'' if shift.beyond_noise else ', noise'})"


def line_hints(changes: Changes, bases: tuple[Path, ...]) -> list[Hint]:
    """One hint per line the current run has: forward and backward time per step, and the change since the
    previous run ("noise" when within the runs' own spread)."""
    hints = []
    for delta in changes.lines:
        path = resolve(delta.file, bases)
        if delta.now is None or path is None:
            continue
        parts = []
        for name, metric, now in (("fwd", "forward_us", delta.now.forward_us),
                                  ("bwd", "backward_us", delta.now.backward_us)):
            shift = delta.since_previous.get(metric)
            if now >= ZERO_US or (shift is not None and shift.before >= ZERO_US):  # a line with no backward: no bwd
                parts.append(f"{name} {ms(now)}{_change(shift)}")
        if parts:
            hints.append(Hint(path, delta.line, " · ".join(parts), _tooltip(delta, changes)))
    return hints


def _tooltip(delta: LineDelta, changes: Changes) -> str:
    lines = ["stepscope: time per step of this line's ops (fwd) and of the autograd of the ops it created (bwd)"]
    for name, shifts in (("previous run", delta.since_previous), ("baseline (the first run)", delta.since_baseline)):
        for metric, s in shifts.items():
            if metric == "memory_bytes":
                continue
            lines.append(f"{metric.removesuffix('_us')} since the {name}: {ms(s.before)} -> {ms(s.after)}, "
                         f"{'beyond' if s.beyond_noise else 'within'} noise ({ms(s.threshold)})")
    lines.append(f"noise from the {changes.noise.basis}")
    return "\n".join(lines)


def sync_marks(report: Report, bases: tuple[Path, ...]) -> list[Mark]:
    """A warning on each line that syncs the host with the device (on a CPU run: reads a scalar that would)."""
    marks = []
    for s in report.lines.syncs if report.lines else []:
        path = resolve(s.file, bases) if s.file else None
        if path is None or s.line is None:
            continue
        marks.append(Mark(path, s.line, "warning",
                          f"host-device sync: {s.op} via {s.via}, {s.count_per_step:g} per step, "
                          f"{us_cell(s.time_us_per_step)} per step (stepscope)"))
    return marks


def exception_line(log: str) -> str | None:
    """The last traceback's closing line in the run's output ("RuntimeError: planted failure")."""
    at = log.rfind("Traceback (most recent call last):")
    lines = log[at:].splitlines()[1:] if at >= 0 else []
    return next((line.strip() for line in lines if line.strip() and not line[0].isspace()), None)


def failure(error: str | None, report: Report | None, log: str) -> str | None:
    """Why the run failed, in one line, or None: the engine's reason, else the program's exception when it raised
    after the window began (the capture still wrote a report of the steps before)."""
    if error or report is None:
        return error or "no report"
    if report.run is not None and report.run.status in ("failed", "interrupted"):
        return exception_line(log) or f"the program {report.run.status} (exit code {report.run.exit_code})"
    return None


def failure_mark(error: str, log: str, script: Path | None, bases: tuple[Path, ...]) -> Mark | None:
    """The failed run's one line, on the line of the user's code that raised (the traceback's last frame in a file
    of the workspace), else on the script's first line (None: no script known, as with `-m module`)."""
    for file, line in reversed(_FRAME.findall(log)):
        path = resolve(file, bases)
        if path is not None and "site-packages" not in path.parts:
            return Mark(path, int(line), "error", f"stepscope: the run failed: {error}")
    return Mark(script, 1, "error", f"stepscope: the run failed: {error}") if script else None


def training_loop_line(source: str) -> int:
    """The line of the innermost loop around a backward pass (else an optimizer step); 1 when there is none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return 1
    for method in ("backward", "step"):
        loops = [node for node in ast.walk(tree) if isinstance(node, (ast.For, ast.While, ast.AsyncFor))
                 and any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == method
                         for c in ast.walk(node))]
        if loops:
            return max(loops, key=lambda n: n.lineno).lineno  # nested loops: the last one to start is innermost
    return 1


def verdict_lens(report: Report, changes: Changes, script: Path, source: str) -> Lens:
    s = report.summary
    parts = []
    if report.patterns:
        p = report.patterns[0]
        parts.append(f"{p.id.replace('_', ' ')} ({share_cell(p.share)} of each step)")
    else:
        parts.append("no bottleneck pattern found")
    if s.step_time_us:
        step = f"step {us_cell(s.step_time_us)}"
        if (prev := changes.step.get("previous")) is not None and prev.ratio:
            step += f" ({(prev.ratio - 1) * 100:+.0f}% since the last run{'' if prev.beyond_noise else ', noise'})"
        parts.append(step)
    if s.samples_per_s:
        parts.append(f"{s.samples_per_s:,.0f} samples/s")
    if report.recommendations:
        title = report.recommendations[0].title
        parts.append(f"fix: {title if len(title) <= 80 else title[:79] + '…'}")
    return Lens(script, training_loop_line(source), "stepscope: " + " · ".join(parts))
