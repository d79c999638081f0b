from torchvision.transforms import functional
from torchvision.transforms.transforms import Compose, ConvertImageDtype, Normalize, PILToTensor, Resize, ToTensor

__all__ = ["Compose", "ConvertImageDtype", "Normalize", "PILToTensor", "Resize", "ToTensor", "functional"]
