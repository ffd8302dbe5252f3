"""SRSF: Tiresias with known sizes (Tiresias-G), shortest remaining service first."""

from __future__ import annotations

from pcs_ray.policies.base import Allocation, SchedulingPolicy, greedy_fill
from pcs_ray.state import Snapshot


class SRSFPolicy(SchedulingPolicy):
    """Remaining service is GPU-seconds at one GPU, so wide and long jobs wait alike."""

    name = "srsf"

    def allocate(self, snap: Snapshot) -> Allocation:
        order = sorted(snap.jobs, key=lambda j: (j.remaining, j.spec.submit_time, j.spec.job_id))
        return greedy_fill(order, snap.capacity)
