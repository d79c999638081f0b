"""What a tune fix is: everything `stepscope tune` knows about one fix, held in one `Fix` (one module per fix in
`tune/fixes/`), and what the plan tells a fix about the program when it asks whether and how to try it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stepscope.model.report import Report
from stepscope.tune.wire import DeviceInfo, LoaderSite, Settings

if TYPE_CHECKING:
    from stepscope.tune.edits import Patchwork
    from stepscope.tune.points import Points

Params = dict[str, Any]  # one fix's settings in a trial, e.g. {"num_workers": 4}


@dataclass(frozen=True)
class PlanContext:
    """The program as the baseline's run saw it, its diagnosis, the device, and what the user allowed."""

    report: Report | None
    settings: Settings
    device: DeviceInfo
    allow_batch_change: bool = False
    timed_steps: int = 23  # warm-up + timed steps of a run: a loader shorter than this restarts its workers
    asked: bool = False  # this fix was named in --fixes

    @property
    def loader(self) -> LoaderSite | None:
        return self.settings.loaders[0] if self.settings.loaders else None

    def evidence(self, rec_id: str) -> dict[str, Any]:
        """The diagnosis' evidence for a recommendation ({} when it made none)."""
        rec = next((r for r in self.report.recommendations if r.id == rec_id), None) if self.report else None
        return rec.evidence if rec is not None else {}


def _nothing(ctx: PlanContext) -> str:
    return ""


def _no_params(ctx: PlanContext) -> Params:
    return {}


@dataclass(frozen=True)
class Fix:
    id: str  # a recommendation id of stepscope.report/1 (docs/patterns.md), or tune's own
    code: str  # the change as the user would write it
    order: int  # its place in the published walk-through's order: input, copies, batch, host, arithmetic, compile
    install: Callable[[Points, Params], None]  # how a trial's process applies it (sets its part on the points)
    write: Callable[[Patchwork, Params, Settings, str], bool] | None = None  # how it is written in the patch
    needs: str = ""  # what the program must have: "loader" | "model" | "optimizer" | ""
    cuda_only: bool = False
    changes_batch: bool = False  # needs --allow-batch-change
    recommended_only: bool = False  # tried only when the diagnosis recommends it (or --fixes names it)
    together: tuple[str, ...] = ()  # tried as one rung with these
    compiles: bool = False  # its trials compile: longer warm-up and timeout, tried last
    autotunes: bool = False  # its first steps time kernels (reported apart, with compile time)
    tolerance: float | None = None  # numerics: largest relative loss difference in the first steps; None: unguarded
    carries: tuple[str, ...] = ()  # other recommendation ids this fix carries out (amp: cpu_bf16)
    why_not: Callable[[PlanContext], str] = _nothing  # why it cannot or need not be tried here ('' if it can)
    params: Callable[[PlanContext], Params] = _no_params  # its one setting
    options: Callable[[PlanContext], tuple[Params, ...] | str] | None = None  # several settings, tried in turn
    kept_note: Callable[[Params], str] | None = None  # what the user must know when it is kept (in the patch too)

    def settings_to_try(self, ctx: PlanContext) -> tuple[Params, ...] | str:
        """Each setting to try, as {fix id: params}, or why there is none."""
        if self.options is not None:
            return self.options(ctx)
        return ({self.id: self.params(ctx)},)
