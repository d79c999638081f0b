"""The patch under a training framework: a fix the framework has a setting for (stepscope.frameworks) is that
setting, set in the user's configuration call (`TrainingArguments(..., dataloader_num_workers=4)`, Lightning's
`Trainer(..., precision="bf16-mixed")`, `Accelerator(..., mixed_precision="bf16")`) at the site the trials recorded;
under accelerate, the DataLoader fixes go on the user's own DataLoader( call, not on prepare()'s copy."""

from __future__ import annotations

from typing import Any

import msgspec

from stepscope.frameworks import FRAMEWORKS, LOADER_FIXES, Scaled, keywords, value_text
from stepscope.tune.edits import Patchwork, keyword_at, named
from stepscope.tune.fixes import FIXES
from stepscope.tune.wire import Settings


def framework_write(work: Patchwork, fix_id: str, params: dict[str, Any], settings: Settings,
                    device_kind: str) -> bool | None:
    """Whether the fix was placed through the framework; None: no framework setting for it (the fix's own write)."""
    site = settings.framework
    if site is None or site.name not in FRAMEWORKS:
        return None
    kw = keywords(site.name, fix_id, params)
    if kw is None:
        fix = FIXES.get(fix_id)
        if fix_id in LOADER_FIXES and site.loader is not None and fix is not None and fix.write is not None:
            loaders = [msgspec.structs.replace(loader, file=site.loader.file, line=site.loader.line)
                       for loader in settings.loaders[:1]]
            return fix.write(work, params, msgspec.structs.replace(settings, loaders=loaders), device_kind)
        return None
    if site.config is None:
        return False
    match = named(*{site.config_name or FRAMEWORKS[site.name].config[0], *FRAMEWORKS[site.name].config})
    note = FIXES[fix_id].kept_note if fix_id in FIXES else None
    comment = f"stepscope tune: {fix_id}; {note(params)}" if note is not None else ""
    placed = True
    for name, value in kw.items():
        if isinstance(value, Scaled):  # the value there times the factor, else the framework's default times it
            done = keyword_at(work, [site.config], name, None, match, scale=value.factor, comment=comment) or \
                keyword_at(work, [site.config], name, value_text(value), match, comment=comment)
        else:
            done = keyword_at(work, [site.config], name, value_text(value), match, comment=comment)
        placed = placed and done
    return placed
