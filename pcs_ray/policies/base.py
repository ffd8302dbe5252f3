"""The one interface every scheduling policy implements.

A policy answers *how many* GPUs each active job gets; placement (which GPUs)
is a separate concern. Most policies are pure: ``allocate`` depends only on
the snapshot, so the simulator, the predictor, the solver and the live
coordinator share one object. A policy that learns as it decides (the
power-aware ones remember which workloads have run) says so by overriding
``fork``: every forward play decides with its own copy, so a forecast can
never change what the live schedule decides next.
"""

from __future__ import annotations

import copy

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import ClassVar

from pcs_ray.policies.reasons import WaitCode, WaitReason, waiting_for_gpus
from pcs_ray.jobs.state import JobState, Snapshot

Allocation = dict[int, int]  # job_id -> GPU count (jobs left out get 0)


class AllocationError(RuntimeError):
    """A policy returned an allocation that breaks capacity or demand: a bug, not user error."""


class SchedulingPolicy(ABC):
    """Decides GPU counts. Subclasses set ``name`` and implement ``allocate``."""

    name: ClassVar[str]
    #: Whether ``allocate`` reads ``remaining``/``attained``. The engine brings
    #: progress up to date before each round only for policies that do.
    reads_progress: ClassVar[bool] = True
    #: Whether ``allocate`` depends on nothing but the capacity and which jobs are active (their specs,
    #: in arrival order): not on time, progress, GPUs held or state of its own. A policy around it
    #: (``tenants``) then reuses a decision while those stay the same.
    membership_only: ClassVar[bool] = False
    #: Round length in seconds when the policy decides only at multiples of it (Blox's rounds,
    #: ``pcs_ray.sim.semantics``): arrivals wait for the next boundary and a finished job holds its
    #: GPUs until it. None: continuous time, a decision at every event.
    round_s: float | None = None
    #: Whether ``allocate`` leaves a GPU idle only when no active job can use it (the PCS
    #: setting). Backfilling schedulers keep GPUs free for a reserved job and say False.
    work_conserving: ClassVar[bool] = True
    #: Period (s) of reviews the policy asks for only while they can change something
    #: (``next_review``). The engine counts the ones it skips as events all the same, since the
    #: PCS artifact's Themis counts every quantum in a job's observed contention. None: no quantum.
    quantum: float | None = None

    @abstractmethod
    def allocate(self, snap: Snapshot) -> Allocation:
        """GPU count per active job. Unless the class says ``work_conserving = False``,
        a GPU stays idle only if no active job can use it."""

    def fork(self) -> "SchedulingPolicy":
        """The policy a forward play decides with. A pure policy is its own fork (no copy, no cost);
        a policy whose decisions change its own state returns a copy holding that state, so that
        what a play decides stays in the play."""
        return self

    def fork_around(self, inner: "SchedulingPolicy") -> "SchedulingPolicy":
        """``fork`` for a policy that wraps ``inner`` and keeps no state of its own: itself while the inner
        policy is pure, else a shallow copy around the inner policy's fork (held as ``self.inner``)."""
        forked = inner.fork()
        if forked is inner:
            return self
        other = copy.copy(self)
        other.inner = forked
        return other

    def order(self, snap: Snapshot) -> Iterable[JobState] | None:
        """The active jobs in priority order, for a policy that is a priority order filled greedily
        (what strict-priority semantics walks, ``pcs_ray.sim.semantics``); None: it is not one."""
        return None

    def make_index(self, jobs: Iterable[JobState]):
        """An incrementally maintained view of the active jobs (``add``/``remove``),
        for policies whose ``allocate`` would otherwise rescan every job on every
        event. The engine owns it and rebuilds it for each fork; None: no index."""
        return None

    def fork_index(self, index, jobs: Mapping[int, JobState]):
        """The index of a fork of the engine whose ``index`` this policy's original made, for the fork's
        ``jobs`` (id -> its copy of each active job, in arrival order): by default made again."""
        return self.make_index(jobs.values())

    def next_review(self, snap: Snapshot, alloc: Allocation) -> float | None:
        """Time at which ``allocate`` must run again even if nothing else happens
        (a lease expiry, a priority demotion). ``None``: only on events."""
        return None

    def completion_bound(self, snap: Snapshot, job: JobState) -> float | None:
        """Worst-case finish time of ``job`` whatever arrives later, if the policy guarantees one."""
        return None

    def bound_reads(self, snap: Snapshot, job: JobState) -> Iterable[JobState] | None:
        """The jobs whose progress ``completion_bound(snap, job)`` reads, which the caller brings up to date
        first; None: any job's. A policy without a bound reads none."""
        return () if type(self).completion_bound is SchedulingPolicy.completion_bound else None

    def why_waiting(self, snap: Snapshot, alloc: Allocation) -> dict[int, WaitReason]:
        """Why each active job without GPUs in ``alloc`` (this policy's decision on ``snap``) has none.
        A policy with a rule of its own says so; the default names the GPUs the job needs and the free ones."""
        return {j.spec.job_id: waiting_for_gpus(snap, alloc, j) for j in snap.jobs if not alloc.get(j.spec.job_id)}

    def why_waiting_later(self, snap: Snapshot, alloc: Allocation) -> Callable[..., dict[int, WaitReason]]:
        """``why_waiting`` as a call to make later, when ``snap`` may have moved on: what it reads is taken
        now, the reasons are written by the call (a reader writes them outside the coordinator's lock), which
        may call the ``pause`` it is given now and then. The default writes them now; a policy whose reasons
        read little of the snapshot takes only that."""
        reasons = self.why_waiting(snap, alloc)
        return lambda pause=None: reasons

    def waiting_codes(self, snap: Snapshot, alloc: Allocation) -> dict[int, WaitCode]:
        """``why_waiting``'s codes alone, for a count of wait reasons (the metrics): a policy whose reasons'
        texts cost a string per waiting job overrides it with the codes without the texts."""
        return {jid: why.code for jid, why in self.why_waiting(snap, alloc).items()}

    def why_job_waits(self, snap: Snapshot, alloc: Allocation, job: JobState) -> WaitReason | None:
        """``why_waiting``'s reason for one job (None: it has GPUs in ``alloc``, or no reason). A policy
        whose ``why_waiting`` walks every job overrides this with a walk of what that one job's reason reads."""
        return self.why_waiting(snap, alloc).get(job.spec.job_id)

    def queue_form(self):
        """A ``WFQPolicy`` that allocates exactly as this policy does on every snapshot, or None.

        Forward plays of such policies take the simulator's incremental path
        (only the queues an event touches are recomputed).
        """
        return None

    def describe(self) -> dict:
        return {"policy": self.name}


def greedy_fill(order: Iterable[JobState], capacity: int, limit=None) -> Allocation:
    """Give each job, in priority order, as many GPUs as it can use.

    GPUs a job cannot use go to the next job (work conservation, as in PCS's
    evaluation). Rigid jobs get all their GPUs or none; ``limit(job)`` can cap
    a job below its demand.
    """
    alloc: Allocation = {}
    free = capacity
    for job in order:
        if free <= 0:
            break
        spec = job.spec
        want = spec.max_gpus if limit is None else limit(job)
        n = want if want < free else free  # not min(): this runs for every job in every round
        if n >= spec.min_gpus and n > 0:
            alloc[spec.job_id] = n
            free -= n
    return alloc


def top_up(order: Iterable[JobState], alloc: Allocation, capacity: int) -> Allocation:
    """Hand GPUs still free after a policy's own rule to jobs in ``order`` (work conservation)."""
    free = capacity - sum(alloc.values())
    if free <= 0:
        return alloc
    for job in order:
        spec = job.spec
        have = alloc.get(spec.job_id, 0)
        extra = min(spec.max_gpus - have, free)
        if extra <= 0 or have + extra < spec.min_gpus:
            continue
        if spec.rigid and have == 0 and extra < spec.max_gpus:
            continue
        alloc[spec.job_id] = have + extra
        free -= extra
        if free == 0:
            break
    return alloc


def validate_allocation(snap: Snapshot, alloc: Allocation, policy: str) -> None:
    """The caller's check: never trust a policy with capacity or demand."""
    # The engine's snapshot is a view of its id -> job dict: read that instead of copying every job.
    by_id = getattr(snap.jobs, "mapping", None) or {j.spec.job_id: j for j in snap.jobs}
    total = 0
    for jid, n in alloc.items():
        _check_count(by_id.get(jid), jid, n, policy)
        total += n
    _check_total(total, snap.capacity, policy)


def validate_changes(active: Mapping[int, JobState], alloc: Allocation, changed: Iterable[int], left: Iterable[int],
                     busy: int, capacity: int, policy: str) -> None:
    """``validate_allocation`` for a caller that validated the last allocation and knows what changed since: the
    jobs whose count ``alloc`` changes (``changed``, each active job's ``alloc`` the count it holds, ``busy`` their
    sum) and the jobs that left the active ones since (``left``). A job whose count did not change passed the
    check with the same spec, so an event costs the jobs it changes, not every job allocated."""
    for jid in left:
        if jid in alloc and jid not in active:
            _check_count(None, jid, alloc[jid], policy)
    total = busy
    for jid in changed:
        job = active.get(jid)
        n = alloc.get(jid, 0)
        _check_count(job, jid, n, policy)
        total += n - job.alloc
    _check_total(total, capacity, policy)


def _check_count(job: JobState | None, jid: int, n: int, policy: str) -> None:
    if job is None:
        raise AllocationError(f"{policy}: allocated GPUs to unknown job {jid}")
    if n < 0 or n > job.spec.max_gpus or (0 < n < job.spec.min_gpus):
        raise AllocationError(f"{policy}: job {jid} got {n} GPUs, demand is {job.spec.min_gpus}..{job.spec.max_gpus}")


def _check_total(total: int, capacity: int, policy: str) -> None:
    if total > capacity:
        raise AllocationError(f"{policy}: allocated {total} GPUs on a {capacity}-GPU cluster")
