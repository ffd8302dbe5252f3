"""Themis with leases: finish-time fairness at a fair 1/N share, as the PCS paper's toy example shows it.

Source: the PCS paper's description and Fig. 1a (Themis, Mahajan et al.,
NSDI'20), read before the PCS artifact's code was. A job's fairness ratio is
rho = T_shared / T_fair: its elapsed time plus the time its remaining work
takes at a fair 1/N share (N = jobs active now), over the time its whole
service takes at that share. GPUs go to the jobs with the largest rho (the
most unfairly treated) on every event and at each lease expiry; the running
job keeps its GPUs on a tie, which is what Fig. 1a shows. Kept as
``themis-lease``: it reproduces Fig. 1a's first three stages, which the
artifact's rule (``themis``) does not aim at.
"""

from __future__ import annotations

from collections.abc import Iterable

from pcs_ray.policies.base import Allocation, SchedulingPolicy, greedy_fill
from pcs_ray.jobs.state import JobState, Snapshot


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


def ranked(jobs: Iterable[JobState], now: float, share: float) -> list[tuple]:
    """``(-rho quantised, waiting, submit time, job id, rho, job)`` per job, unsorted.

    rho is elapsed time at the fair rate plus the remaining work, over the
    whole service. Quantising it to 1e-9 (an int: far cheaper than
    round(x, 9)) keeps float noise from breaking a tie. The fair rate
    (``fractional_speedup`` at the fair ``share``) is memoised per job: the
    share only changes when a job arrives or leaves, but Themis asks at every
    lease expiry of every forward play.
    """
    out = []
    for job in jobs:
        spec = job.spec
        memo = job.fair_memo
        fair = memo.get(share)
        if fair is None:
            fair = memo[share] = fractional_speedup(job, share)
        rho = ((now - spec.submit_time) * fair + job.remaining) / spec.service
        out.append((-(rho * 1e9).__round__(), job.alloc == 0, spec.submit_time, spec.job_id, rho, job))
    return out


class ThemisLeasePolicy(SchedulingPolicy):
    name = "themis-lease"

    def __init__(self, lease: float = 600.0) -> None:
        if lease <= 0:
            raise ValueError(f"Themis lease must be > 0 seconds, got {lease}")
        self.lease = lease

    def rho(self, snap: Snapshot, job: JobState) -> float:
        return ranked((job,), snap.now, snap.capacity / len(snap.jobs))[0][4]

    def allocate(self, snap: Snapshot) -> Allocation:
        jobs = snap.jobs
        if not jobs:
            return {}
        keyed = ranked(jobs, snap.now, snap.capacity / len(jobs))
        keyed.sort()  # job ids are unique, so rho and the JobState are never compared
        return greedy_fill([k[5] for k in keyed], snap.capacity)

    def next_review(self, snap: Snapshot, alloc: Allocation) -> float | None:
        # A lone job, or jobs that all fit, keep their GPUs until an event.
        demand = snap.demand if snap.demand is not None else sum(j.spec.max_gpus for j in snap.jobs)
        if demand <= snap.capacity:
            return None
        return snap.now + self.lease

    def describe(self) -> dict:
        return {"policy": self.name, "lease_s": self.lease}
