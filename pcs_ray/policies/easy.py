"""FCFS with EASY backfilling (Lifka's Argonne scheduler; Mu'alem & Feitelson 2001), as HPC batch systems run it.

Jobs are not preempted and not resized: a running job keeps its GPUs until it
ends. Waiting jobs are tried in queue order; the first one that does not fit
gets a *reservation* at the earliest time enough GPUs free up if running jobs
end when their requested run time says (the *shadow time*). Later jobs may
start ahead of it ("backfill") only if they fit now and either end by the
shadow time or use GPUs the reserved job will not need then (the *extra*
GPUs). Only the first blocked job holds a reservation (EASY, not conservative).

What the scheduler knows about a job is its spec: it asks for ``max_gpus``
(capped at the cluster) and its **requested run time is its nominal run time
on those GPUs**, ``service / speedup[n]``, i.e. an exact estimate on nominal
GPUs that knows nothing of placement slowdowns or run-to-run variability (a
slowed run overruns its request; a running job past its request is taken to
end now). ``EasyBackfill`` is the reusable machinery: a subclass changes the
queue order (``queue``), the backfill order (``backfill``), the request
(``request``, ``requested_runtime``) or whether a job that fits may start now
(``may_start``, RUSH's start function); which GPUs a job gets stays the
placement's decision.
"""

from __future__ import annotations

from collections.abc import Sequence

from pcs_ray.policies.base import Allocation, SchedulingPolicy
from pcs_ray.jobs.state import JobState, Snapshot


class EasyBackfill(SchedulingPolicy):
    """FCFS order, non-preemptive, one reservation for the first job that does not fit."""

    name = "fcfs-easy"
    reads_progress = False
    work_conserving = False  # a GPU may idle to keep the reserved job's start time

    # -- what a subclass may change -------------------------------------------------------
    def queue(self, snap: Snapshot, waiting: list[JobState]) -> list[JobState]:
        """The waiting jobs in the order they are tried (R1 in RUSH's Algorithm 1): arrival order."""
        return waiting

    def backfill(self, snap: Snapshot, rest: list[JobState]) -> list[JobState]:
        """The jobs behind the reserved one, in the order they may backfill (R2): queue order."""
        return rest

    def request(self, job: JobState, capacity: int) -> int:
        """GPUs the job asks for: all it can use, as an HPC job asks for its node count."""
        n = job.spec.max_gpus
        return n if n <= capacity else capacity

    def requested_runtime(self, job: JobState, n: int) -> float:
        """The run time the job requests on ``n`` GPUs (see the module's note)."""
        return job.spec.service / job.spec.speedup[n]

    def may_start(self, snap: Snapshot, job: JobState, n: int, free: int) -> bool:
        """Whether ``job``, which fits on the ``free`` GPUs now, is launched (else it waits, holding no
        reservation this round). FCFS+EASY launches every job that fits."""
        return True

    # -- the algorithm ------------------------------------------------------------------
    def allocate(self, snap: Snapshot) -> Allocation:
        capacity, now = snap.capacity, snap.now
        alloc: Allocation = {}
        ends: list[tuple[float, int]] = []  # (requested end, GPUs) of every running job
        free = capacity
        waiting: list[JobState] = []
        for job in snap.jobs:
            n = job.alloc
            if n and n <= free:  # running: keeps its GPUs (an inconsistent snapshot drops the overflow)
                alloc[job.spec.job_id] = n
                free -= n
                started = job.start_time if job.start_time is not None else now
                end = started + self.requested_runtime(job, n)
                ends.append((end if end > now else now, n))
            else:
                waiting.append(job)
        if not waiting:
            return alloc
        order = self.queue(snap, waiting)
        shadow, extra = None, 0
        for i, job in enumerate(order):
            n = self.request(job, capacity)
            if n < job.spec.min_gpus:
                continue  # can never run here (a simulation refuses such jobs up front)
            if n <= free:
                if self.may_start(snap, job, n, free):
                    alloc[job.spec.job_id] = n
                    free -= n
                    ends.append((now + self.requested_runtime(job, n), n))
                continue
            shadow, extra = _reservation(ends, free, n)
            rest = self.backfill(snap, list(order[i + 1:]))
            break
        else:
            return alloc
        for job in rest:
            if free <= 0:
                break
            n = self.request(job, capacity)
            if n > free or n < job.spec.min_gpus:
                continue
            ends_by_shadow = now + self.requested_runtime(job, n) <= shadow
            if not ends_by_shadow and n > extra:
                continue
            if not self.may_start(snap, job, n, free):
                continue
            alloc[job.spec.job_id] = n
            free -= n
            if not ends_by_shadow:
                extra -= n
        return alloc

    def describe(self) -> dict:
        return {"policy": self.name, "backfill": "easy", "requested_runtime": "nominal"}


def _reservation(ends: Sequence[tuple[float, int]], free: int, need: int) -> tuple[float, int]:
    """The shadow time (when ``need`` GPUs are free if running jobs end as requested) and the
    GPUs free then beyond ``need`` (the extra GPUs a longer job may backfill onto)."""
    avail = free
    for end, n in sorted(ends):
        avail += n
        if avail >= need:
            return end, avail - need
    return float("inf"), 0  # cannot happen while need <= capacity


__all__ = ["EasyBackfill"]
