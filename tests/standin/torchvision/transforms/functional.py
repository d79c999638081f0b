"""torchvision.transforms.functional's arithmetic, for uint8 numpy images (H x W x C)."""

from __future__ import annotations

import numpy as np
import torch


def pil_to_tensor(pic: np.ndarray) -> torch.Tensor:
    """An 8-bit image as a uint8 C x H x W tensor."""
    array = pic[:, :, None] if pic.ndim == 2 else pic
    return torch.from_numpy(np.ascontiguousarray(array)).permute(2, 0, 1).contiguous()


def to_tensor(pic: np.ndarray) -> torch.Tensor:
    """As torchvision: HWC -> CHW, and an 8-bit image divided by 255 as float32."""
    img = pil_to_tensor(pic)
    return img.to(dtype=torch.get_default_dtype()).div(255)


def convert_image_dtype(image: torch.Tensor, dtype: torch.dtype = torch.float) -> torch.Tensor:
    if image.dtype == torch.uint8 and dtype.is_floating_point:
        return image.to(dtype).div(255)
    return image.to(dtype)


def normalize(tensor: torch.Tensor, mean: list[float], std: list[float], inplace: bool = False) -> torch.Tensor:
    """As torchvision: (tensor - mean) / std over the channel dimension (..., C, H, W)."""
    if not inplace:
        tensor = tensor.clone()
    m = torch.as_tensor(mean, dtype=tensor.dtype, device=tensor.device).view(-1, 1, 1)
    s = torch.as_tensor(std, dtype=tensor.dtype, device=tensor.device).view(-1, 1, 1)
    return tensor.sub_(m).div_(s)


def resize(pic: np.ndarray, size: int) -> np.ndarray:
    """Nearest-neighbour to size x size (torchvision's resizes the shorter side; the images here are square)."""
    rows = np.arange(size) * pic.shape[0] // size
    cols = np.arange(size) * pic.shape[1] // size
    return pic[rows][:, cols]
