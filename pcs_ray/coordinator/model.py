"""The coordinator's model of the cluster: a simulator ``Engine`` kept in step with reality.

The live coordinator does not re-implement scheduling: it admits jobs into
the same :class:`~pcs_ray.simulator.Engine` the simulator uses, overwrites
each job's remaining service with what its runner measured, and asks the
engine to reallocate (counts from the policy, GPU ids from placement).
Predictions are the engine's own forward play on a fork, exactly what
``simulate`` does per arrival; bounds come from the policy.

The engine never decides that a job has finished: only its runner does. A
job whose modelled finish has passed is kept a sliver of work short of done.
"""

from __future__ import annotations

from pcs_ray.cluster import ClusterSpec
from pcs_ray.job import JobSpec
from pcs_ray.placement import create_placement
from pcs_ray.policies.base import SchedulingPolicy
from pcs_ray.simulator import Engine
from pcs_ray.state import JobState


def default_placement(cluster: ClusterSpec):
    """Packed-Sticky (Tiresias): a job keeps its GPUs until its count changes."""
    return create_placement("packed-sticky", cluster)


def placement_changes_rates(cluster: ClusterSpec) -> bool:
    """Whether which GPUs a job gets can change its speed (scores, links or a locality penalty)."""
    if cluster.locality_penalty > 1.0 or any(node.topology for node in cluster.nodes):
        return True
    return any(s != 1.0 for node in cluster.nodes for gpu in node.gpus for s in gpu.scores.values())


class ClusterModel:
    """One ``Engine`` plus the operations the coordinator needs on it. Times are coordinator seconds."""

    #: Work (fraction of one step) left in a job the model thinks is done but the runner has not reported.
    SLIVER = 0.05

    def __init__(self, cluster: ClusterSpec, policy: SchedulingPolicy, placement=None) -> None:
        self.cluster = cluster
        self.policy = policy
        self.placement = default_placement(cluster) if placement is None else placement
        self.engine = Engine(cluster.num_gpus, policy, placement=self.placement, check=True)
        self.placement_matters = placement_changes_rates(cluster)

    # -- membership ------------------------------------------------------------
    def admit(self, spec: JobSpec) -> None:
        self.engine.admit(spec)

    def remove(self, job_id: int) -> None:
        job = self.engine.active.get(job_id)
        if job is not None:
            self.engine.remove([job])

    def __contains__(self, job_id: int) -> bool:
        return job_id in self.engine.active

    # -- keeping the model true --------------------------------------------------
    def set_clock(self, now: float) -> None:
        self.engine.set_clock(now)

    def set_remaining(self, job_id: int, remaining: float, stall_until: float = 0.0) -> None:
        """Overwrite a job's remaining service (GPU-seconds at one nominal GPU) as of now."""
        self.engine.set_remaining(job_id, remaining, stall_until)

    def reallocate(self) -> None:
        self.engine.reallocate()

    # -- reading it ------------------------------------------------------------
    def state(self, job_id: int) -> JobState:
        return self.engine.active[job_id]

    def gpus(self, job_id: int) -> tuple[int, ...]:
        job = self.engine.active.get(job_id)
        return tuple(sorted(job.gpus)) if job is not None and job.alloc else ()

    def slowdown(self, job_id: int) -> float:
        return self.engine.active[job_id].slowdown

    def predict(self) -> dict[int, float]:
        """Finish time of every active job if nothing else arrives (a forward play on a fork)."""
        if not self.engine.active:
            return {}
        fork = self.engine.fork()
        if not self.placement_matters:
            fork.placement = None  # every GPU set runs every job at the same rate: counts decide alone
        return fork.play_forward()

    def bound(self, job_id: int) -> float | None:
        e = self.engine
        return self.policy.completion_bound(e.snapshot(), e.active[job_id])
