"""Building a Recommendation: the one place rules turn a finding and its estimate into the report's type, and
where a fix's text and line are decided: the plain-PyTorch code and the line capture saw, or under a training
framework (the Hugging Face Trainer, Lightning, accelerate) that framework's own setting at the line where the
user sets it (stepscope.frameworks, the table `stepscope tune` applies too)."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np

from stepscope.advice.context import Context
from stepscope.advice.location import locate
from stepscope.advice.whatif import WORKERS_ASSUMED, Estimate
from stepscope.frameworks import FRAMEWORKS, LOADER_FIXES, call_text, fix_id, keywords
from stepscope.model import report as s

# A fix whose estimated gain is under 1% of the step is not worth the reader's attention.
MIN_GAIN = 1.01

# The plain-PyTorch code in each fix's title (advice/rules/, advice/meter.py): under a framework, its setting instead.
PLAIN_CODE = {
    "dataloader_workers": re.compile(r"DataLoader\(\.\.\., num_workers=\d+(, pin_memory=True)?"
                                     r"(, persistent_workers=True)?\)|num_workers=\d+"
                                     r"|\(num_workers, prefetch_factor\)"),
    "persistent_workers": re.compile(r"DataLoader\(\.\.\., persistent_workers=True\)"),
    "pin_memory": re.compile(r"DataLoader\(\.\.\., pin_memory=True\)"),
    "amp": re.compile(r"torch\.autocast\('cuda', dtype=torch\.\w+\)"),
    "cpu_bf16": re.compile(r"with torch\.autocast\('cpu', dtype=torch\.bfloat16\): around the forward"),
    "torch_compile": re.compile(r"model = torch\.compile\(model\)"),
    "cuda_graphs": re.compile(r"torch\.compile\(model, mode='reduce-overhead'\)"
                              r"|mode='reduce-overhead' in the torch\.compile call already used"),
    "tf32": re.compile(r"torch\.backends\.cuda\.matmul\.allow_tf32 = True or "
                       r"torch\.set_float32_matmul_precision\('high'\)"),
    "fused_optimizer": re.compile(r"e\.g\. torch\.optim\.AdamW\(\.\.\., fused=True\) or foreach=True"),
}


def recommendation(ctx: Context, rec_id: str, title: str, evidence: dict[str, Any], estimate: Estimate,
                   rows: np.ndarray | None = None, location: s.Location | None = None,
                   after: str | None = None) -> s.Recommendation:
    """`location`: the line the fix goes on when capture saw it (the line that built the DataLoader or the
    optimizer); else the user's line behind the host `rows`, when the trace carries source information. `after`:
    the fix the estimate builds on (its gain measured against the step with that fix made)."""
    rec = s.Recommendation(id=rec_id, title=title, evidence=evidence,
                           location=location if location is not None else locate(ctx.facts.trace, rows),
                           estimated_speedup=round(estimate.speedup, 2), estimate=estimate.text, after=after)
    return in_framework(rec, ctx.settings)


def in_framework(rec: s.Recommendation, settings: s.Settings | None) -> s.Recommendation:
    """The fix as the user makes it under the framework that runs the step: `TrainingArguments(bf16=True)` at the
    TrainingArguments( line, not `torch.autocast` at `trainer.train()`; unchanged in a plain loop."""
    fw = settings.framework if settings is not None else None
    spec = FRAMEWORKS.get(fw.name) if fw is not None else None
    if settings is None or fw is None or spec is None:
        return rec
    kw = keywords(fw.name, rec.id, _params(rec))
    if kw is not None:
        batch = settings.dataloader.batch_size if settings.dataloader is not None else None
        setting, location = call_text(fw.config_name or spec.config[0], kw, batch), fw.config or rec.location
    elif fix_id(rec.id) in spec.at_call:
        setting, location = spec.at_call[fix_id(rec.id)], fw.call or rec.location
    elif rec.id in LOADER_FIXES:  # the user's own DataLoader( call: at its line (accelerate's is not the one stepped)
        location = fw.loader or rec.location
        function = location.function if location else None
        title = rec.title + (f" in {function}()" if function and function != "<module>" else "")
        return msgspec.structs.replace(rec, title=title, location=location,
                                       evidence={**rec.evidence, "framework": fw.name})
    else:
        return rec
    pattern = PLAIN_CODE.get(rec.id)
    title = (pattern.sub(lambda m: setting, rec.title, count=1) if pattern is not None and pattern.search(rec.title)
             else f"{rec.title}: {setting}")
    return msgspec.structs.replace(rec, title=title, location=location,
                                   evidence={**rec.evidence, "framework": fw.name, "framework_setting": setting})


def _params(rec: s.Recommendation) -> dict[str, Any]:
    """The fix's settings (as tune's fixes take them) from the recommendation."""
    if rec.id == "dataloader_workers":
        n = rec.evidence.get("suggested_workers")
        return {"num_workers": n if isinstance(n, int) else WORKERS_ASSUMED}
    if rec.id in ("amp", "cpu_bf16"):
        return {"dtype": "bfloat16" if "bfloat16" in rec.title or rec.id == "cpu_bf16" else "float16"}
    if rec.id == "larger_batch":
        return {"factor": int(rec.evidence.get("batch_factor") or 2)}
    return {}
