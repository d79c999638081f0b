"""What `report` and `diff` accept: a stepscope.report/1 JSON file, a run folder holding report.json, or
traces (files or rank folders) to analyse."""

from __future__ import annotations

from pathlib import Path

import msgspec

from stepscope.errors import StepscopeError
from stepscope.model.report import Report, from_json
from stepscope.model.runfile import RunFileError, load
from stepscope.model.runfolder import REPORT_JSON, TELEMETRY, TRACE
from stepscope.model.telemetry import TelemetryReport, telemetry_problem


class _Probe(msgspec.Struct):
    schema: str | None = None


def is_report_file(path: Path) -> bool:
    """A JSON file whose top-level `schema` names a stepscope report (gzipped files are traces)."""
    return _probe(path) is True


def _probe(path: Path) -> bool | str:
    """True for a stepscope report, False for other JSON or no JSON file, else why it cannot be read."""
    if not path.is_file() or path.suffix != ".json":
        return False
    try:
        probe = msgspec.json.decode(path.read_bytes(), type=_Probe)
    except msgspec.ValidationError:
        return False
    except msgspec.DecodeError as exc:
        if "truncated" in str(exc):
            return "not valid JSON: it ends early, as a file cut short does"
        return f"not valid JSON: {str(exc).removeprefix('JSON is malformed: ')}"
    except OSError as exc:
        return f"cannot read it: {exc.strerror or exc}"
    except RecursionError:
        return "JSON nested too deeply"
    except UnicodeDecodeError:
        return "bytes that are not UTF-8"
    return (probe.schema or "").startswith("stepscope.report/")


def load_report(path: str | Path, *, traces_allowed: bool = True, step_range: str | None = None,
                batch_size: int | None = None) -> Report:
    """The report at `path`, read back as it was written, or built from the traces there."""
    path = Path(path)
    if not path.exists():
        raise StepscopeError(f"{path}: no such file or folder")
    source = path / REPORT_JSON if path.is_dir() and (path / REPORT_JSON).is_file() else path
    found = _probe(source)
    if isinstance(found, str) and (source.name == REPORT_JSON or not traces_allowed):
        trace = source.parent / TRACE
        hint = f"analyse the run's trace again: stepscope analyze {trace}" if trace.is_file() else None
        raise StepscopeError(f"{source}: not a readable stepscope report ({found})", hint=hint)
    if found is True:
        try:
            return from_json(source.read_bytes())
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError) as exc:
            raise StepscopeError(f"{source}: not a readable stepscope report ({exc})") from None
    if not traces_allowed:
        raise StepscopeError(f"{path}: neither a stepscope report (.json) nor a run folder holding {REPORT_JSON}",
                             hint="give report.json, its run folder, or use `stepscope analyze` on traces")
    # Only traces need the pipeline: `stepscope report` and `diff` on saved reports load none of the analyses.
    from stepscope.pipeline import analyze

    return analyze(path, step_range=step_range, batch_size=batch_size)


def load_telemetry(path: str | Path) -> TelemetryReport | None:
    """The run folder's telemetry (stepscope.telemetry/1) beside its report, None when there is none or it cannot
    be read as one (the report stands without it)."""
    path = Path(path)
    try:
        return load((path if path.is_dir() else path.parent) / TELEMETRY, TelemetryReport, telemetry_problem)
    except RunFileError:
        return None
