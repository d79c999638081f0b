"""Trainer integrations: a Lightning callback and a Hugging Face TrainerCallback, each a thin layer over
the Python API (`stepscope.api.Profile`). Import the submodule of the library you use."""
