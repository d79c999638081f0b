"""The step meter's per-step hooks in C (_native.c): the types a checker sees for the built extension. Keep in step
with _native.c's module functions (`methods[]`) and the State's members (`state_members[]`)."""

from collections.abc import Callable
from typing import Any, final

@final
class State:
    """What the C hooks keep between calls (the Python hooks keep the same in hooks.HookState)."""

    device: Any  # None or the DeviceTimer (its mark(phase))
    relay_backward: Callable[[int], object] | None  # the step detection's mark(source)
    relay_optimizer: Callable[[int], object] | None
    relay_dataloader: Callable[[str], object] | None  # mark('dataloader'): a fetch of the main loader after a batch
    relay_batch: Callable[[object], object] | None  # given each batch the main loader yields (its batch size)
    around_fetch: Callable[[Callable[..., Any], object], object] | None  # the fetch in its place, inside its phase
    relay_forward: Any  # read by the Python model hooks (the forward stays Python): kept here, one state
    on_model: Any
    dataset: Callable[[], object] | None  # returns the main dataset (a weakref)
    optimizer: Callable[[], object] | None  # a weakref to the first optimizer to step
    thread: int  # the thread ident the hooks count steps on
    pid: int  # the process that made the state (a forked child resets its hooks)
    due: int
    mark_due: int
    muted: int  # a bit per step source whose marks are not kept
    batch_pending: int
    optimizer_depth: int
    other_depth: int

    def __new__(cls, events: list[Any], catch_up: Callable[..., object], pin: Callable[[object, object], object],
                other_thread_step: Callable[[object], object], folded: Callable[[], bool] | None = None,
                flags: object = None) -> State: ...

@final
class Wrapper:
    """A patched callable: calls `original`, its time charged to a phase."""

    original: Callable[..., Any]
    __dict__: dict[str, Any]

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

@final
class OptimizerHook:
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

def timed(state: State, original: Callable[..., Any], phase: int, source: int = -1, marks_device: bool = False,
          relays: bool = False) -> Wrapper:
    """`original` charged to `phase`; with `source`, each call marks that step source."""

def data_next(state: State, original: Callable[..., Any], phase: int) -> Wrapper:
    """A DataLoader iterator's __next__, its wait charged to `phase`."""

def optimizer_hooks(state: State) -> tuple[OptimizerHook, OptimizerHook]:
    """The (pre, post) optimizer step hooks."""

def forward_hooks(state: State) -> tuple[OptimizerHook, OptimizerHook]:
    """(before(first=False), after) of the model's forward."""

def now() -> int:
    """The hooks' clock, in ns (time.perf_counter_ns's)."""
