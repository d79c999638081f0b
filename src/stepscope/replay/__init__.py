"""The step as a dependency graph, replayed: as recorded (it must reproduce the trace), with the profiler's
calibrated host cost taken out (the job as it runs), with a fix applied (what-if), on another GPU (predict).

Below advice and predict, above analysis: the verdict, the estimates and predict share this one model of the
step rather than each modelling it."""

from stepscope.replay.blocking import blocking_calls
from stepscope.replay.engine import replay
from stepscope.replay.host_clock import HostCost

__all__ = ["HostCost", "blocking_calls", "replay"]
