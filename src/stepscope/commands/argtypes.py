"""Argument types the verbs share: argparse calls them on the text and reports their message as a usage error."""

from __future__ import annotations

import argparse


def count(text: str) -> int:
    """An integer of 0 or more."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value
