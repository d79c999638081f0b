"""`--predict GPUS` and `--price` for `analyze`, `run` and `predict`: the options, and the prediction they ask for
with every GPU name checked before any analysis."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from stepscope.errors import StepscopeError

if TYPE_CHECKING:
    from stepscope.predict import PredictRequest


def add_cost_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--price", action="append", default=[], metavar="GPU=USD",
                   help="your price per GPU-hour, e.g. --price h100=2.49,l4=0.8 (overrides the dated table)")
    p.add_argument("--target-host", metavar="RUN_FOLDER", help="a `stepscope run` folder (or its calibration.json) "
                   "from the target machine: its host's measured speed replaces the origin's (docs/predict.md)")
    p.add_argument("--origin", metavar="GPU", help="the GPU the trace was recorded on, when the table does not "
                                                     "know the trace's device name")


def add_predict_option(p: argparse.ArgumentParser) -> None:
    """`--predict GPUS` (with --price, --target-host, --origin) for `analyze` and `run`: a prediction section."""
    p.add_argument("--predict", metavar="GPUS",
                   help="also predict the step time, cost and energy on these GPUs (comma-separated, e.g. h200,l4)")
    add_cost_options(p)


def request_from_args(args: argparse.Namespace, wanted: str | None) -> PredictRequest | None:
    """The prediction the options ask for, with every GPU name checked now (before any analysis)."""
    if wanted is None:
        if getattr(args, "price", None) or getattr(args, "target_host", None) or getattr(args, "origin", None):
            raise StepscopeError("--price, --target-host and --origin need --predict GPUS")
        return None
    # Only with --predict: `stepscope run` reads these options before the user's program runs, which must not
    # load the hardware table and the analyses under predict.
    from stepscope.predict import checked_request

    return checked_request(wanted, prices=args.price, origin=getattr(args, "origin", None),
                           target_host=getattr(args, "target_host", None),
                           samples_per_epoch=getattr(args, "samples_per_epoch", None),
                           steps_per_epoch=getattr(args, "steps_per_epoch", None),
                           host_speed=getattr(args, "host_speed", 1.0))
