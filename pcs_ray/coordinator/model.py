"""The coordinator's model of the cluster: a simulator ``Engine`` kept in step with the live jobs.

The live coordinator does not re-implement scheduling: it admits jobs into
the same :class:`~pcs_ray.sim.engine.Engine` the simulator uses, overwrites
each job's remaining service with what the speed model makes of its runner's
reports (:meth:`ClusterModel.sync`), and asks the engine to reallocate
(counts from the policy, GPU ids from placement). Predictions are the
engine's own forward play on a fork, exactly what ``simulate`` does per
arrival; bounds come from the policy. Only the engine's public methods are
used.

The engine never decides that a job has finished: only its runner does. A
job whose modelled finish has passed is kept a sliver of work short of done.
"""

from __future__ import annotations

from collections.abc import Mapping

from pcs_ray.cluster import ClusterSpec
from pcs_ray.coordinator.jobs import LiveJob
from pcs_ray.coordinator.speed import SpeedModel
from pcs_ray.forecast import BranchPoints
from pcs_ray.jobs.spec import JobSpec
from pcs_ray.placement import create_placement
from pcs_ray.policies.base import SchedulingPolicy
from pcs_ray.policies.rush import SkipTable
from pcs_ray.policies.tail_bounds import TailBounds, keeps_tail_bounds
from pcs_ray.sim.engine import Engine


def default_placement(cluster: ClusterSpec):
    """Packed-Sticky (Tiresias): a job keeps its GPUs until its count changes."""
    return create_placement("packed-sticky", cluster)


def placement_changes_rates(cluster: ClusterSpec) -> bool:
    """Whether which GPUs a job gets can change its speed (scores, links or a locality penalty)."""
    if cluster.locality_penalty > 1.0 or any(node.topology for node in cluster.nodes):
        return True
    return any(s != 1.0 for node in cluster.nodes for gpu in node.gpus for s in gpu.scores.values())


def job_spec(job: LiveJob, speed: SpeedModel) -> JobSpec:
    """The simulator's view of a live job: its size in GPU-seconds at the speed model's ``t1``."""
    return JobSpec(
        job_id=job.job_id, submit_time=job.submit, service=job.total_steps() * job.t1,
        max_gpus=job.spec.gpus, speedup=speed.speedup(job.spec), min_gpus=job.spec.fewest_gpus,
        model=job.spec.workload, job_class=job.spec.job_class, name=job.spec.name,
        tenant=job.spec.tenant or "", user=job.spec.user or "", min_runtime_s=job.spec.min_runtime_s,
    )


class ClusterModel:
    """One ``Engine`` plus the operations the coordinator needs on it. Times are coordinator seconds."""

    def __init__(self, cluster: ClusterSpec, policy: SchedulingPolicy, placement=None) -> None:
        self.cluster = cluster
        self.policy = policy
        self.placement = default_placement(cluster) if placement is None else placement
        self.engine = Engine(cluster.num_gpus, policy, placement=self.placement, check=True)
        self.placement_matters = placement_changes_rates(cluster)
        self._speed_version = -1
        self._synced: tuple | None = None  # (now, speed model version, engine decisions) of the last sync
        self.tail_bounds = self._tail_bounds()

    def _tail_bounds(self) -> TailBounds | None:
        """The policy's bound of a queue's tail kept as jobs change, where it has one (``TailBounds``)."""
        if not keeps_tail_bounds(self.policy):
            return None
        return TailBounds(self.policy, self.cluster.num_gpus, self.engine.active.values())

    # -- membership ------------------------------------------------------------
    def admit(self, spec: JobSpec) -> None:
        self.engine.admit(spec)
        self._changed((spec.job_id,))

    def readmit(self, spec: JobSpec) -> None:
        """The job changed size: placement decides its GPUs afresh."""
        self.engine.readmit(spec)
        self._changed((spec.job_id,))

    def remove(self, job_id: int) -> None:
        job = self.engine.job(job_id)
        if job is not None:
            self.engine.remove([job])
        if self.tail_bounds is not None:
            self.tail_bounds.drop(job_id)

    def _changed(self, job_ids) -> None:
        """Jobs whose allocation, remaining work or size may have changed: their bound's terms follow."""
        if self.tail_bounds is not None:
            for jid in job_ids:
                job = self.engine.job(jid)
                if job is not None:
                    self.tail_bounds.update(job)

    def __contains__(self, job_id: int) -> bool:
        return self.engine.job(job_id) is not None

    def set_policy(self, policy: SchedulingPolicy) -> None:
        self.policy = policy
        self.engine.set_policy(policy)
        self.tail_bounds = self._tail_bounds()

    # -- keeping the model true --------------------------------------------------
    def sync(self, now: float, jobs: Mapping[int, LiveJob], dirty: set[int], speed: SpeedModel) -> None:
        """Bring the engine to ``now``: every running or changed (``dirty``, emptied here) job's remaining
        work and when it can next progress, as the speed model sees them. A sync at the same time, with no
        job changed, the same estimates and no decision since the last one, would write what is there
        already: it is skipped (a submission syncs before its decision, its forecast and its reply)."""
        synced = (now, speed.version, self.engine.events)
        if not dirty and synced == self._synced:
            return
        self.engine.set_clock(now)
        if speed.version != self._speed_version:  # estimates moved: every job's work and costs follow
            self._speed_version = speed.version
            dirty.update(jobs)
        written = set(self.engine.running_ids()) | dirty
        for jid in written:
            job = jobs.get(jid)
            if job is None or jid not in self:
                continue
            self._refresh_speedup(job, speed)
            self.engine.set_costs(jid, *speed.job_costs(job))
            table = self.engine.job(jid).spec.speedup
            self.engine.set_remaining(jid, speed.remaining(job, now, table), speed.stall_until(job, now))
        self._changed(dirty)  # running jobs' terms are not kept: the bound reads them as it is asked
        dirty.clear()
        self._synced = synced

    def _refresh_speedup(self, job: LiveJob, speed: SpeedModel) -> None:
        """User code's scaling is learned as it runs on new GPU counts: a job that holds no GPUs is
        re-admitted with the table the speed model has now. A running job keeps the table it was
        placed with until it stops (re-admitting it would let placement move it)."""
        state = self.engine.job(job.job_id)
        if not job.spec.user_code or state.alloc:
            return
        table = speed.speedup(job.spec)
        if any(abs(a - b) > 1e-9 * max(1.0, abs(b)) for a, b in zip(table, state.spec.speedup)):
            self.readmit(job_spec(job, speed))

    def reallocate(self) -> None:
        before = set(self.engine.running)
        self.engine.reallocate()
        self._changed(before.symmetric_difference(self.engine.running))

    def take_skips(self) -> list[tuple[int, int, str]]:
        """(job id, its skip count, reason) of every start the policy skipped since the last call (RUSH's
        start function), for the journal; empty for a policy that never skips."""
        table = self.engine.snapshot().index
        if not isinstance(table, SkipTable) or not table.log:
            return []
        taken = [(jid, table.skips.get(jid, 0), reason) for _, jid, reason in table.log]
        table.log.clear()
        return taken

    def restore_skips(self, job_id: int, count: int) -> None:
        """A journaled skip count, back in the policy's table after a restart (the threshold holds across it)."""
        table = self.engine.snapshot().index
        if isinstance(table, SkipTable) and job_id in self:
            table.skips[job_id] = max(table.skips.get(job_id, 0), count)

    # -- reading it ------------------------------------------------------------
    def gpus(self, job_id: int) -> tuple[int, ...]:
        job = self.engine.job(job_id)
        return tuple(sorted(job.gpus)) if job is not None and job.alloc else ()

    def plan(self) -> dict[int, tuple[int, ...]]:
        """The GPUs of every job the model runs (the others get none)."""
        engine = self.engine
        return {jid: tuple(sorted(engine.job(jid).gpus)) for jid in engine.running_ids()}

    def slowdown(self, job_id: int) -> float:
        return self.engine.job(job_id).slowdown

    def review_time(self) -> float | None:
        return self.engine.review_time()

    def play_ahead(self, until: int | None = None) -> dict[int, float]:
        """Finish time of every active job if nothing else arrives (a forward play on a fork).

        Where every GPU set runs every job at the same rate, counts decide alone (placement is left out).
        ``until``: the play stops once that job's finish is known (``Engine.play_forward``).
        """
        return self.engine.play_ahead(placement=self.placement_matters, until=until)

    def play_detached(self) -> BranchPoints | None:
        """``play_ahead`` as a play that can run while the model moves on (``Engine.play_detached``) and
        keeps where a later submission's forecast can branch from it (``BranchPoints.run``), or None."""
        play = self.engine.play_detached(placement=self.placement_matters)
        return None if play is None else BranchPoints(play)

    def play_branch(self, points: BranchPoints, job_id: int, since_id: int) -> dict[int, float] | None:
        """``play_ahead(until=job_id)`` for a job just admitted, played from ``points`` (an earlier whole
        play) instead of the whole current state, with the jobs admitted since that play (ids from
        ``since_id`` on) that still wait; None where the job holds GPUs now or the play cannot take it
        (``BranchPoints.branch``)."""
        engine = self.engine
        job = engine.job(job_id)
        if job is None or job.alloc:
            return None
        earlier = [(j.spec.submit_time, j) for j in map(engine.job, range(since_id, job_id)) if j is not None and not j.alloc]
        return points.branch(job, engine.now, earlier)

    def why_waiting(self) -> dict[int, dict]:
        """Why each job the model gives no GPUs has none (``SchedulingPolicy.why_waiting``), as dicts."""
        engine = self.engine
        reasons = engine.policy.why_waiting(engine.snapshot(), engine.prev_alloc)
        return {jid: reason.to_dict() for jid, reason in reasons.items()}

    def why_waiting_later(self):
        """``why_waiting`` as a call to make later, outside the caller's lock (``SchedulingPolicy.why_waiting_later``):
        it gives the reasons as they stood now, as objects (``WaitReason``)."""
        engine = self.engine
        return engine.policy.why_waiting_later(engine.snapshot(), engine.prev_alloc)

    def waiting_codes(self) -> dict[int, str]:
        """``why_waiting``'s codes alone (``SchedulingPolicy.waiting_codes``: no text per waiting job)."""
        engine = self.engine
        return {jid: code.value for jid, code in engine.policy.waiting_codes(engine.snapshot(), engine.prev_alloc).items()}

    def why_job_waits(self, job_id: int) -> dict | None:
        """``why_waiting`` of one job in the model (``SchedulingPolicy.why_job_waits``)."""
        engine = self.engine
        reason = engine.policy.why_job_waits(engine.snapshot(), engine.prev_alloc, engine.job(job_id))
        return None if reason is None else reason.to_dict()

    def time_left(self, job_id: int) -> float | None:
        """Seconds the job still needs on the GPUs it holds (its fewest, waiting), as last synced, with
        nothing else in its way; None for a job not in the model."""
        job = self.engine.job(job_id)
        if job is None:
            return None
        n = job.alloc or job.spec.min_gpus
        return job.remaining / job.rate(n) + max(0.0, job.stall_until - self.engine.now)

    def bound(self, job_id: int) -> float | None:
        """The policy's worst-case finish of the job; of a queue's tail (a submission) from ``TailBounds``."""
        engine = self.engine
        if self.tail_bounds is not None:
            return self.tail_bounds.bound(engine.snapshot(), engine.job(job_id), engine.running.values())
        return self.policy.completion_bound(engine.snapshot(), engine.job(job_id))
