"""A logical GPU as an independent device: each step takes exactly its emulated time.

On a node without real GPUs every runner shares the node's CPU cores, so
the time a step really takes depends on what else runs. :class:`StepBudget`
makes it depend only on the device: the real PyTorch step runs first (so
weights train and checkpoints resume bitwise), then the runner waits out
the rest of the step's budget, ``workloads.device_model.emulated_step_s``.
A step whose real compute alone exceeds the budget is an *overrun*: the
machine is too small for what it emulates. The step then takes what it
took, and the overrun is counted and reported, never hidden.

No torch here: the clock and the sleep are injectable, so the logic is
tested with a fake clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class StepBudget:
    """Pads every step to ``step_s`` seconds; counts the steps whose real work took longer.

    Oversleeping (the OS wakes us late) is carried into the next step's
    wait, so a long run keeps the emulated pace on average instead of
    drifting a little slower every step.
    """

    step_s: float
    clock: Callable[[], float] = time.perf_counter
    sleep: Callable[[float], None] = time.sleep
    overruns: int = 0
    overrun_s: float = 0.0  # total seconds by which real compute exceeded its budgets
    compute_s: float = 0.0  # total real compute seconds (what the machine actually spent)
    steps: int = 0
    _began: float | None = field(default=None, repr=False)
    _late: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        if not self.step_s > 0:
            raise ValueError(f"an emulated step must take a positive time, got {self.step_s!r}")

    def begin(self) -> None:
        self._began = self.clock()

    def end(self) -> float:
        """Wait out the step's budget; returns the step's duration as the device saw it."""
        if self._began is None:
            raise RuntimeError("StepBudget.end() without begin()")
        began, self._began = self._began, None
        compute = self.clock() - began
        self.steps += 1
        self.compute_s += compute
        if compute > self.step_s:
            self.overruns += 1
            self.overrun_s += compute - self.step_s
            self._late = 0.0
            return compute
        wait = self.step_s - compute - self._late
        if wait > 0:
            self.sleep(wait)
        elapsed = self.clock() - began
        # Woken late (or the previous step was): owe it to the next step, at most one budget.
        self._late = min(self.step_s, max(0.0, self._late + elapsed - self.step_s))
        return elapsed

    @property
    def load(self) -> float:
        """The share of the device's time the real compute used (1.0: the machine barely keeps up)."""
        return self.compute_s / (self.steps * self.step_s) if self.steps else 0.0
