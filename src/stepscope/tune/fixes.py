"""The fixes `stepscope tune` can apply from outside a program, and those that need a code change.

Ids are the recommendation ids of `stepscope.report/1` (docs/patterns.md); `channels_last` and
`cudnn_benchmark` are tune's own additions. Each fix applied from outside has one installer in `apply.py`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FixInfo:
    id: str
    code: str  # the change, as the user would write it
    needs: str  # what the program must have: "loader", "model", "optimizer", "zero_grad" or ""
    cuda_only: bool = False
    changes_batch: bool = False


FIXES: dict[str, FixInfo] = {f.id: f for f in (
    FixInfo("dataloader_workers", "DataLoader(..., num_workers=N)", "loader"),
    FixInfo("persistent_workers", "DataLoader(..., persistent_workers=True)", "loader"),
    FixInfo("pin_memory", "DataLoader(..., pin_memory=True)", "loader", cuda_only=True),
    FixInfo("non_blocking_copy", "x.to(device, non_blocking=True)", "", cuda_only=True),
    FixInfo("set_to_none", "optimizer.zero_grad(set_to_none=True)", "zero_grad"),
    FixInfo("fused_optimizer", "torch.optim.AdamW(..., fused=True)", "optimizer", cuda_only=True),
    FixInfo("tf32", "torch.backends.cuda.matmul.allow_tf32 = True", "", cuda_only=True),
    FixInfo("cudnn_benchmark", "torch.backends.cudnn.benchmark = True", "model", cuda_only=True),
    FixInfo("amp", "with torch.autocast(device_type, dtype=torch.bfloat16): loss = ...", "model"),
    FixInfo("channels_last", "model = model.to(memory_format=torch.channels_last)", "model"),
    FixInfo("torch_compile", "model.compile()  # or model = torch.compile(model)", "model"),
    FixInfo("cuda_graphs", "model.compile(mode='reduce-overhead')", "model", cuda_only=True),
    FixInfo("larger_batch", "DataLoader(..., batch_size=2 * batch_size)  # and rescale the learning rate", "loader",
            changes_batch=True),
)}

# Without an estimate from the diagnosis, fixes are tried in the order of the published ResNet-18 walk-through:
# input first, then copies, the host's per-step overhead, the arithmetic, and the batch last.
ORDER = ("dataloader_workers", "persistent_workers", "pin_memory", "non_blocking_copy", "set_to_none",
         "fused_optimizer", "tf32", "cudnn_benchmark", "amp", "channels_last", "torch_compile", "cuda_graphs",
         "larger_batch")

# Tried only when the diagnosis recommends them (or they are asked for): each pays only for a cause the trace
# must show (a DataLoader wait, float32 matmuls on tensor-core hardware, launch gaps), and costs otherwise.
RECOMMENDED_ONLY = ("dataloader_workers", "tf32", "cuda_graphs")

# Tried as one rung: a non-blocking copy is only asynchronous from pinned memory.
TOGETHER = {"pin_memory": ("pin_memory", "non_blocking_copy"), "non_blocking_copy": ("pin_memory", "non_blocking_copy")}

# Recommendations no patch from outside can carry out: listed with the edit to make, never tried.
CODE_CHANGE = {
    "remove_sync": "keep values on the device and read them every N steps (no .item(), .cpu() or print(tensor) "
                   "per step)",
    "uint8_transfer": "load images as uint8, copy them to the device, then convert and normalise there",
    "offload_cpu_work": "move the host computation to the device, or vectorise it",
    "overlap_communication": "let collectives overlap the backward pass (DDP buckets, no_sync() with accumulation)",
}


def known_ids() -> list[str]:
    return sorted({*FIXES, *CODE_CHANGE})
