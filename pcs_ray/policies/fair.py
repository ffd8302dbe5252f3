"""Max-min fair share: water-filling in whole GPUs, ties to the earliest arrival."""

from __future__ import annotations

import heapq

from pcs_ray.policies.base import Allocation, SchedulingPolicy, top_up
from pcs_ray.jobs.state import Snapshot


class FairSharePolicy(SchedulingPolicy):
    """One GPU at a time to the job holding the fewest, capped at demand.

    Rigid jobs take their whole demand when their turn comes, if it fits.
    """

    name = "fair"
    reads_progress = False

    def allocate(self, snap: Snapshot) -> Allocation:
        alloc: Allocation = {}
        free = snap.capacity
        heap = [(0, i, j) for i, j in enumerate(snap.jobs)]
        while free > 0 and heap:
            have, i, job = heapq.heappop(heap)
            spec = job.spec
            step = spec.max_gpus if spec.rigid else (spec.min_gpus if have == 0 else 1)
            if step > free or have + step > spec.max_gpus:
                continue
            alloc[spec.job_id] = have + step
            free -= step
            if have + step < spec.max_gpus:
                heapq.heappush(heap, (have + step, i, job))
        return top_up(snap.jobs, alloc, snap.capacity)
