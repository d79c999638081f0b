"""An 8-bit image as a uint8 CHW tensor: what ToTensor does, without the float conversion (the uint8_transfer fix's
worker side, for transform chains and for transform functions alike)."""

from __future__ import annotations

from typing import Any


def to_uint8_chw(picture: Any) -> Any:
    """What ToTensor does to an 8-bit image, without the float conversion: a uint8 CHW tensor."""
    import numpy as np
    import torch

    if isinstance(picture, torch.Tensor) and picture.dtype == torch.uint8:
        return picture
    mode = getattr(picture, "mode", None)
    if mode is not None and mode not in ("L", "RGB", "RGBA", "CMYK", "YCbCr", "LAB", "HSV", "P"):
        raise ValueError(f"a {mode} image is not 8-bit")
    array = np.asarray(picture)
    if array.dtype != np.uint8:
        raise ValueError(f"a {array.dtype} image is not 8-bit")
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(np.ascontiguousarray(array)).permute(2, 0, 1).contiguous()
