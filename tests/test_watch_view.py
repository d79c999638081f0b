"""The watch view's contract (live/view.py `View`, what the page and the terminal draw): its field set, struct by
struct, so a field renamed or dropped fails here and the page's script (static/watch.html) is changed with it."""

from __future__ import annotations

import msgspec

from stepscope.live import view as v

FIELDS = {
    v.View: {"version", "program", "baseline_run", "run", "result", "error", "changes", "batch", "notes"},
    v.RunView: {"run_id", "state", "trigger", "progress", "elapsed_s", "first_figures_s", "full_view_s", "first"},
    v.FirstView: {"step_ms", "samples_per_s", "phases", "source"},
    v.ResultView: {"run_id", "folder", "step_ms", "samples_per_s", "steps_per_s", "device", "verdict", "fixes"},
    v.VerdictView: {"id", "title", "share"},
    v.FixView: {"id", "title", "speedup", "where"},
    v.ErrorView: {"run_id", "text"},
    v.ChangesView: {"step", "lines", "phases", "phase_source", "verdict_previous", "verdict_baseline", "noise"},
    v.ShiftView: {"before", "after", "delta", "ratio", "beyond_noise"},
    v.LineView: {"label", "code", "gone", "forward_us", "backward_us", "memory_bytes", "since_previous",
                 "since_baseline"},
    v.PhaseView: {"name", "now_us", "since_previous", "since_baseline"},
    v.NoiseView: {"relative", "basis"},
    v.BatchView: {"batch_size", "basis", "settable", "memory_known", "rows"},
    v.BatchRowView: {"batch_size", "step_us", "samples_per_s", "peak_bytes", "fits", "current", "measured"},
    v.Measured: {"state", "for_run", "error", "step_us", "samples_per_s", "peak_bytes"},
}


def test_every_struct_of_the_view_has_its_fields() -> None:
    for struct, fields in FIELDS.items():
        assert set(struct.__struct_fields__) == fields, struct.__name__
    # Every struct the view is made of is listed: none added without its fields written down here.
    made_of = {c for c in vars(v).values() if isinstance(c, type) and issubclass(c, v.Struct) and c is not v.Struct}
    assert made_of == set(FIELDS)


def test_the_view_is_json_ready_with_the_same_fields() -> None:
    empty = v.View(version=3, program="train.py", baseline_run=None, run=None, result=None, error=None, changes=None,
                   batch=None, notes=["a note"])
    doc = msgspec.json.decode(msgspec.json.encode(empty))
    assert set(doc) == FIELDS[v.View] and doc["notes"] == ["a note"] and doc["version"] == 3
    assert msgspec.to_builtins(empty) == doc
