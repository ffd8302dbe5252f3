"""Themis: finish-time fairness with leases, as PCS evaluates it.

An app's fairness ratio is rho = T_shared / T_fair: its elapsed time plus the
time its remaining work takes at a fair 1/N share, over the time its whole
service takes at that share. GPUs go to the apps with the largest rho (the
most unfairly treated) on every event and at each lease expiry. The running
app keeps its GPUs on a tie, which is what the PCS toy example (Fig. 1a) shows.
"""

from __future__ import annotations

from pcs_ray.policies.base import Allocation, SchedulingPolicy, greedy_fill
from pcs_ray.state import JobState, Snapshot


def fractional_speedup(job: JobState, share: float) -> float:
    """Speedup at a possibly fractional GPU share (time-sharing below one GPU)."""
    table = job.spec.speedup
    share = min(share, job.spec.max_gpus)
    if share <= 1:
        return share
    lo = int(share)
    if lo == share:
        return table[lo]
    return table[lo] + (share - lo) * (table[lo + 1] - table[lo])


class ThemisPolicy(SchedulingPolicy):
    name = "themis"

    def __init__(self, lease: float = 600.0) -> None:
        if lease <= 0:
            raise ValueError(f"Themis lease must be > 0 seconds, got {lease}")
        self.lease = lease

    def rho(self, snap: Snapshot, job: JobState) -> float:
        fair_rate = fractional_speedup(job, snap.capacity / len(snap.jobs))
        elapsed = snap.now - job.spec.submit_time
        return (elapsed * fair_rate + job.remaining) / job.spec.service

    def allocate(self, snap: Snapshot) -> Allocation:
        if not snap.jobs:
            return {}
        order = sorted(
            snap.jobs,
            key=lambda j: (-round(self.rho(snap, j), 9), j.alloc == 0, j.spec.submit_time, j.spec.job_id),
        )
        return greedy_fill(order, snap.capacity)

    def next_review(self, snap: Snapshot, alloc: Allocation) -> float | None:
        # A lone app, or apps that all fit, keep their GPUs until an event.
        if sum(j.spec.max_gpus for j in snap.jobs) <= snap.capacity:
            return None
        return snap.now + self.lease

    def describe(self) -> dict:
        return {"policy": self.name, "lease_s": self.lease}
