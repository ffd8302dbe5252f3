"""AFS as the PCS evaluation runs it: Algorithm C of the AFS paper (Hwang et al., NSDI'21),
one GPU at a time to the job with the best relative speedup gain.

Source: the PCS artifact's simulator (``AFSScheduler``), read to learn its
rule. Every round starts from zero GPUs each. For each GPU a pairwise scan
over the jobs that can still take one (arrival order) keeps a candidate;
against the next job it compares l, the one with the shorter remaining time
at its current count, with the other, h, by

    l if (s_l(n_l+1) - s_l(n_l)) / s_l(n_l) > (s_h(n_h+1) - s_h(n_h)) / s_h(n_h+1) else h,

where s(n) = 1 / (remaining / speedup(n) + 1e-7) is the job's speed at n
GPUs (0 at none). The artifact divides l's gain by its speed before the GPU
and h's by its speed after it; we keep that. Two consequences, used below to
run in O(n log n + G^2) instead of O(G n) per round: a job without a GPU
beats every job holding one (its gain counts as 1, which no concave curve
beats), and among jobs without one the fastest at one GPU wins, the later
arrival on a tie. So the first GPUs go one each to the jobs with the least
remaining service; only what is left after every job holds one goes through
the pairwise scan.

Rigid jobs (min GPUs > 1, not in the artifact) take their minimum as one step.
"""

from __future__ import annotations

from pcs_ray.policies.base import Allocation, SchedulingPolicy
from pcs_ray.jobs.state import JobState, Snapshot

EPS = 1e-7


def _speed(job: JobState, n: int) -> float:
    """1 / (remaining time at ``n`` GPUs + EPS), 0 without GPUs."""
    if n <= 0:
        return 0.0
    return 1.0 / (job.remaining / job.spec.speedup[n] + EPS)


class AFSPolicy(SchedulingPolicy):
    name = "afs"

    def allocate(self, snap: Snapshot) -> Allocation:
        free = snap.capacity
        alloc: Allocation = {}
        # Jobs without GPUs, fastest at their first step first (later arrival on a tie).
        waiting = sorted(
            ((-_speed(job, job.spec.min_gpus), -i, job) for i, job in enumerate(snap.jobs)),
            key=lambda e: (e[0], e[1]),
        )
        for _, _, job in waiting:
            if free == 0:
                return alloc
            step = job.spec.min_gpus
            if step <= free:
                alloc[job.spec.job_id] = step
                free -= step
        # Every job that could take a first step has one: the pairwise scan, in arrival order.
        open_ = [j for j in snap.jobs if 0 < alloc.get(j.spec.job_id, 0) < j.spec.max_gpus]
        while free > 0 and open_:
            cand = open_[0]
            nc = alloc[cand.spec.job_id]
            for m in open_[1:]:
                nm = alloc[m.spec.job_id]
                if m.remaining / m.spec.speedup[nm] < cand.remaining / cand.spec.speedup[nc]:
                    low, nl, high, nh = m, nm, cand, nc
                else:
                    low, nl, high, nh = cand, nc, m, nm
                l0, l1 = _speed(low, nl), _speed(low, nl + 1)
                h0, h1 = _speed(high, nh), _speed(high, nh + 1)
                if (l1 - l0) / l0 > (h1 - h0) / h1:
                    cand, nc = low, nl
                else:
                    cand, nc = high, nh
            alloc[cand.spec.job_id] = nc + 1
            free -= 1
            if nc + 1 == cand.spec.max_gpus:
                open_.remove(cand)
        return alloc
