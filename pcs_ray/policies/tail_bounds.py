"""A WFQ queue's completion bound for the job at its tail, kept as jobs come, go, start and stop.

``WFQPolicy.completion_bound`` walks every job ahead of the one asked about (``fifo_queue_bound``): a
submission, which joins the tail of its queue, walked the whole queue, 100,000 jobs long at scale. Here
each waiting job's term of that walk (its work at the GPUs the queue guarantees its head) is kept, and
summed per queue as terms change; the running jobs' terms, which move as they run, are summed at each
call (there are at most as many as GPUs). The result is the walk's up to the order of the additions.
Its keeper (the live coordinator's ``ClusterModel``) tells it every job whose allocation, remaining work
or queue may have changed (``update``) and every job that left (``drop``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pcs_ray.jobs.state import JobState, Snapshot
from pcs_ray.policies.wfq import WFQPolicy

#: Sums are recomputed from the kept terms after this many changes, so rounding does not pile up.
RESUM_EVERY = 50_000


def keeps_tail_bounds(policy) -> bool:
    """Whether ``policy``'s bound is WFQ's FIFO-queue bound, which ``TailBounds`` keeps."""
    return isinstance(policy, WFQPolicy) and type(policy).completion_bound is WFQPolicy.completion_bound


class TailBounds:
    """``policy.completion_bound`` of the job at its queue's tail, without a walk of the queue."""

    def __init__(self, policy, capacity: int, jobs: Iterable[JobState] = ()) -> None:
        self.policy = policy
        self.zeta = policy.config.zeta_min
        self.guaranteed = [math.floor(capacity * w + 1e-9) for w in policy.weights]
        self.terms: dict[int, tuple[int, float | None]] = {}  # waiting job -> (its queue, its term or None)
        self.sums = [0.0] * len(policy.weights)
        self.unbounded = [0] * len(policy.weights)  # waiting jobs the queue's guarantee cannot serve
        self.changes = 0
        for job in jobs:
            self.update(job)

    def term(self, job: JobState, q: int) -> float | None:
        """The job's time at the head of queue ``q`` (``fifo_queue_bound``'s step); None: it cannot run there."""
        spec = job.spec
        n = min(job.cap(self.zeta), self.guaranteed[q], spec.max_gpus)
        if n < spec.min_gpus:
            return None
        return job.remaining / (spec.speedup[n] / job.slowdown)

    def update(self, job: JobState) -> None:
        """``job`` may have changed: its allocation, its remaining work, its size (and so its queue)."""
        self.drop(job.spec.job_id)
        if job.alloc:
            return
        q = self.policy.queue_of(job)
        term = self.term(job, q)
        self.terms[job.spec.job_id] = (q, term)
        if term is None:
            self.unbounded[q] += 1
        else:
            self.sums[q] += term
        self._count()

    def drop(self, job_id: int) -> None:
        old = self.terms.pop(job_id, None)
        if old is None:
            return
        q, term = old
        if term is None:
            self.unbounded[q] -= 1
        else:
            self.sums[q] -= term
        self._count()

    def _count(self) -> None:
        self.changes += 1
        if self.changes >= RESUM_EVERY:
            self.changes = 0
            self.sums = [0.0] * len(self.sums)
            for q, term in self.terms.values():
                if term is not None:
                    self.sums[q] += term

    def bound(self, snap: Snapshot, job: JobState, running: Iterable[JobState]) -> float | None:
        """The job's bound where it is its queue's tail and holds no GPUs, with ``running`` the jobs that
        hold GPUs; elsewhere the policy's own walk."""
        policy = self.policy
        queue = policy.bound_reads(snap, job)
        q = policy.queue_of(job)
        if job.alloc or not queue or queue[-1] is not job:
            return policy.completion_bound(snap, job)
        if self.guaranteed[q] <= 0 or self.unbounded[q]:
            return None
        t = snap.now
        for other in running:
            if policy.queue_of(other) == q:
                term = self.term(other, q)
                if term is None:
                    return None
                t += term
        return t + self.sums[q]


__all__ = ["RESUM_EVERY", "TailBounds", "keeps_tail_bounds"]
