"""Themis (finish-time fairness) as the PCS evaluation runs it.

Source: the PCS artifact's simulator (``ThemisScheduler``), read to learn its
rule. GPUs are handed out greedily: while GPUs are left (``residual``), the
job with the largest

    rho = (elapsed + remaining / min(residual, demand)) / (service / min(G / contention, demand))

gets ``min(residual, demand)`` GPUs, where ``contention`` is the average
number of active jobs the job has seen per event (arrival, completion or
quantum; ``Snapshot.contention``). The ranking is redone at every arrival and
completion and ``quantum`` seconds after the last event. ``remaining`` is
1-GPU service and the shared time divides it by the GPU count, whatever the
job's speedup curve: so does the artifact.

When every job's demand fits, the ranking cannot change anything, so no
review is asked for; the engine still counts the skipped quanta as events.

Themis's *app* (one or more jobs, e.g. a sweep's trials) is one job here.
"""

from __future__ import annotations

from pcs_ray.policies.base import Allocation, SchedulingPolicy
from pcs_ray.jobs.state import Snapshot


class ThemisPolicy(SchedulingPolicy):
    name = "themis"

    def __init__(self, quantum: float = 600.0) -> None:
        if not quantum > 0:
            raise ValueError(f"Themis quantum must be > 0 seconds, got {quantum}")
        self.quantum = quantum

    def rho(self, snap: Snapshot, job, share: int | None = None) -> float:
        """``job``'s ratio if it got ``share`` GPUs (default: its demand, capped by the cluster)."""
        spec = job.spec
        share = min(snap.capacity, spec.max_gpus) if share is None else share
        fair = spec.service / min(snap.capacity / snap.contention(job), spec.max_gpus)
        return (snap.now - spec.submit_time + job.remaining / share) / fair

    def allocate(self, snap: Snapshot) -> Allocation:
        now, capacity = snap.now, snap.capacity
        demand = snap.demand if snap.demand is not None else sum(j.spec.max_gpus for j in snap.jobs)
        residual = min(demand, capacity)
        # Per job: (elapsed, remaining, fair time, demand, min GPUs, arrival rank). rho at a share
        # of min(residual, demand) is fixed for jobs whose demand fits the residual; only the
        # others' depends on it, and residual only shrinks, so jobs move one way: into ``wide``.
        rows = []
        for i, job in enumerate(snap.jobs):
            spec = job.spec
            fair = spec.service / min(capacity / snap.contention(job), spec.max_gpus)
            rows.append((now - spec.submit_time, job.remaining, fair, spec.max_gpus, spec.min_gpus, i, spec.job_id))
        # Fitting jobs by their fixed rho, highest first, earliest arrival on a tie.
        fitting = sorted(rows, key=lambda a: (-(a[0] + a[1] / a[3]) / a[2], a[5]))
        by_width = sorted(rows, key=lambda a: -a[3])  # widest first: they join ``wide`` first
        wide: list[tuple] = []
        taken: set[int] = set()
        alloc: Allocation = {}
        head = joined = 0
        while residual > 0:
            while joined < len(by_width) and by_width[joined][3] > residual:
                if by_width[joined][5] not in taken and by_width[joined][4] <= residual:
                    wide.append(by_width[joined])
                joined += 1
            wide = [a for a in wide if a[4] <= residual and a[5] not in taken]
            while head < len(fitting) and (fitting[head][5] in taken or fitting[head][3] > residual):
                head += 1
            best, best_key = None, None
            if head < len(fitting):
                a = fitting[head]
                best, best_key = a, ((a[0] + a[1] / a[3]) / a[2], -a[5])
            for a in wide:
                key = ((a[0] + a[1] / residual) / a[2], -a[5])
                if best_key is None or key > best_key:
                    best, best_key = a, key
            if best is None:
                break
            n = min(residual, best[3])
            alloc[best[6]] = n
            taken.add(best[5])
            residual -= n
        return alloc

    def next_review(self, snap: Snapshot, alloc: Allocation) -> float | None:
        demand = snap.demand if snap.demand is not None else sum(j.spec.max_gpus for j in snap.jobs)
        if demand <= snap.capacity:
            return None
        return snap.now + self.quantum

    def describe(self) -> dict:
        return {"policy": self.name, "quantum_s": self.quantum}
