"""The one interface every placement policy implements: *which* GPUs each job gets.

A scheduling policy decides how many GPUs each job gets; a placement turns
those counts into global GPU ids (``ClusterSpec.gpu_ids``) and sets each
job's ``slowdown``. The same object serves the simulator (``Engine``), the
predictor (``fork``) and the live coordinator, so it depends only on
``JobState``/``Snapshot`` and the ``ClusterSpec``::

    placement = create_placement("pal", cluster)
    touched = placement.place(snapshot, changed, alloc)   # sets job.gpus, job.slowdown
    placement.release(job)                                 # a job finished

``alloc`` is the policy's allocation (job id -> GPU count) in the policy's
priority order. *Sticky* placements only place jobs whose count changed;
*non-sticky* ones re-place every running job each round, and a job whose new
GPUs differ from its old ones has migrated (the caller charges a checkpoint
and restore). Subclasses implement ``select`` (GPUs for one job) and may
override ``order`` (placement priority, e.g. PM-First's class sort).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import ClassVar

import numpy as np

from pcs_ray.cluster import ClusterSpec
from pcs_ray.topology import TopoMatrix, read_topo
from pcs_ray.state import JobState, Snapshot


class PlacementError(RuntimeError):
    """A placement broke its contract (returned busy or too few GPUs): a bug, not user error."""


class Placement(ABC):
    """Bookkeeping shared by every placement: who owns which GPU, scores, slowdowns.

    ``topology`` (a :class:`TopoMatrix`) applies to every node; without it,
    nodes use the ``topology`` file named in the cluster spec, if any.
    ``comm`` is the communication model that turns links into a slowdown
    (``pcs_ray.placement.bandwidth.CommModel``); by default it is built from
    the topologies and charges only bandwidth-sensitive jobs.
    """

    name: ClassVar[str]
    sticky_default: ClassVar[bool] = True
    #: Whether ``select`` returns GPUs in rank order (an embedding of the job's
    #: communication pattern); otherwise they are kept in id order.
    ranked: ClassVar[bool] = False

    def __init__(
        self,
        cluster: ClusterSpec,
        *,
        sticky: bool | None = None,
        seed: int = 0,
        topology: TopoMatrix | None = None,
        locality_penalty: float | None = None,
        comm=None,
    ) -> None:
        self.cluster = cluster
        self.sticky = self.sticky_default if sticky is None else sticky
        self.locality_penalty = cluster.locality_penalty if locality_penalty is None else float(locality_penalty)
        if self.locality_penalty < 1.0:
            raise ValueError(f"locality penalty must be >= 1, got {self.locality_penalty}")
        self.num_gpus = cluster.num_gpus
        node_of, local = [], []
        for pos, node in enumerate(cluster.nodes):
            for k, _ in enumerate(node.gpus):
                node_of.append(pos)
                local.append(k)
        self.node = np.asarray(node_of, dtype=np.int64)  # global id -> node position
        self.local = np.asarray(local, dtype=np.int64)  # global id -> position on its node
        self.num_nodes = len(cluster.nodes)
        self.node_start = np.asarray([0] + list(np.cumsum([len(n.gpus) for n in cluster.nodes]))[:-1], dtype=np.int64)
        self.node_size = np.asarray([len(n.gpus) for n in cluster.nodes], dtype=np.int64)
        self.gpus_per_node = int(self.node_size.max())
        self.classes = sorted({c for node in cluster.nodes for g in node.gpus for c in g.scores})
        self.raw: dict[str, np.ndarray] = {
            c: np.asarray([cluster.score(i, c) for i in range(self.num_gpus)], dtype=np.float64) for c in self.classes
        }
        self._ones = np.ones(self.num_gpus)
        self.topologies = self._node_topologies(topology)
        if comm is None and any(t is not None for t in self.topologies):
            from pcs_ray.placement.bandwidth import CommModel

            comm = CommModel(self.topologies)
        self.comm = comm
        self.owner = np.full(self.num_gpus, -1, dtype=np.int64)  # job id per GPU, -1 = free
        self.held: dict[int, tuple[int, ...]] = {}
        self.rng = np.random.default_rng(seed)

    # -- cluster facts -------------------------------------------------------
    def _node_topologies(self, topology: TopoMatrix | None) -> list[TopoMatrix | None]:
        out: list[TopoMatrix | None] = []
        for node in self.cluster.nodes:
            topo = topology if topology is not None else (read_topo(node.topology) if node.topology else None)
            if topo is not None and topo.size != len(node.gpus):
                raise ValueError(f"node {node.name}: topology has {topo.size} GPUs, the node has {len(node.gpus)}")
            out.append(topo)
        return out

    def raw_scores(self, job_class: str) -> np.ndarray:
        """Each GPU's measured slowdown for ``job_class`` (what the job really runs at)."""
        return self.raw.get(job_class, self._ones)

    def decision_scores(self, job_class: str) -> np.ndarray:
        """Scores placement decides on; raw by default, binned for PM-First and PAL."""
        return self.raw_scores(job_class)

    def free_mask(self) -> np.ndarray:
        """Which GPUs no job holds."""
        return self.owner < 0

    def spans(self, gpus: Sequence[int]) -> bool:
        return len(gpus) > 1 and bool(np.any(self.node[list(gpus)] != self.node[gpus[0]]))

    def slowdown(self, job: JobState, gpus: Sequence[int]) -> float:
        """Slowest GPU's raw score x locality penalty if across nodes x topology slowdown."""
        if not gpus:
            return 1.0
        idx = np.fromiter(gpus, dtype=np.int64, count=len(gpus))
        worst = float(self.raw_scores(job.spec.job_class)[idx].max())
        nodes = self.node[idx]
        if len(idx) > 1 and nodes.min() != nodes.max():
            return worst * self.locality_penalty
        if self.comm is not None and len(idx) > 1:
            worst *= self.comm.slowdown(job.spec, int(nodes[0]), self.local[idx])  # rank order matters
        return worst

    # -- the interface ---------------------------------------------------------
    def place(
        self, snap: Snapshot, changed: Iterable[JobState], alloc: Mapping[int, int] | None = None
    ) -> list[JobState]:
        """Give every job with GPUs its GPU ids; return each job whose GPUs or slowdown changed.

        ``changed`` are the jobs whose count changed this round (always returned).
        ``alloc`` is the policy's allocation in priority order; without it the
        counts are the jobs' ``alloc`` and the order is ``snap.jobs``'.
        Jobs returned that are not in ``changed`` kept their count but moved.
        """
        changed = list(changed)
        if alloc is None:
            running = [j for j in snap.jobs if j.alloc > 0]
            counts = {j.spec.job_id: j.alloc for j in running}
        else:
            counts = alloc
            # The engine's snapshot is a view of its id -> job dict: use that dict rather than
            # rebuild it, which would cost O(all queued jobs) on every event of a forward play.
            by_id = getattr(snap.jobs, "mapping", None) or {j.spec.job_id: j for j in snap.jobs}
            running = None  # built only when needed: this runs on every event of a forward play
        touched: dict[int, JobState] = {j.spec.job_id: j for j in changed}
        old: dict[int, tuple[int, ...]] = {}
        for job in changed:
            jid = job.spec.job_id
            if jid in self.held and counts.get(jid, 0) != len(self.held[jid]):
                old[jid] = self._free(jid)
        num_running = len(running) if running is not None else sum(1 for n in alloc.values() if n > 0)
        if alloc is not None and len(self.held) > num_running:
            # jobs the allocation leaves out lose their GPUs even if the caller did not list them
            for jid in [jid for jid in self.held if counts.get(jid, 0) == 0]:
                self._free(jid)
                job = by_id.get(jid)
                if job is not None:
                    touched[jid] = job
                    changed.append(job)
        if running is None and self.sticky:
            held = self.held
            todo = [by_id[jid] for jid, n in alloc.items() if n > 0 and jid not in held]
        elif self.sticky:
            todo = [j for j in running if j.spec.job_id not in self.held]
        else:
            if running is None:
                running = [by_id[jid] for jid, n in alloc.items() if n > 0]
            for job in running:
                jid = job.spec.job_id
                if jid in self.held:
                    old[jid] = self._free(jid)
            todo = running
        for job in self.order(todo, snap):
            jid = job.spec.job_id
            n = counts[jid]
            home = old.get(jid, ())
            gpus = self._take(job, n, home)
            if gpus != home or jid in touched:
                job.gpus = gpus
                job.slowdown = self.slowdown(job, gpus)
                touched[jid] = job
        for job in changed:
            if counts.get(job.spec.job_id, 0) == 0 and job.gpus:
                job.gpus = ()
                job.slowdown = 1.0
        return list(touched.values())

    def release(self, job: JobState) -> None:
        """``job`` finished: its GPUs are free again."""
        if job.spec.job_id in self.held:
            self._free(job.spec.job_id)

    def adopt(self, job: JobState) -> None:
        """Record GPUs ``job`` already holds (``job.gpus``), e.g. when a coordinator restarts
        with jobs still running; its slowdown is set from them."""
        gpus = tuple(int(g) for g in job.gpus)
        jid = job.spec.job_id
        if jid in self.held:
            self._free(jid)
        taken = [g for g in gpus if not 0 <= g < self.num_gpus or self.owner[g] >= 0]
        if taken:
            raise PlacementError(f"{self.name}: job {jid} cannot adopt GPUs {taken}: out of range or held")
        if gpus:
            self.owner[list(gpus)] = jid
            self.held[jid] = gpus
        job.slowdown = self.slowdown(job, gpus)

    def fork(self) -> "Placement":
        """An independent copy for playing forward (predictions); static tables are shared."""
        other = copy.copy(self)
        other.owner = self.owner.copy()
        other.held = dict(self.held)
        other.rng = copy.deepcopy(self.rng)
        return other

    def assignment(self) -> dict[int, tuple[int, ...]]:
        """Job id -> global GPU ids, as placed now (what the live coordinator pins)."""
        return dict(self.held)

    def describe(self) -> dict:
        return {"placement": self.name, "sticky": self.sticky, "locality_penalty": self.locality_penalty}

    # -- what subclasses decide ------------------------------------------------
    def order(self, jobs: list[JobState], snap: Snapshot) -> list[JobState]:
        """Placement priority of the jobs to place; the policy's order by default."""
        return jobs

    @abstractmethod
    def select(self, job: JobState, n: int, free: np.ndarray, home: tuple[int, ...]) -> np.ndarray:
        """``n`` free global GPU ids for ``job``. ``free`` is a boolean mask with at least
        ``n`` True entries; ``home`` are the GPUs it held before this round (prefer them on ties)."""

    # -- helpers ---------------------------------------------------------------
    def _free(self, jid: int) -> tuple[int, ...]:
        gpus = self.held.pop(jid)
        self.owner[list(gpus)] = -1
        return gpus

    def _take(self, job: JobState, n: int, home: tuple[int, ...]) -> tuple[int, ...]:
        free = self.owner < 0
        if int(free.sum()) < n:
            raise PlacementError(f"{self.name}: job {job.spec.job_id} needs {n} GPUs, {int(free.sum())} are free")
        chosen = np.asarray(self.select(job, n, free, home), dtype=np.int64)
        if len(chosen) != n or len(set(chosen.tolist())) != n or not free[chosen].all():
            raise PlacementError(f"{self.name}: job {job.spec.job_id} got {chosen.tolist()} for {n} free GPUs")
        if set(home) == set(chosen.tolist()):
            gpus = home  # the same GPUs: keep the rank order, nothing moves
        elif self.ranked:
            gpus = tuple(chosen.tolist())
        else:
            gpus = tuple(sorted(chosen.tolist()))
        self.owner[chosen] = job.spec.job_id
        self.held[job.spec.job_id] = gpus
        return gpus

    def free_per_node(self, free: np.ndarray) -> np.ndarray:
        return np.bincount(self.node[free], minlength=self.num_nodes)


def create_placement(name: str, cluster: ClusterSpec, **kwargs) -> Placement:
    """The registry's builder (``pcs_ray.placement.create_placement``), reachable from here too."""
    from pcs_ray.placement import create_placement as build

    return build(name, cluster, **kwargs)
__all__ = ["Placement", "PlacementError", "create_placement"]
