"""How fast jobs run and what a (re)start costs: estimates at submission, refined by what runners measure.

Predictions are only as good as this model (DESIGN §10): everything the live
system pays must be in it. It keeps

* per job, ``t1``: seconds per step on one nominal GPU, its runner's
  measurement once there is one, else the submitted estimate scaled by
  ``estimate_ratio`` (measured / estimated over jobs that have run: users'
  guesses tend to be off in one direction);
* per workload, the last 1-GPU measurement (``measured_t1``), the estimate
  for its next jobs; journaled when a job finishes, so kept across restarts;
* ``restart_overhead``: seconds from a launch to the first step (actor
  start-up, checkpoint restore), measured on every start;
* scaling: ``speedup(spec)``, a job's speedup per GPU count (linear today).

The other measurements are replayed from the journaled progress reports.
"""

from __future__ import annotations

from pcs_ray.contract import JobStatus
from pcs_ray.coordinator.jobs import LiveJob
from pcs_ray.job import linear_speedup
from pcs_ray.jobfile import JobFile

#: Work (fraction of one step) left in a job the model thinks is done but its runner has not reported:
#: only the runner says when a job has finished.
SLIVER = 0.05
EMA = 0.3  # weight of a new measurement


class SpeedModel:
    """Step times, start-up cost and scaling; see the module docstring."""

    def __init__(self, default_step_time: float = 1.0, restart_overhead: float = 3.0) -> None:
        self.default_step_time = default_step_time
        self.restart_overhead = restart_overhead  # estimate, refined by measurement
        self.measured_t1: dict[str, float] = {}  # workload -> last measured 1-GPU step time
        self.estimate_ratio = 1.0

    # -- estimates ----------------------------------------------------------------
    def estimate(self, spec: JobFile) -> float:
        """``t1`` of a new job: its own estimate, else its workload's last measurement, else the default."""
        return spec.step_time or self.measured_t1.get(spec.workload, self.default_step_time)

    def speedup(self, spec: JobFile) -> tuple[float, ...]:
        return linear_speedup(spec.gpus)

    def remaining(self, job: LiveJob, now: float) -> float:
        """GPU-seconds at one nominal GPU still to do, from the runner's last report."""
        steps_left = job.spec.steps - job.steps
        if job.state == JobStatus.RUNNING and job.reported_at is not None and job.step_time:
            steps_left -= (now - job.reported_at) / job.step_time
        t1 = job.t1 if job.measured else job.t1 * self.estimate_ratio
        return max(steps_left, SLIVER) * t1

    def stall_until(self, job: LiveJob, now: float) -> float:
        """When the job can next make progress: a run that has not reported yet is still starting up,
        and a queued or stopping job pays a start-up before it trains again."""
        if job.state == JobStatus.RUNNING:
            return 0.0 if job.reported_at is not None else job.started_at + self.restart_overhead
        return now + self.restart_overhead

    # -- measurements ----------------------------------------------------------------
    def observe_start_up(self, job: LiveJob, t: float, step: int, step_time: float) -> None:
        """The first report of a run: the time since its launch not spent on its steps was start-up."""
        overhead = max(0.0, t - job.started_at - max(1, step - job.start_step) * step_time)
        self.restart_overhead = (1 - EMA) * self.restart_overhead + EMA * overhead

    def observe_step_time(self, job: LiveJob, step_time: float) -> bool:
        """A measured step time on the job's GPUs; True when it moved the estimates of unmeasured jobs."""
        n = min(len(job.gpus), job.spec.gpus)
        t1 = step_time * self.speedup(job.spec)[n] / job.slowdown
        first = not job.measured
        if first:
            self.estimate_ratio = (1 - EMA) * self.estimate_ratio + EMA * (t1 / job.t1)
        job.t1, job.measured = t1, True
        if n == 1:  # only a 1-GPU run measures t1 directly, with no speedup model in between
            self.measured_t1[job.spec.workload] = t1
        return first

    def learned(self, workload: str, t1: float) -> None:
        """A journaled per-workload measurement (replayed after a restart)."""
        self.measured_t1[workload] = t1
