"""The package version, in a module of its own so that capture can name it without loading the analysis."""

__version__ = "0.1.0"
