"""AFS-L read from the AFS paper (Hwang et al., NSDI'21): GPU by GPU, to the shortest job unless
another job gains relatively more throughput than it is longer.

Source: the paper's description of AFS-L, as this project first implemented
it. The PCS artifact's AFS (``afs``) compares relative gains differently and
gives every waiting job a GPU first; this reading makes linear scaling SRTF.
"""

from __future__ import annotations

from pcs_ray.policies.base import Allocation, SchedulingPolicy, top_up
from pcs_ray.jobs.state import Snapshot


class AFSLPolicy(SchedulingPolicy):
    """Each GPU goes to A, the job with the shortest remaining time at its
    current allocation, unless a job B would gain more throughput from it by
    a larger factor than B is longer than A (gain_B/gain_A > len_B/len_A);
    then B becomes A and the scan goes on. Linear scaling makes this SRTF;
    sub-linear scaling spreads GPUs to where they help most."""

    name = "afs-l"

    def allocate(self, snap: Snapshot) -> Allocation:
        alloc: Allocation = {}
        free = snap.capacity
        while free > 0:
            candidates = []
            for job in snap.jobs:
                spec = job.spec
                n = alloc.get(spec.job_id, 0)
                step = spec.max_gpus if spec.rigid else (spec.min_gpus if n == 0 else 1)
                if n + step > spec.max_gpus or step > free:
                    continue
                length = job.remaining / spec.speedup[max(n, 1)]
                gain = (spec.speedup[n + step] - spec.speedup[n]) / step
                candidates.append((length, spec.submit_time, spec.job_id, gain, step))
            if not candidates:
                break
            candidates.sort()
            a_len, _, a_id, a_gain, a_step = candidates[0]
            for b_len, _, b_id, b_gain, b_step in candidates[1:]:
                if b_gain * a_len > a_gain * b_len:
                    a_len, a_id, a_gain, a_step = b_len, b_id, b_gain, b_step
            alloc[a_id] = alloc.get(a_id, 0) + a_step
            free -= a_step
        return top_up(snap.jobs, alloc, snap.capacity)
