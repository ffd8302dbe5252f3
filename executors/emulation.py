"""A logical GPU as an independent device: each step takes exactly its emulated time.

On a node without real GPUs every runner shares the node's CPU cores, so
the time a step really takes depends on what else runs. :class:`StepBudget`
makes it depend only on the device: the real PyTorch step runs first (so
weights train and checkpoints resume bitwise), then the runner waits until
the step's deadline on the device's schedule (one
``pcs_ray.workloads.device_model.emulated_step_s`` per step from the run's start).

A step whose real compute took longer than its budget (the OS descheduled
the runner on the shared cores, say) leaves the run behind schedule; the
following steps wait less and so catch up, as long as the machine keeps the
device's pace on average. A step that leaves the run more than one whole step
behind its device (and further behind than before) is an *overrun*: the
machine is too small for what it emulates, and the run's timeline now
differs from the device's by more than a step, the resolution at which
anyone (progress reports, JCTs) observes it. Overruns are counted and
reported, never hidden; so are the steps that were late on their own
(``late_steps``) and the largest lag.

A run's first step is its warm-up (lazy initialisation: the first forward
and backward build their kernels and buffers, on a real GPU as here). It
takes its budget or what it took, and what it took beyond the budget is
start-up (``warmup_s``), which the coordinator's speed model learns as part
of the run's start cost; the schedule starts after it.

No torch here: the clock and the sleep are injectable, so the logic is
tested with a fake clock.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger(__name__)

#: Overruns logged per run (each with its step, lag and compute); the count goes on past it.
LOGGED_OVERRUNS = 20

#: The most a run may owe its device, in steps: a longer stall (swapping, a stopped process) is not made up by
#: sprinting through the next many steps (the sprint would load the shared cores for everyone else); the excess
#: is dropped from the schedule and stays counted as overruns.
MAX_LAG_STEPS = 10.0

#: Environment for the Ray processes of a cluster whose GPUs are emulated. Ray starts its workers at nice 15, so
#: every ordinary process on the machine (the driver polling, a compiler, another user's shell) preempts the runners
#: that pace the emulated devices, and a step's time then depends on the machine's load. At nice 0 the runners
#: compete as equals; they sleep most of each step, so they do not starve Ray's own daemons.
RAY_WORKER_ENV = {"RAY_worker_niceness": "0"}


@dataclass
class StepBudget:
    """Paces steps to ``step_s`` seconds each on a schedule; counts the steps that leave the run over a step behind it.

    Waking late from a sleep, or a step whose compute overran, is paid back
    by the following steps' waits, so a long run keeps the emulated pace
    instead of drifting.
    """

    step_s: float
    clock: Callable[[], float] = time.perf_counter
    sleep: Callable[[float], None] = time.sleep
    overruns: int = 0  # steps that ended more than one budget behind the device's schedule
    late_steps: int = 0  # steps whose own compute exceeded their budget (caught up later unless counted above)
    max_lag_s: float = 0.0  # the furthest the run fell behind its device's schedule
    warmup_s: float = 0.0  # the first step's time beyond its budget: start-up, not pace
    dropped_s: float = 0.0  # lag beyond MAX_LAG_STEPS budgets, given up: the run's timeline is this much later than its device's
    compute_s: float = 0.0  # total real compute seconds (what the machine actually spent)
    steps: int = 0
    _began: float | None = field(default=None, repr=False)
    _lag: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        if not self.step_s > 0:
            raise ValueError(f"an emulated step must take a positive time, got {self.step_s!r}")

    def begin(self) -> None:
        self._began = self.clock()

    def end(self) -> float:
        """Wait until the step's deadline; returns the step's duration as the device saw it."""
        if self._began is None:
            raise RuntimeError("StepBudget.end() without begin()")
        began, self._began = self._began, None
        compute = self.clock() - began
        self.steps += 1
        self.compute_s += compute
        if self.steps == 1 and compute > self.step_s:
            self.warmup_s = compute - self.step_s
            return compute
        if compute > self.step_s:
            self.late_steps += 1
        lag_before = self._lag
        wait = self.step_s - compute - self._lag
        if wait > 0:
            self.sleep(wait)
        elapsed = self.clock() - began
        self._lag = max(0.0, self._lag + elapsed - self.step_s)
        self.max_lag_s = max(self.max_lag_s, self._lag)
        if self._lag > self.step_s and self._lag > lag_before:
            self.overruns += 1
            if self.overruns <= LOGGED_OVERRUNS:  # where and how: a stall (compute) or a late wake-up (wait)
                log.warning("emulated step %d fell %.3f s behind its device (step %.3f s: compute %.3f s, "
                            "wait %.3f s planned, %.3f s in all)", self.steps, self._lag, self.step_s, compute,
                            max(0.0, wait), elapsed)
        if self._lag > MAX_LAG_STEPS * self.step_s:
            self.dropped_s += self._lag - MAX_LAG_STEPS * self.step_s
            self._lag = MAX_LAG_STEPS * self.step_s
        return elapsed

    @property
    def load(self) -> float:
        """The share of the device's time the real compute used (1.0: the machine barely keeps up)."""
        return self.compute_s / (self.steps * self.step_s) if self.steps else 0.0

    def describe(self) -> str:
        """One line for a run's notes when anything was late."""
        lag = f"largest lag {self.max_lag_s:.3g} s, warm-up {self.warmup_s:.3g} s"
        if not self.overruns:
            return (f"emulation kept its device's pace: {self.late_steps} of {self.steps} step(s) ran over their "
                    f"budget and were caught up ({lag})")
        dropped = f", {self.dropped_s:.3g} s never made up" if self.dropped_s else ""
        return (f"emulation fell over a step behind its device on {self.overruns} of {self.steps} steps "
                f"({lag}, {self.late_steps} step(s) late on their own{dropped}): "
                "this machine is too small for what it emulates")
