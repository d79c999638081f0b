"""Kernel names short enough to read: C++ template arguments and parameter lists elided
('void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, ...> >(int, ...)' ->
'at::native::vectorized_elementwise_kernel<…>(…)'). The full name stays in the JSON and in the page's hover."""

from __future__ import annotations

ANONYMOUS = "(anonymous namespace)"


def short_kernel(name: str) -> str:
    """The name with its template arguments and parameter lists elided, a leading `void` dropped; a name without
    either is returned as it is. Unbalanced brackets leave the name whole (it is not C++)."""
    if name.startswith("_ZN"):
        return _mangled(name)
    if ("<" not in name and "(" not in name) or not ("::" in name or name.startswith("void ")):
        return name  # not a C++ signature: nothing to elide (a name from a trace is shown as it is)
    out: list[str] = []
    i, n = 0, len(name)
    while i < n:
        c = name[i]
        if name.startswith(ANONYMOUS, i):
            out.append(ANONYMOUS)
            i += len(ANONYMOUS)
            continue
        if c in "<(" and not _operator_call(name, i):
            end = _matching(name, i)
            if end is None:
                return name
            out.append("<…>" if c == "<" else "(…)")
            i = end + 1
            continue
        out.append(c)
        i += 1
    short = "".join(out).strip()
    return short.removeprefix("void ").strip() or name


def _mangled(name: str) -> str:
    """The nested name of an Itanium-mangled symbol, '_ZN17cutlass__5x_cudnn6KernelINS_4conv...' ->
    'cutlass__5x_cudnn::Kernel<…>(…)'; anything else of the mangling is left unread, the name kept whole when
    it does not parse."""
    parts, i = [], 3
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        size = int(name[i:j])
        if j + size > len(name):
            return name
        parts.append(name[j:j + size])
        i = j + size
    if not parts:
        return name
    return "::".join(parts) + ("<…>" if name[i:i + 1] == "I" else "") + "(…)"


def _operator_call(name: str, i: int) -> bool:
    """`operator()`, `operator<` and their kind: part of the name, not a list to elide."""
    return name[max(0, i - 8):i].endswith("operator")


def _matching(name: str, start: int) -> int | None:
    """The index of the bracket closing the one at `start`, counting both kinds; None when it is not closed."""
    depth = 0
    for j in range(start, len(name)):
        c = name[j]
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
            if depth == 0:
                return j
    return None
