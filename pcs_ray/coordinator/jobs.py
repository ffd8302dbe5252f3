"""One submitted job as the coordinator tracks it, and the state changes its events cause.

Times are seconds since the coordinator's epoch. Each method is one
journaled event's effect on the job; the coordinator calls them only from
its event application, so the live path and the journal replay change a job
the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pcs_ray.contract import JobStatus
from pcs_ray.jobs.jobfile import JobFile

SEGMENT_ERROR_LINES = 5  # of a failed run's error kept with that run in the job's history
# A job that gives no total steps is assumed to have as much work left as it has done, and at least this
# many seconds of one GPU's work (its size grows as it runs; it never looks nearly done).
UNKNOWN_REMAINING_S = 3600.0
#: A run's pace is taken over its reports of about this many seconds (:meth:`LiveJob.run_pace`).
PACE_WINDOW_S = 60.0


@dataclass
class LiveJob:
    """A job's state, its current attempt and what its runner last said (``steps``)."""

    job_id: int
    spec: JobFile
    submit: float
    t1: float  # seconds per step on one nominal GPU: the estimate until its runner measures it
    state: JobStatus = JobStatus.QUEUED
    gpus: tuple[int, ...] = ()  # held by its runner while running or stopping
    attempt: int = 0
    steps: int = 0
    reported_at: float | None = None
    step_time: float | None = None  # measured seconds per step on ``gpus``
    # The current run's reports (time, step) over the last ``PACE_WINDOW_S``, its first among them until then.
    paces: list[tuple[float, int]] = field(default_factory=list)
    measured: bool = False  # ``t1`` comes from its runner, not from the estimate
    slowdown: float = 1.0  # the model's slowdown for ``gpus``
    started_at: float | None = None  # launch of the current attempt
    # The current attempt's runners: "warm" (pooled) or "cold" (started for it), set by the host once it has launched
    # them; None between the decision to start and the launch (a forecast then charges the pool's mix).
    runner: str | None = None
    start_step: int = 0  # ``steps`` when the current attempt was launched
    first_start: float | None = None
    finish: float | None = None
    preemptions: int = 0
    predicted: float | None = None
    predicted_start: float | None = None  # while queued: when the latest whole play first gives it GPUs
    first_predicted: float | None = None
    forecast_basis: str | None = None  # how first_predicted was played: "branch" (from a refresh play) or "fresh"
    refresh_age: float | None = None  # for "branch": seconds between the refresh play's state and the submission
    bound: float | None = None
    stop_reason: str | None = None
    stop_at: float | None = None  # when the current stop was requested
    stop_why: str | None = None  # a guard's stop that the job outlives (a hang retried): why, in one line
    cancel_requested: bool = False
    # A guard's end in flight (``guards``: time limit, hang): its run is being stopped, then the job ends
    # ``state`` with ``reason``, coded ``code`` (an ``EndCode``).
    ending: dict | None = None
    end_code: str | None = None  # why the coordinator itself ended it (an ``EndCode``), once ended
    failures: int = 0  # runs lost to something other than its code (a dead runner): retried by the coordinator
    code_failures: int = 0  # runs whose loop raised or hung and that were restarted under its ``max_failures``
    error: str | None = None
    note: str | None = None  # how it finished when not at its budget (user code that returned early)
    metrics: dict | None = None  # what a user run last reported, once the job finished
    checkpoint: str | None = None  # its newest checkpoint's folder, once it finished
    lost_steps: int = 0  # reported steps its runs redid from a checkpoint (a stop past its grace, a lost runner)
    emulated: bool = False
    submission_id: str | None = None
    segments: list[dict] = field(default_factory=list)  # one per run: start, end, gpus, kind, from_step (as the journal knew it)
    skips: int = 0  # times RUSH's start function held it back (its skip count)
    skip_reason: str | None = None  # why, the last time
    energy: dict[str, dict] = field(default_factory=dict)  # "attempt:gpu" -> that run's latest NVML reading there

    @property
    def done(self) -> bool:
        return self.state.done

    def total_steps(self) -> int:
        """Its total work in steps: the spec's, else (own code that gave none) the size the policy assumes
        (``UNKNOWN_REMAINING_S``), else once finished the steps it took."""
        if self.spec.steps is not None:
            return self.spec.steps
        if self.done:
            return self.steps
        return self.steps + max(self.steps, math.ceil(UNKNOWN_REMAINING_S / max(self.t1, 1e-9)))

    def launched(self, t: float, attempt: int, gpus: tuple[int, ...], slowdown: float, kind: str) -> None:
        """A run of this job started on ``gpus`` (``kind``: start, resume, migrate, resize)."""
        self.state, self.attempt, self.gpus = JobStatus.RUNNING, attempt, tuple(gpus)
        self.slowdown, self.started_at, self.reported_at, self.step_time = slowdown, t, None, None
        self.paces = []
        self.start_step = self.steps
        self.runner = None  # until the host says which runners its launch found
        self.stop_reason, self.stop_at, self.stop_why = None, None, None
        if self.first_start is None:
            self.first_start = t
        self.segments.append({"start": t, "end": None, "gpus": list(self.gpus), "kind": kind, "from_step": self.steps})

    def paced(self, t: float, step: int) -> None:
        """A report of the current run at ``t``: kept for its pace (the oldest dropped past the window)."""
        self.paces.append((t, step))
        while len(self.paces) > 2 and self.paces[1][0] <= t - PACE_WINDOW_S:
            self.paces.pop(0)

    def run_pace(self) -> float | None:
        """Seconds per step of the current run between its oldest kept report and its latest: its own pace,
        checkpoints, evaluations and data loading between steps included in proportion (None: fewer than
        two reports with steps and time between). A run's first report ends its first step, warm-up and all, so that
        step is never in it."""
        if len(self.paces) < 2:
            return None
        (t0, s0), (t1, s1) = self.paces[0], self.paces[-1]
        return (t1 - t0) / (s1 - s0) if s1 > s0 and t1 > t0 else None

    def stopping(self, reason: str, t: float | None = None, why: str | None = None) -> None:
        self.state, self.stop_reason, self.stop_at, self.stop_why = JobStatus.STOPPING, reason, t, why

    def requeued(self, t: float, error: str | None = None) -> None:
        """Its run ended without finishing the job (stopped, lost or failed, ``error`` saying why): back to the queue.
        A run the coordinator stopped keeps why (``stopped_for``: preempt, migrate, resize, ...) with it."""
        if self.state == JobStatus.STOPPING and self.stop_reason and self.segments and self.segments[-1]["end"] is None:
            self.segments[-1]["stopped_for"] = self.stop_reason
        self.close_segment(t, error)
        self.state, self.gpus, self.reported_at, self.started_at = JobStatus.QUEUED, (), None, None

    def ended(self, state: JobStatus, t: float) -> None:
        """Finished, cancelled or failed for good."""
        self.close_segment(t)
        self.state, self.finish, self.gpus = state, t, ()

    def note_reading(self, attempt: int, gpu: int, reading: dict) -> None:
        """A rank's NVML reading of ``gpu`` in run ``attempt``; readings arrive out of order, the
        counter only grows, so the largest energy stands."""
        key = f"{attempt}:{gpu}"
        old = self.energy.get(key)
        if old is None or (reading.get("energy_j") or 0.0) >= (old.get("energy_j") or 0.0):
            self.energy[key] = dict(reading)

    def close_segment(self, t: float, error: str | None = None) -> None:
        """The current run ended at ``t``; ``error``: the last lines of why it failed, kept with the run."""
        if self.segments and self.segments[-1]["end"] is None:
            self.segments[-1]["end"] = t
            if error:
                self.segments[-1]["error"] = "\n".join(error.strip().splitlines()[-SEGMENT_ERROR_LINES:])
