"""Rich renderables as one notebook output: the same text as the terminal (text/plain) and its colours (text/html)."""

from __future__ import annotations

import io

from rich.console import Console, RenderableType

WIDTH = 110  # columns: a notebook's output area is wider than a terminal's 80
_PRE = ("<pre style=\"font-family: Menlo, 'DejaVu Sans Mono', Consolas, monospace; font-size: 12px; "
        "line-height: 1.25; white-space: pre; overflow-x: auto\">{code}</pre>")


def bundle(parts: list[RenderableType], width: int = WIDTH) -> dict[str, str]:
    """A display bundle for IPython.display.display(..., raw=True)."""
    console = Console(record=True, file=io.StringIO(), width=width, force_terminal=True, force_jupyter=False,
                      color_system="truecolor", highlight=False)
    for part in parts:
        console.print(part)
    text = console.export_text(clear=False)
    return {"text/plain": text, "text/html": console.export_html(inline_styles=True, code_format=_PRE)}
