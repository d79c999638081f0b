"""Step detection with no change to the program: the optimizer steps, backward passes, DataLoader fetches and model
calls the instrumentation layer (capture/meter/hooks.py) relays.

Each relay reports a completed step to the session, which keeps the strongest source; weaker sources are unsubscribed
as soon as a stronger one leads, and all of them once the capture is over. The backward relay stays while the session
may need it (it counts the backward passes of a gradient-accumulation cycle). The layer pins the main DataLoader's
dataset, the optimizer and the model once for both; these hooks add only what the settings reader needs beyond them:
every DataLoader made (the main one's object), the iterators started, and the line of the user's code that built each
loader and optimizer. Nothing here hooks the layer's points again: with no meter running, `install()` starts a meter
of its own (no folder, no live line) to get the layer.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from stepscope.capture.arbiter import PRIORITY
from stepscope.capture.batch import batch_bytes_of, batch_size_of
from stepscope.capture.guard import PID
from stepscope.capture.meter import StepMeter
from stepscope.capture.meter.hooks import MeterHooks
from stepscope.capture.sites import Sites
from stepscope.patches import Patches


class Steps(Protocol):
    """What the step hooks tell of the steps: a capture session (capture/session.py) or tune's clock (tune/clock.py),
    each deciding the leading source with capture/arbiter.py's StepArbiter."""

    batch_size_source: str | None

    def mark(self, source: str) -> None: ...
    def set_batch_size(self, size: int | None, source: str) -> None: ...


class StepHooks:
    """Subscribes one session to the instrumentation layer; `remove()` unsubscribes it and undoes its own patches."""

    def __init__(self, session: Steps) -> None:
        self.session = session
        self.pid = os.getpid()
        self.sites = Sites()
        self._loaders: dict[int, weakref.ref] = {}  # id(dataset) -> the DataLoader iterating it
        self.iterators_started = 0  # new iterators of the main DataLoader (epochs with worker start-ups)
        self.batch_bytes: int | None = None  # the main DataLoader's first batch's tensors, in bytes
        self._patches = Patches()  # stepscope/patches.py: owned or inherited, restored only if still on top
        # The meter whose layer relays the steps, kept after remove(): what its state pinned can still be asked.
        self._meter: StepMeter | None = None
        self._own_meter = False  # started here: no meter ran
        self._subscribed = False
        self._model: weakref.ref | None = None

    # -- install / remove ------------------------------------------------------------------------------

    def install(self, meter: StepMeter | None = None) -> None:
        """`meter`: an installed step meter, whose layer then relays the steps; without one a meter of its own."""
        import torch

        if meter is None or meter.layer is None:
            meter, self._own_meter = StepMeter(None, live=False, syncs=False).install(), True
        self._meter = meter
        layer = meter.layer
        assert layer is not None
        session = self.session
        layer.subscribe(relay_optimizer=session.mark, relay_backward=session.mark, relay_dataloader=session.mark,
                        relay_batch=self._on_batch, relay_forward=session.mark, on_model=self._on_model)
        self._subscribed = True
        self._patch(torch.utils.data.DataLoader, "_get_iterator", self._iterator_wrapper)
        self._patch(torch.utils.data.DataLoader, "__init__", self.sites.recorder)
        self._patch(torch.optim.Optimizer, "__init__", self.sites.recorder)

    def drop_weaker_than(self, leader: str) -> None:
        """Unsubscribe the relays a `leader` makes useless ('' when the window is over: all of them)."""
        layer = self._layer()
        if layer is None:
            return
        rank = PRIORITY.get(leader, -1)
        if rank < PRIORITY["optimizer"]:
            layer.subscribe(relay_optimizer=None)
        if not leader:
            layer.subscribe(relay_backward=None)
        if rank < PRIORITY["dataloader"]:
            layer.subscribe(relay_dataloader=None, relay_batch=None)
        if rank < PRIORITY["forward"]:
            layer.subscribe(relay_forward=None, on_model=None)

    def remove(self) -> None:
        meter = self._meter
        if meter is not None and self._subscribed:
            self._subscribed = False
            if meter.layer is not None:
                meter.layer.subscribe(**dict.fromkeys(SUBSCRIBED))
            if self._own_meter:
                meter.remove()
        self._patches.undo()  # someone else's wrapper over ours keeps ours, inert

    def _patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        self._patches.wrap(owner, name, make)

    @property
    def active(self) -> bool:
        return bool(self._patches) and PID[0] == self.pid

    # -- what the settings reader needs (the layer pins the main dataset, the optimizer and the model) -----

    def _layer(self) -> MeterHooks | None:
        return self._meter.layer if self._meter is not None and self._subscribed else None

    def main_loader(self) -> Any:
        """The DataLoader whose batches are the steps (the first to yield), if it is still alive."""
        pinned = self._main_dataset()
        ref = self._loaders.get(id(pinned)) if pinned is not None else None
        return ref() if ref is not None else None

    # Read from the layer's state, which outlives the hooks: asked after remove(), they still answer.
    def _main_dataset(self) -> Any:
        state = self._meter.state if self._meter is not None else None
        return state.dataset() if state is not None and state.dataset is not None else None

    def pinned_optimizer(self) -> Any:
        state = self._meter.state if self._meter is not None else None
        return state.optimizer() if state is not None and state.optimizer is not None else None

    def known_model(self) -> Any:
        if self._model is not None:
            return self._model()
        layer = self._meter.layer if self._meter is not None else None
        return layer.known_model() if layer is not None else None

    # -- relayed ---------------------------------------------------------------------------------------

    def _on_batch(self, batch: Any) -> None:
        """A batch of the main loader: its batch size, until one as strong as the loader's is known, and the first
        batch's bytes (what a batch's crossing from a worker costs: advice/crossing.py)."""
        session = self.session
        if session.batch_size_source in (None, "model input"):
            session.set_batch_size(batch_size_of(batch), "dataloader")
        if self.batch_bytes is None:
            self.batch_bytes = batch_bytes_of(batch) or None
        layer = self._layer()
        if session.batch_size_source not in (None, "model input") and layer is not None:
            layer.subscribe(relay_batch=None)  # known: no call a step for it

    def _on_model(self, model: Any, args: Any) -> None:
        self._model = weakref.ref(model)
        self.session.set_batch_size(batch_size_of(args), "model input")

    # -- the DataLoader's iterators ----------------------------------------------------------------------

    def _iterator_wrapper(self, original: Any) -> Any:
        hooks = self

        @functools.wraps(original)
        def _get_iterator(loader: Any) -> Any:  # a new iterator: a new epoch, workers started again
            if hooks.active:
                try:
                    hooks._loaders[id(loader.dataset)] = weakref.ref(loader)
                    main = hooks._main_dataset()
                    if main is None or loader.dataset is main:
                        hooks.iterators_started += 1
                except TypeError:
                    pass
            return original(loader)

        return _get_iterator


# What a session subscribes to (all unsubscribed at its end).
SUBSCRIBED = ("relay_optimizer", "relay_backward", "relay_dataloader", "relay_batch", "relay_forward", "on_model")
