"""SRTF: shortest remaining *time* first (remaining work at the job's best allocation)."""

from __future__ import annotations

from pcs_ray.policies.base import Allocation, SchedulingPolicy, greedy_fill
from pcs_ray.jobs.state import Snapshot


class SRTFPolicy(SchedulingPolicy):
    """Unlike SRSF, a wide job that would finish soon on all its GPUs goes first."""

    name = "srtf"

    def allocate(self, snap: Snapshot) -> Allocation:
        return greedy_fill(self.order(snap), snap.capacity)

    def order(self, snap: Snapshot) -> list:
        return sorted(snap.jobs, key=lambda j: (j.remaining_time(), j.spec.submit_time, j.spec.job_id))
