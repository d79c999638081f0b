"""stepscope: find out why a PyTorch job is slow, which fix to apply, and where."""

__version__ = "0.1.0"
