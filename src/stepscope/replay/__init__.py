"""The replay: the recorded step as a dependency graph (host ops in order per thread, launches to kernels and
copies on their streams, synchronisations, DataLoader waits, collectives), replayed. As recorded (it must
reproduce the trace), de-perturbed (the profiler's cost per event taken out, calibrated or sized to the gap to the
run's unprofiled steps, and checked against them: the one correction for the profiler's cost; the replay error is
part of the report), what-if (a fix applied to the graph) and on
another GPU (kernels scaled by roofs, host by its measured speed).

It sits below advice and predict, so the verdict, the estimates and predict share one model of the step. The
pipeline hands it the trace, the run's reference and its calibration in one place (pipeline/timeline.py).
"""

from stepscope.replay.blocking import blocking_calls
from stepscope.replay.engine import device_waits, replay
from stepscope.replay.host_clock import HostCost

__all__ = ["HostCost", "blocking_calls", "device_waits", "replay"]
