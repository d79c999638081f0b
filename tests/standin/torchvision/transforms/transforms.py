"""torchvision.transforms' classes that tune's uint8_transfer knows, computing as torchvision's do."""

from __future__ import annotations

from typing import Any

import torch

from torchvision.transforms import functional as F


class Compose:
    def __init__(self, transforms: list[Any]) -> None:
        self.transforms = transforms

    def __call__(self, img: Any) -> Any:
        for t in self.transforms:
            img = t(img)
        return img


class Resize:
    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self, img: Any) -> Any:
        return F.resize(img, self.size)


class ToTensor:
    def __call__(self, pic: Any) -> torch.Tensor:
        return F.to_tensor(pic)


class PILToTensor:
    def __call__(self, pic: Any) -> torch.Tensor:
        return F.pil_to_tensor(pic)


class ConvertImageDtype:
    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return F.convert_image_dtype(image, self.dtype)


class Normalize:
    def __init__(self, mean: list[float], std: list[float], inplace: bool = False) -> None:
        self.mean, self.std, self.inplace = mean, std, inplace

    def __call__(self, tensor: torch.Tensor) -> torch.Tensor:
        return F.normalize(tensor, self.mean, self.std, self.inplace)
