"""Which events belong to which breakdown category: name rules kept in one place."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

import numpy as np

from stepscope.analysis.steps import COLLECTIVE_OP, PROFILER_STEP
from stepscope.trace.growing import mapped_empty
from stepscope.trace.model import Kind, Trace

COLLECTIVE_KERNEL = re.compile(r"^(void )?(nccl|rccl|ncclDevKernel|ncclKernel)", re.IGNORECASE)
# Host ops whose time is communication (DESIGN.md: `nccl:*`, `gloo:*` collectives and their peers).
# Ops that launch collective kernels; their kernels are communication even when oddly named.
COLLECTIVE_LAUNCHER = re.compile(r"^(nccl|gloo|rccl|hccl|mpi|ucc):|^c10d::|^record_param_comms$")
DATALOADER = re.compile(r"^enumerate\(DataLoader\)#.*__next__|^enumerate\(DataPipe\)#")

BREAKDOWN_CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other")


def is_collective_kernel(name: str) -> bool:
    return COLLECTIVE_KERNEL.match(name) is not None


def category_masks(trace: Trace, step_source: str) -> Mapping[str, np.ndarray]:
    """Row masks for each breakdown category but 'other' (the remainder), before exclusivity, read-only. The
    categories never share a row, so the trace keeps one int8 code per row (computed once: the breakdown, the
    advice signals and the timeline all ask) and each mask is made from it when asked for."""
    return _Masks(trace.derived(("category_codes", step_source), lambda: _category_codes(trace, step_source)))


class _Masks(Mapping[str, np.ndarray]):
    def __init__(self, codes: np.ndarray) -> None:
        self._codes = codes

    def __getitem__(self, name: str) -> np.ndarray:
        mask = self._codes == _CODE[name]
        mask.flags.writeable = False
        return mask

    def __iter__(self) -> Iterator[str]:
        return iter(_CODE)

    def __len__(self) -> int:
        return len(_CODE)


_CODE = {name: i + 1 for i, name in enumerate(BREAKDOWN_CATEGORIES[:-1])}  # 0: none of them


def _category_codes(trace: Trace, step_source: str) -> np.ndarray:
    """Each row's category code; each category written as soon as its mask is made, and the mask let go (on a
    trace of gigabytes every whole-table mask is MB: a dozen held together were the breakdown's peak)."""
    ev = trace.events
    codes = mapped_empty(len(ev), np.int8)  # kept with the trace: out of the heap
    codes.fill(0)
    kernel = ev.kind == Kind.KERNEL
    host = ev.of_kind(Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON)
    # A collective kernel by its own name, or through its launching op (the TensorBoard plugin's way,
    # which alone misses NCCL kernels launched outside any recorded op).
    launchers = host & trace.names_where(lambda s: COLLECTIVE_LAUNCHER.match(s) is not None)
    collective_ids = ev.external_id[launchers]
    del launchers
    collective_ids = collective_ids[collective_ids >= 0]
    collective_kernel = kernel & trace.names_where(is_collective_kernel)
    rows = np.flatnonzero(kernel & (ev.external_id >= 0))  # isin on the kernels alone: it sorts what it is given
    if len(rows) and len(collective_ids):
        collective_kernel[rows[np.isin(ev.external_id[rows], collective_ids)]] = True
    del rows, collective_ids
    # Disjoint: kinds apart, collectives and the loader out of kernel and cpu_exec.
    kernel &= ~collective_kernel
    codes[kernel] = _CODE["kernel"]
    del kernel
    collective_op = host & trace.names_where(lambda s: COLLECTIVE_OP.match(s) is not None)
    collective_kernel |= collective_op
    codes[collective_kernel] = _CODE["communication"]
    del collective_kernel
    for name, kind in (("memcpy", Kind.MEMCPY), ("memset", Kind.MEMSET), ("runtime", Kind.RUNTIME)):
        codes[ev.kind == kind] = _CODE[name]
    dataloader = host & trace.names_where(lambda s: DATALOADER.match(s) is not None)
    codes[dataloader] = _CODE["dataloader"]
    host &= ~dataloader
    del dataloader
    host &= ~collective_op
    del collective_op
    host &= ~trace.names_where(lambda s: PROFILER_STEP.match(s) is not None)  # the step ranges
    if step_source.startswith("range "):  # the user's step ranges are the step itself, not CPU work
        step_name = step_source[len("range "):]
        host &= ~trace.names_where(lambda s: s == step_name)
    codes[host] = _CODE["cpu_exec"]
    codes.flags.writeable = False
    return codes
