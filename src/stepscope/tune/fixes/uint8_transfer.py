"""`uint8_transfer`: images sent to the device as uint8 and converted and normalised there, after the copy (a
quarter of the bytes to collate, pin and copy, and no float work in the DataLoader's workers).

Tried where a loader's dataset transform ends in torchvision's `ToTensor` (+ `Normalize`), or `PILToTensor` / v2
`ToImage` with a float conversion (+ `Normalize`) (tune/points/uint8.py), or is a function of the program ending in
the functional `normalize(to_tensor(x), ...)` (tune/points/uint8_functional.py). In the patch: the transform's list
loses its float conversion and normalisation (`ToTensor()` becomes `PILToTensor()`), or the function returns
`pil_to_tensor(x)`; and after the line that copies the batch to the device: `x = Normalize(...)(x.float().div(255))`
(`x = F.normalize(x.float().div(255), ...)`).
"""

from __future__ import annotations

import ast

from stepscope.tune.edits import FileEdits, Patchwork, mark, named, statement_at
from stepscope.tune.fix import Fix, Params, PlanContext
from stepscope.tune.points import Points
from stepscope.tune.points.uint8_functional import shape_of
from stepscope.tune.wire import Settings, TransformSite


def _why_not(ctx: PlanContext) -> str:
    site = _site(ctx.settings)
    if site is None:
        seen = ctx.settings.transforms[0].chain if ctx.settings.transforms else []
        return ("the dataset's transform does not end in torchvision's ToTensor (+ Normalize)"
                + (f" ({' -> '.join(seen)})" if seen else ""))
    if ctx.device.kind != "cuda" and not ctx.asked:
        return "no copy to a device to shrink on a CPU (--fixes uint8_transfer measures it anyway)"
    return ""


def _site(settings: Settings) -> TransformSite | None:
    return next((t for t in settings.transforms if t.ending), None)


def _install(points: Points, params: Params) -> None:
    points.uint8.active = True


def _write(work: Patchwork, params: Params, settings: Settings, device_kind: str) -> bool:
    site = _site(settings)
    copy = settings.batch_copies[0] if settings.batch_copies else None
    if site is None or copy is None:
        return False
    files = [site.file, *(loader.file for loader in settings.loaders),
             settings.model_site.file if settings.model_site else None]
    cut = next((c for f in dict.fromkeys(files) if (c := _cut(work.file(f), site)) is not None), None)
    edits = work.file(copy.file)
    stmt = statement_at(edits, copy.line) if edits is not None and copy.line else None
    if cut is None or edits is None or not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 \
            or not isinstance(stmt.targets[0], ast.Name):
        return False
    replace, normalize = cut
    for chain_edits, start, end, text in replace:
        chain_edits.replace(start, end, text)
    var = stmt.targets[0].id
    value = f"{var}.float().div(255)"
    edits.insert_after(stmt.end_lineno or stmt.lineno, f"{var} = {normalize.format(value)}{mark('uint8_transfer')}"
                       if normalize else f"{var} = {value}{mark('uint8_transfer')}", stmt.lineno)
    return True


Cut = tuple[list[tuple[FileEdits, int, int, str]], str]  # spans to replace; the normalisation, "{}" the batch


def _cut(edits: FileEdits | None, site: TransformSite) -> Cut | None:
    if site.ending.startswith("to_tensor"):
        return _cut_function(edits, site.chain[0].rsplit(".", 1)[-1] if site.chain else "")
    found = _cut_chain(edits, site.ending)
    if found is None:
        return None
    chain_edits, start, end, text, normalize = found
    return [(chain_edits, start, end, text)], f"{normalize}({{}})" if normalize else ""


def _cut_function(edits: FileEdits | None, name: str) -> Cut | None:
    """The program's transform function: to_tensor becomes pil_to_tensor, normalize goes (tune/points/
    uint8_functional.py recognised the same shape in the trial)."""
    fdef = next((n for n in ast.walk(edits.tree) if isinstance(n, ast.FunctionDef) and n.name == name),
                None) if edits is not None else None
    shape = shape_of(fdef, None) if fdef is not None else None
    if edits is None or shape is None:
        return None
    func = shape.to_tensor.func
    owner = f"{ast.unparse(func.value)}." if isinstance(func, ast.Attribute) else ""
    if not owner:
        _import_after_imports(edits, "from torchvision.transforms.functional import pil_to_tensor")
    renamed = (edits, *edits.span(func), f"{owner}pil_to_tensor")
    n = shape.normalize
    if n is None:
        return [renamed], ""
    if shape.through is not None:  # t = to_tensor(x); return normalize(t, ...): return t
        spans = [renamed, (edits, *edits.span(n), shape.through)]
    else:  # normalize(to_tensor(x), ...) as one expression: pil_to_tensor(x)
        spans = [(edits, *edits.span(n), f"{owner}pil_to_tensor({edits.text(shape.to_tensor.args[0])})")]
    rest = [edits.text(a) for a in n.args[1:]] + [f"{k.arg}={edits.text(k.value)}" for k in n.keywords if k.arg]
    return spans, f"{edits.text(n.func)}({', '.join(['{}', *rest])})"


def _import_after_imports(edits: FileEdits, line: str) -> None:
    imports = [n for n in edits.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    edits.insert_after((imports[-1].end_lineno or imports[-1].lineno) if imports else 0,
                       f"{line}{mark('uint8_transfer')}")


def _cut_chain(edits: FileEdits | None, ending: str) -> tuple[FileEdits, int, int, str, str] | None:
    """The Compose list whose last elements are `ending`'s classes: the span to replace, its new text, and the
    Normalize call's text ('' when there is none)."""
    if edits is None:
        return None
    names = ending.split("+")
    for call in (n for n in ast.walk(edits.tree) if isinstance(n, ast.Call) and named("Compose")(n)):
        elements = call.args[0].elts if call.args and isinstance(call.args[0], (ast.List, ast.Tuple)) else []
        tail = elements[-len(names):] if len(elements) >= len(names) else []
        if not tail or [_called(e) for e in tail] != names:
            continue
        normalize = edits.text(tail[-1]) if names[-1] == "Normalize" else ""
        if names[0] == "ToTensor":  # ToTensor() becomes PILToTensor(), written as the script wrote ToTensor
            func = tail[0].func  # type: ignore[attr-defined]
            owner = f"{ast.unparse(func.value)}." if isinstance(func, ast.Attribute) else ""
            if not owner:  # `from torchvision.transforms import ToTensor`: import PILToTensor beside it
                _import_after_imports(edits, "from torchvision.transforms import PILToTensor")
            return edits, edits.span(tail[0])[0], edits.span(tail[-1])[1], f"{owner}PILToTensor()", normalize
        before = elements[len(elements) - len(names) - 1]  # PILToTensor or ToImage stays: the rest goes
        return edits, edits.span(before)[1], edits.span(tail[-1])[1], "", normalize
    return None


def _called(node: ast.expr) -> str:
    if not isinstance(node, ast.Call):
        return ""
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


FIX = Fix(id="uint8_transfer", code="transforms without ToTensor/Normalize; x = Normalize(...)(x.float().div(255)) "
                                    "after the copy", order=50, needs="loader", tolerance=0.01, install=_install,
          write=_write, why_not=_why_not)
