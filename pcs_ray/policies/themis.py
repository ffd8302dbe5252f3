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


def _rho(job: JobState, now: float, share: float) -> float:
    """Elapsed time at the fair rate plus the remaining work, over the whole service."""
    fair_rate = fractional_speedup(job, share)
    return ((now - job.spec.submit_time) * fair_rate + job.remaining) / job.spec.service


class ThemisPolicy(SchedulingPolicy):
    name = "themis"

    def __init__(self, lease: float = 600.0) -> None:
        if lease <= 0:
            raise ValueError(f"Themis lease must be > 0 seconds, got {lease}")
        self.lease = lease

    def rho(self, snap: Snapshot, job: JobState) -> float:
        return _rho(job, snap.now, snap.capacity / len(snap.jobs))

    def allocate(self, snap: Snapshot) -> Allocation:
        jobs = snap.jobs
        if not jobs:
            return {}
        # The fair share is the same for every app this round: compute it once
        # (this runs at every lease expiry of every forward play).
        share = snap.capacity / len(jobs)
        now = snap.now
        keyed = []
        for job in jobs:
            spec = job.spec
            keyed.append((-round(_rho(job, now, share), 9), job.alloc == 0, spec.submit_time, spec.job_id, job))
        keyed.sort()  # job ids are unique, so the JobState itself is never compared
        return greedy_fill([k[4] for k in keyed], snap.capacity)

    def next_review(self, snap: Snapshot, alloc: Allocation) -> float | None:
        # A lone app, or apps that all fit, keep their GPUs until an event.
        if sum(j.spec.max_gpus for j in snap.jobs) <= snap.capacity:
            return None
        return snap.now + self.lease

    def describe(self) -> dict:
        return {"policy": self.name, "lease_s": self.lease}
