"""FCFS under a power budget, non-preemptive, with or without EASY backfilling: the base of VAHRM's baselines.

Every such policy runs HPC-style: a job asks for all the GPUs it can use (``max_gpus``, capped at the
cluster), keeps them until it ends, and is never preempted or resized. The strict variants block at a
job the budget refuses; the backfilling ones let later jobs pass it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar


from pcs_ray.jobs.state import JobState, Snapshot
from pcs_ray.policies.base import Allocation
from pcs_ray.policies.easy import EasyBackfill
from pcs_ray.policies.power_aware import IDLE_W, PowerAware


class PowerFCFS(PowerAware, EasyBackfill):
    """FCFS, non-preemptive, with or without EASY backfilling, under a power budget.

    Its placement chooses the GPUs after the policy has admitted the job, so the budget check costs a
    candidate at its class's mean predicted power per GPU (TDP for a first run); running jobs and idle
    GPUs count as in VAHRM's check (:class:`PowerBudget`)."""

    backfills: ClassVar[bool] = True

    def __init__(self, power: dict[str, float] | None = None, tdp_w: float = 300.0,
                 budget_w: float | None = None, gpu_power: Mapping[str, Sequence[float]] | None = None,
                 idle_w: float = IDLE_W) -> None:
        self._init_power(power, tdp_w, budget_w, gpu_power, idle_w)

    def backfill(self, snap: Snapshot, rest: list[JobState]) -> list[JobState]:
        return rest if self.backfills else []

    def allocate(self, snap: Snapshot) -> Allocation:
        self._budget, _ = self._power_budget(snap)
        self._blocked = False
        self._started: set[str] = set()
        alloc = super().allocate(snap)
        self._profiled |= self._started  # profiled from the next decision on (Step 7 collects the profile)
        return alloc

    def may_start(self, snap: Snapshot, job: JobState, n: int, free: int) -> bool:
        if self._blocked:
            return False
        w = n * self.gpu_watts(job)
        if not self._budget.fits(w, n):
            self._blocked = not self.backfills  # strict FCFS: nobody passes a job the budget holds back
            return False
        self._budget.add(w, n)
        self._started.add(self._workload(job))
        return True

    def describe(self) -> dict:
        return {**super().describe(), "backfill": "easy" if self.backfills else "none", **self._power_describe()}
