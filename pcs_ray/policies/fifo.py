"""FIFO (YARN's default): arrival order, each job as many GPUs as it can use."""

from __future__ import annotations

from pcs_ray.policies.base import Allocation, SchedulingPolicy, greedy_fill
from pcs_ray.policies.wfq import WFQConfig, WFQPolicy, fifo_queue_bound
from pcs_ray.jobs.state import JobState, Snapshot


class FIFOPolicy(SchedulingPolicy):
    """Non-preemptive in effect: a later arrival never takes GPUs from an earlier one."""

    name = "fifo"
    reads_progress = False
    membership_only = True

    def allocate(self, snap: Snapshot) -> Allocation:
        return greedy_fill(snap.jobs, snap.capacity)

    def order(self, snap: Snapshot):
        return snap.jobs

    def queue_form(self) -> WFQPolicy:
        # One queue, no efficiency cap: the first pass is greedy_fill, and relax and top-up find nothing left.
        return _ONE_QUEUE

    def completion_bound(self, snap: Snapshot, job: JobState) -> float | None:
        return fifo_queue_bound(snap, list(snap.jobs), job, snap.capacity, zeta=0.0)


_ONE_QUEUE = WFQPolicy(WFQConfig((float("inf"),), (1.0,)))
