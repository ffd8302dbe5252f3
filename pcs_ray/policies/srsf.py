"""SRSF: Tiresias with known sizes (Tiresias-G), shortest remaining service first."""

from __future__ import annotations

from pcs_ray.policies.base import Allocation, SchedulingPolicy, greedy_fill
from pcs_ray.jobs.state import Snapshot


class SRSFPolicy(SchedulingPolicy):
    """Remaining service is the GPU-seconds a job still needs at its full demand,
    demand x remaining / speedup(demand), so wide and long jobs wait alike.

    Source: the PCS artifact's SRSF key. Under linear scaling it is the
    remaining 1-GPU service; a sub-linear job counts the GPU-seconds its
    scaling wastes.
    """

    name = "srsf"

    def allocate(self, snap: Snapshot) -> Allocation:
        # max_gpus / speedup is exactly 1.0 for a linear table, so linear keys equal the 1-GPU service.
        order = sorted(snap.jobs, key=lambda j: (j.remaining * (j.spec.max_gpus / j.spec.speedup[j.spec.max_gpus]),
                                                 j.spec.submit_time, j.spec.job_id))
        return greedy_fill(order, snap.capacity)
