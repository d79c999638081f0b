"""What the hardware can do: a table of GPUs (dense peaks per dtype, memory, bandwidth, SMs, clocks, TDP, each
figure with its source), interconnects and dated cloud prices, as data files in this package; the user's
own file adds rows or replaces figures; and the "achievable" column measured on a device.

    from stepscope.hardware import load_table, achievable_for
    table = load_table()
    match = table.lookup("NVIDIA H100 80GB HBM3")        # device name as torch or a trace reports it
    spec = match.spec                                      # GpuSpec: h100-sxm
    spec.peak_flops("bf16")                               # 9.895e14 FLOP/s, dense, per device
    table.sources[spec.peak("bf16").source].title         # where that figure comes from
    achievable_for("NVIDIA H200")                         # measured, or None: datasheet only

See docs/hardware.md for the table, its sources and the user file.
"""

from __future__ import annotations

from stepscope.hardware.achievable import Achievable, achievable_for, cache_dir, save_achievable
from stepscope.hardware.rows import (
    DTYPES,
    Cell,
    GpuMatch,
    GpuSpec,
    Interconnect,
    Peak,
    Price,
    Source,
    dtype_key,
)
from stepscope.hardware.table import HardwareTable, load_table, lookup_gpu, normalize_name
from stepscope.hardware.userfile import default_user_file

__all__ = [
    "DTYPES",
    "Achievable",
    "Cell",
    "GpuMatch",
    "GpuSpec",
    "HardwareTable",
    "Interconnect",
    "Peak",
    "Price",
    "Source",
    "achievable_for",
    "cache_dir",
    "default_user_file",
    "dtype_key",
    "load_table",
    "lookup_gpu",
    "normalize_name",
    "save_achievable",
]
