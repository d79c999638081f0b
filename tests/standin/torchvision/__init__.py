"""A stand-in for torchvision in tests (see ../README.md)."""

from torchvision import transforms

__all__ = ["transforms"]
