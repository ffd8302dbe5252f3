"""LAS: Tiresias's discretised two-level least-attained-service queue."""

from __future__ import annotations

from pcs_ray.policies.base import Allocation, SchedulingPolicy, greedy_fill
from pcs_ray.jobs.state import Snapshot


class LASPolicy(SchedulingPolicy):
    """Jobs start in the high-priority queue and drop to the low one once they
    have held ``threshold`` GPU-seconds; FIFO inside each queue (Tiresias-L)."""

    name = "las"

    def __init__(self, threshold: float = 3600.0) -> None:
        if threshold <= 0:
            raise ValueError(f"LAS threshold must be > 0 GPU-seconds, got {threshold}")
        self.threshold = threshold

    def allocate(self, snap: Snapshot) -> Allocation:
        return greedy_fill(self.order(snap), snap.capacity)

    def order(self, snap: Snapshot) -> list:
        return sorted(snap.jobs, key=lambda j: (self.demoted(j), j.spec.submit_time, j.spec.job_id))

    def demoted(self, job) -> bool:
        # Tolerance: the review fires when attained service reaches the
        # threshold up to float rounding, which must count as crossed.
        return job.attained >= self.threshold * (1 - 1e-9)

    def next_review(self, snap: Snapshot, alloc: Allocation) -> float | None:
        """When the first running high-queue job crosses the threshold."""
        soonest = None
        for job in snap.jobs:
            n = alloc.get(job.spec.job_id, 0)
            if n and not self.demoted(job):
                at = snap.now + (self.threshold - job.attained) / n
                soonest = at if soonest is None else min(soonest, at)
        return soonest

    def describe(self) -> dict:
        return {"policy": self.name, "threshold": self.threshold}
