"""Progress and NVML readings a run sends its coordinator, fire-and-forget and throttled."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from pcs_ray.executors.emulation import StepBudget
from pcs_ray.contract import RunRequest

log = logging.getLogger(__name__)


@dataclass
class ProgressReporter:
    """Fire-and-forget, throttled progress reports to the coordinator.

    An emulated GPU's step takes its budget, and that is what a report says. On a real GPU a report says
    the wall-clock seconds per step since the previous report instead: the checkpoints, data loading and
    reports between steps are what a job's completion waits for too (on an H100, periodic checkpoints of
    a ResNet-18 alone added 8 % to its steps' own time). The first report of a run is its first step alone.

    A step held back by the interval is sent once the loop has been quiet for ``QUIET_S`` (an evaluation, a
    slow epoch, a pause): what the coordinator shows is then never older than that behind the loop.
    """

    QUIET_S = 1.0

    target: object
    job_id: str
    interval_s: float
    emulated: bool = False
    budget: StepBudget | None = None  # emulated steps: its overrun count travels with each report
    resolve: Callable[[], object] | None = None  # asked for the target at each report (a warm runner's run changes hands)
    _last: float = field(default=float("-inf"))
    _last_step: int | None = None
    _times: list = field(default_factory=list)
    _held: tuple | None = None  # (step, monotonic time) of the newest step the interval held back
    _timer: threading.Timer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def began(self, step: int) -> None:
        """The run's ranks are up and its code starts (no step time: not a measurement): the coordinator
        counts a hang from here (``pcs_ray.coordinator.guards``). The first step is still reported at once."""
        target = self.resolve() if self.resolve is not None else self.target
        if target is None:
            return
        try:
            target.report_progress.remote(self.job_id, step, None, emulated=self.emulated)
        except Exception as exc:  # as for a step: a dead coordinator must not stop training
            log.warning("start report for %s failed: %s", self.job_id, exc)

    def step_done(self, step: int, step_time_s: float) -> None:
        with self._lock:
            self._times.append(step_time_s)
            now = time.monotonic()
            if now - self._last < self.interval_s:
                self._held = (step, now)
                if self._timer is None:
                    self._arm(self.QUIET_S)
                return
            self._send(step, now)

    def close(self) -> None:
        """The run ended: nothing held back is sent after it."""
        with self._lock:
            self._held = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _arm(self, delay: float) -> None:
        self._timer = threading.Timer(delay, self._quiet)
        self._timer.daemon = True
        self._timer.start()

    def _quiet(self) -> None:
        with self._lock:
            self._timer = None
            if self._held is None:
                return
            step, at = self._held
            left = at + self.QUIET_S - time.monotonic()
            if left > 0:  # a step came since the timer was set: wait for the loop to go quiet after it
                self._arm(left)
                return
            self._send(step, at)

    def _send(self, step: int, now: float) -> None:
        """Report ``step`` (done at ``now``); the caller holds the lock."""
        self._held = None
        target = self.resolve() if self.resolve is not None else self.target
        if target is None or not self._times:
            return
        if self.emulated or self._last_step is None or step <= self._last_step:
            mean = sum(self._times) / len(self._times)
        else:
            mean = (now - self._last) / (step - self._last_step)
        self._times.clear()
        self._last, self._last_step = now, step
        extra = {"emulated": self.emulated}
        if self.budget is not None and self.budget.overruns:  # only then: older reporters lack the keyword
            extra["overruns"] = self.budget.overruns
        try:
            target.report_progress.remote(self.job_id, step, mean, **extra)
        except Exception as exc:  # a dead coordinator must not stop training: its successor adopts the run
            log.warning("progress report for %s failed: %s", self.job_id, exc)


@dataclass
class TelemetryReporter:
    """Fire-and-forget, throttled NVML readings of one rank's GPU (``pcs_ray.power.measured.RunMeter``)."""

    target: object
    job_id: str
    attempt: int
    node: str
    index: int
    meter: object
    interval_s: float
    resolve: Callable[[], object] | None = None  # as ProgressReporter's: readings follow an adopting coordinator
    _last: float = field(default=float("-inf"))

    def step_done(self, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last < self.interval_s:
            return
        self._last = now
        target = self.resolve() if self.resolve is not None else self.target
        send = getattr(target, "report_telemetry", None)  # None: no coordinator now, or an older one
        if send is None:
            return
        try:
            reading = self.meter.reading()
            if reading is not None:
                if final:
                    reading["final"] = True
                send.remote(self.job_id, self.attempt, self.node, self.index, reading)
        except Exception as exc:  # telemetry must never stop training
            log.warning("telemetry report for %s failed: %s", self.job_id, exc)


def telemetry_reporter(request: RunRequest, rank: int, sampler=None,
                       resolve: Callable[[], object] | None = None) -> TelemetryReporter | None:
    """This rank's GPU read through NVML, where it can be (a real GPU, the library, a reporter that takes
    telemetry); None otherwise: the coordinator then models the job's energy. ``resolve`` returns where
    readings go now (a warm runner's run adopted by a restarted coordinator), as for progress."""
    if request.reporter is None or rank >= len(request.gpus):
        return None
    try:
        request.reporter.report_telemetry  # noqa: B018 - an older reporter lacks it
    except AttributeError:
        return None
    from pcs_ray.power.measured import NVMLSampler, RunMeter

    slot = request.gpus[rank]
    meter = RunMeter(sampler if sampler is not None else NVMLSampler(), slot.index)
    if not meter.available:
        meter.sampler.close()
        return None
    return TelemetryReporter(request.reporter, request.job_id, request.attempt, slot.node, slot.index, meter,
                             request.report_interval_s, resolve)
