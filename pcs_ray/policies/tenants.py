"""Two-level scheduling for a cluster that teams share: tenant quotas with borrowing above any policy.

The tenant level divides GPUs among tenants with active jobs:

1. each tenant gets up to its guaranteed quota, as far as its jobs can use it;
2. GPUs still free (other tenants' idle quota, and any capacity no quota
   covers) are lent to tenants that can use more, in proportion to their
   weights, none above its borrowing limit;
3. since the division is made afresh at every decision, a lender whose jobs
   arrive takes its quota back at once: step 1 comes first, so a borrower's
   share shrinks and the inner policy stops or shrinks its jobs.

Inside a tenant, the inner policy (PCS WFQ by default) divides that tenant's
GPUs exactly as it divides a cluster of that size. GPUs a tenant's jobs cannot
use at its share (rigid jobs that do not fit) go back to the others.

A minimum runtime (:class:`~pcs_ray.tenants.spec.MinRuntime`) keeps a young run's
GPUs: such a run is neither preempted nor shrunk (it may grow into GPUs no
other job can use), its GPUs count towards its tenant's share, and the inner
policy divides the rest. Only a lender
reclaiming its quota may take GPUs from a tenant whose young runs hold more
than its quota, and only when the operator allows it (``reclaim``).

Without tenants every job is in one group with the whole cluster, and with no
minimum runtime the inner policy decides alone, exactly as without this layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pcs_ray.policies.base import Allocation, SchedulingPolicy
from pcs_ray.policies.reasons import WaitCode, WaitReason, gpus_plural, waiting_for_gpus
from pcs_ray.policies.water_fill import water_fill
from pcs_ray.jobs.state import JobState, Snapshot
from pcs_ray.tenants.spec import MinRuntime, Tenant, TenantsFile

#: The tenant of jobs that name none, or that name one the configuration does not declare.
_GUEST = Tenant(quota=0)


def weighted_fill(amount: int, wants: Sequence[int], weights: Sequence[float]) -> list[int]:
    """Split ``amount`` GPUs by weight, none above its want (WFQ's water-filling, ties to the earlier position)."""
    return water_fill(amount, wants, weights)[0]


def tenant_shares(capacity: int, tenants: Sequence[Tenant], demand: Sequence[int], floors: Sequence[int]) -> list[int]:
    """GPUs per tenant: ``floors`` (GPUs it cannot give up) first, then each tenant's quota as far as its
    ``demand`` reaches (by weight if the floors leave too few), then the rest lent by weight up to each
    ceiling. ``tenants[i].quota`` is tenant ``i``'s guarantee."""
    shares = list(floors)
    left = capacity - sum(shares)
    wants = [max(0, min(t.quota, d) - f) for t, d, f in zip(tenants, demand, floors)]
    weights = [t.weight for t in tenants]
    for i, n in enumerate(weighted_fill(left, wants, weights)):
        shares[i] += n
        left -= n
    wants = [max(0, int(min(d, t.ceiling)) - s) for t, d, s in zip(tenants, demand, shares)]
    for i, n in enumerate(weighted_fill(left, wants, weights)):
        shares[i] += n
    return shares


class _TenantIndex:
    """Each tenant's active jobs in arrival order, with the inner policy's index of them."""

    __slots__ = ("policy", "groups", "inner", "demand", "version", "decided")

    def __init__(self, policy: "TenantPolicy", jobs: Iterable[JobState]) -> None:
        self.policy = policy
        self.groups: dict[str, dict[int, JobState]] = {}
        self.inner: dict[str, object] = {}
        self.demand: dict[str, int] = {}  # summed max_gpus of each tenant's jobs
        self.version: dict[str, int] = {}  # changes whenever the tenant's jobs do
        self.decided: dict[str, tuple[int, int, dict[int, int]]] = {}  # tenant -> (GPUs, version, inner decision)
        for job in jobs:
            self.add(job)

    def add(self, job: JobState) -> None:
        key = self.policy.group_of(job)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = {}
            self.inner[key] = self.policy.inner.make_index(())
            self.demand[key] = 0
            self.version[key] = 0
        group[job.spec.job_id] = job
        self.version[key] += 1
        self.demand[key] += job.spec.max_gpus
        index = self.inner[key]
        if index is not None:
            index.add(job)

    def remove(self, job: JobState) -> None:
        key = self.policy.group_of(job)
        del self.groups[key][job.spec.job_id]
        self.demand[key] -= job.spec.max_gpus
        self.version[key] += 1
        index = self.inner[key]
        if index is not None:
            index.remove(job)


class TenantPolicy(SchedulingPolicy):
    """Tenant quotas and borrowing around an inner policy, with a minimum runtime before preemption.

    Args:
        inner: the policy that divides each tenant's GPUs among its jobs.
        tenants: the tenants, their quotas, weights and borrowing limits, and the minimum runtime
            (a :class:`~pcs_ray.tenants.spec.TenantsFile`); None: no tenants and no minimum runtime.
    """

    name = "tenants"

    def __init__(self, inner: SchedulingPolicy, tenants: TenantsFile | None = None) -> None:
        self.inner = inner
        self.tenants = tenants if tenants is not None else TenantsFile()
        self.min_runtime: MinRuntime = self.tenants.min_runtime
        self.reads_progress = inner.reads_progress
        self.work_conserving = inner.work_conserving
        self.quantum = inner.quantum
        self._order = {name: i for i, name in enumerate(self.tenants.tenants)}

    # -- who is in which group -------------------------------------------------------------
    def group_of(self, job: JobState) -> str:
        """The tenant a job's GPUs come from ("" for every job when there are no tenants)."""
        return job.spec.tenant if self.tenants.tenants else ""

    def tenant(self, key: str, capacity: int) -> Tenant:
        if not self.tenants.tenants:
            return Tenant(quota=capacity)
        return self.tenants.tenants.get(key, _GUEST)

    def make_index(self, jobs) -> _TenantIndex:
        return _TenantIndex(self, jobs)

    def _index(self, snap: Snapshot) -> _TenantIndex:
        index = snap.index
        if isinstance(index, _TenantIndex) and index.policy is self:
            return index
        return _TenantIndex(self, snap.jobs)

    def _groups(self, index: _TenantIndex) -> list[str]:
        """Tenants with active jobs: declared ones in the file's order, then the others by name."""
        keys = [k for k, g in index.groups.items() if g]
        last = len(self._order)
        return sorted(keys, key=lambda k: (self._order.get(k, last), k))

    def young(self, snap: Snapshot) -> dict[int, int]:
        """Runs younger than their minimum runtime, with the GPU count they keep."""
        rule = self.min_runtime
        if not rule.active:
            return {}
        now = snap.now
        pinned = {j.spec.job_id: j.alloc for j in snap.jobs if j.alloc and now - j.since < rule.of(j.spec)}
        if sum(pinned.values()) > snap.capacity:  # the cluster shrank under them: nothing can be kept
            return {}
        return pinned

    # -- the decision -------------------------------------------------------------------------
    def shares(self, snap: Snapshot) -> tuple[dict[str, int], dict[int, int]]:
        """Each tenant's share of GPUs and the young runs kept as they are (``allocate``'s tenant level)."""
        return self._decide(snap)[1:]

    def allocate(self, snap: Snapshot) -> Allocation:
        return self._decide(snap)[0]

    def _decide(self, snap: Snapshot) -> tuple[Allocation, dict[str, int], dict[int, int]]:
        index = self._index(snap)
        keys = self._groups(index)
        pinned = self.young(snap)
        capacity = snap.capacity
        if not pinned and len(keys) <= 1 and not self.tenants.tenants:
            inner = index.inner[keys[0]] if keys else None
            alloc = self.inner.allocate(Snapshot(snap.now, capacity, snap.jobs, inner, snap.demand,
                                                 snap.seen_total, snap.seen_events))
            return alloc, {k: capacity for k in keys}, {}
        groups = [index.groups[k] for k in keys]
        tenants = [self.tenant(k, capacity) for k in keys]
        floors = [sum(pinned.get(jid, 0) for jid in g) for g in groups] if pinned else [0] * len(keys)
        caps = [min(capacity, index.demand[k]) for k in keys]
        if pinned and self.min_runtime.reclaim and sum(
                max(f, min(t.quota, d)) for t, d, f in zip(tenants, caps, floors)) > capacity:
            # A lender wants its quota back from a tenant whose young runs hold more than its quota.
            for i, (t, g) in enumerate(zip(tenants, groups)):
                if floors[i] > t.quota:
                    for jid in g:
                        pinned.pop(jid, None)
                    floors[i] = 0
        while True:
            shares = tenant_shares(capacity, tenants, caps, floors)
            alloc: Allocation = dict(pinned)
            short = False
            for i, (key, group) in enumerate(zip(keys, groups)):
                room = shares[i] - floors[i]
                if room <= 0:
                    continue
                if floors[i]:
                    free = [j for jid, j in group.items() if jid not in pinned]
                    inner_index, demand = None, sum(j.spec.max_gpus for j in free)
                    part = self.inner.allocate(Snapshot(snap.now, room, free, inner_index, demand, snap.seen_total,
                                                        snap.seen_events))
                else:
                    part = self._inner_decision(snap, index, key, room)
                used = sum(part.values())
                alloc.update(part)
                if used < room:
                    caps[i] = floors[i] + used
                    short = True
            if not short or all(c <= s for c, s in zip(caps, shares)):
                break
        if pinned:
            self._grow_young(capacity - sum(alloc.values()), alloc, pinned, groups, tenants)
        return alloc, dict(zip(keys, shares)), pinned

    def _inner_decision(self, snap: Snapshot, index: _TenantIndex, key: str, room: int) -> Allocation:
        """The inner policy's division of ``room`` GPUs among the tenant's jobs; the last one again where
        neither changed and the inner policy decides from them alone (``membership_only``)."""
        version = index.version[key]
        if self.inner.membership_only:
            last = index.decided.get(key)
            if last is not None and last[0] == room and last[1] == version:
                return last[2]
        part = self.inner.allocate(Snapshot(snap.now, room, index.groups[key].values(), index.inner[key],
                                            index.demand[key], snap.seen_total, snap.seen_events))
        if self.inner.membership_only:
            index.decided[key] = (room, version, part)
        return part

    @staticmethod
    def _grow_young(free: int, alloc: Allocation, pinned, groups, tenants) -> None:
        """GPUs nobody else can use go to young runs that can use more (within their tenant's ceiling):
        the protection keeps a run's GPUs, it does not leave GPUs idle."""
        for group, tenant in zip(groups, tenants):
            if free <= 0:
                return
            room = tenant.ceiling - sum(alloc.get(jid, 0) for jid in group)
            for jid, job in group.items():
                if jid not in pinned or room <= 0 or free <= 0:
                    continue
                extra = int(min(job.spec.max_gpus - alloc[jid], free, room))
                if extra > 0:
                    alloc[jid] += extra
                    free -= extra
                    room -= extra

    def next_review(self, snap: Snapshot, alloc: Allocation) -> float | None:
        """The inner policy's reviews, and the end of the youngest protection that holds a job back."""
        at = None
        if type(self.inner).next_review is not SchedulingPolicy.next_review:
            at = self.inner.next_review(snap, alloc)
        if self.min_runtime.active and any(alloc.get(j.spec.job_id, 0) < j.spec.max_gpus for j in snap.jobs):
            now, rule = snap.now, self.min_runtime
            ends = [j.since + rule.of(j.spec) for j in snap.jobs if j.alloc]
            ends = [t for t in ends if t > now]
            if ends:
                end = min(ends)
                at = end if at is None else min(at, end)
        return at

    def why_waiting(self, snap: Snapshot, alloc: Allocation) -> dict[int, WaitReason]:
        """Tenant over its quota, GPUs held by young runs, else the inner policy's reason within the tenant."""
        index = self._index(snap)
        pinned = self.young(snap)
        free = snap.capacity - sum(alloc.values())
        rule = self.min_runtime
        out: dict[int, WaitReason] = {}
        for key in self._groups(index):
            group = index.groups[key]
            waiting = [j for jid, j in group.items() if not alloc.get(jid)]
            if not waiting:
                continue
            held = sum(alloc.get(jid, 0) for jid in group)
            tenant = self.tenant(key, snap.capacity)
            inner = None
            for job in waiting:
                need = job.spec.min_gpus
                young = [j for j in snap.jobs if j.spec.job_id in pinned and j.spec.tenant != key or
                         (not self.tenants.tenants and j.spec.job_id in pinned)]
                if self.tenants.tenants and held >= min(tenant.quota, snap.capacity) and (
                        free < need or held + need > tenant.ceiling):
                    limit = "it may borrow no more" if held + need > tenant.ceiling else "no idle GPUs to borrow"
                    out[job.spec.job_id] = WaitReason(WaitCode.TENANT_QUOTA, f"tenant {key} holds {held} GPUs, its "
                                                      f"quota is {tenant.quota}; {limit}")
                elif young and free < need and free + sum(j.alloc for j in young) >= need:
                    first = min(young, key=lambda j: j.since + rule.of(j.spec))
                    out[job.spec.job_id] = WaitReason(
                        WaitCode.MIN_RUNTIME, f"needs {gpus_plural(need)}, {free} free; runs younger than their minimum "
                                              f"runtime hold the rest (job {first.spec.job_id} for "
                                              f"{first.since + rule.of(first.spec) - snap.now:.0f} s more)")
                else:
                    if inner is None:
                        sub = Snapshot(snap.now, max(held, 0) + free, list(group.values()),
                                       None if pinned else index.inner[key], None, snap.seen_total, snap.seen_events)
                        inner = self.inner.why_waiting(sub, {jid: alloc[jid] for jid in group if alloc.get(jid)})
                    out[job.spec.job_id] = inner.get(job.spec.job_id) or waiting_for_gpus(snap, alloc, job)
        return out

    def completion_bound(self, snap: Snapshot, job: JobState) -> float | None:
        """The inner policy's bound for the job's tenant alone on its quota, plus one minimum runtime per
        job of the tenant up to this one.

        Quotas fit the cluster, so a tenant with demand holds at least its quota as far as its jobs can
        use it, taken back from borrowers at once; the inner policy's bound assumes no more than a
        cluster of that size. What can delay a share is a run younger than its minimum runtime, here or
        in a borrowing tenant: it keeps its GPUs for at most the operator's bound, once for each job
        that comes to the head of the tenant's queue (at most every job of the tenant ahead of it, and
        itself). None where the tenant has no quota (a guest lives on what others leave) or the inner
        policy gives no bound.
        """
        rule = self.min_runtime
        if not self.tenants.tenants and not rule.active:
            return self.inner.completion_bound(Snapshot(snap.now, snap.capacity, snap.jobs, None, snap.demand,
                                                        snap.seen_total, snap.seen_events), job)
        key = self.group_of(job)
        quota = min(self.tenant(key, snap.capacity).quota, snap.capacity)
        if quota <= 0:
            return None
        index = self._index(snap)
        group = index.groups[key]
        bound = self.inner.completion_bound(Snapshot(snap.now, quota, group.values(), index.inner[key],
                                                     index.demand[key], snap.seen_total, snap.seen_events), job)
        if bound is None or not rule.active:
            return bound
        heads = list(group).index(job.spec.job_id) + 1  # the group keeps arrival order
        return bound + heads * rule.bound

    def fork(self) -> "TenantPolicy":
        return self.fork_around(self.inner)

    def describe(self) -> dict:
        return {"policy": self.name, "inner": self.inner.describe(),
                "tenants": {k: t.model_dump() for k, t in self.tenants.tenants.items()},
                "min_runtime": self.min_runtime.model_dump()}
