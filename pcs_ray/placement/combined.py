"""Combined placement: variability, locality and topology scored by one product (none of the papers).

Every candidate allocation of a job is scored by the slowdown the simulator
would charge it, with binned scores in place of raw ones:

    worst binned PM-score x (locality penalty if across nodes) x topology slowdown

where the topology slowdown is ``CommModel``'s (effective bandwidth of the
job's pattern on those GPUs against the best its size can get; 1 for
insensitive jobs). The lowest product wins; ties keep a job where it was,
then leave the most link bandwidth among the free GPUs (MAPA's Preserve),
then prefer the fullest node. So a communication-heavy job on an 8-GPU
NVLink node gets the embedding with the best effective bandwidth among
well-performing GPUs, a compute-bound job on a noisy cluster gets the best
GPUs, and an insensitive job takes GPUs that leave the double links free.

Candidates: on each node that fits, every subset of its free GPUs (from the
node's precomputed subset table); across nodes, PM-First's choice (the
best scores; topology is not charged across nodes, the locality penalty
is). Nodes are visited in order of their best possible score (the N-th best
free score on the node) and the search stops when no unvisited node can
win, or after ``tie_nodes`` nodes that could only tie. Without topology and
without ties to break this is PAL's rule; on identical GPUs it is Preserve's.
Jobs are placed in PM-First's class order, non-sticky.
"""

from __future__ import annotations

import numpy as np

from pcs_ray.placement.mapa import TopologyAware
from pcs_ray.placement.pal import PALPlacement
from pcs_ray.state import JobState


class CombinedPlacement(PALPlacement, TopologyAware):
    """Minimise binned variability x locality x topology slowdown per job."""

    name = "combined"
    ranked = True

    def __init__(self, cluster, *, tie_nodes: int = 8, **kw) -> None:
        super().__init__(cluster, **kw)
        self.tie_nodes = tie_nodes
        self.has_topology = any(t is not None for t in self.topologies)

    def select(self, job: JobState, n: int, free: np.ndarray, home: tuple[int, ...]) -> np.ndarray:
        if n > self.gpus_per_node or (n == 1 and not self.has_topology):
            return self.pm_first(job, n, free, home)
        within, w_score = self._best_within(job, n, free, home)
        if n == 1:
            return within
        across = self.pm_first(job, n, free, home)
        a_score = float(self.decision_scores(job.spec.job_class)[across].max()) * self.locality_penalty
        if within is not None and w_score <= a_score:
            return within
        return across

    def _best_within(self, job: JobState, n: int, free: np.ndarray, home: tuple[int, ...]):
        m = self.node_scores(job, free)
        nth = np.partition(m, n - 1, axis=1)[:, n - 1]
        fits = np.flatnonzero(np.isfinite(nth))
        if len(fits) == 0:
            return None, np.inf
        nfree = np.isfinite(m[fits]).sum(axis=1)
        home_nodes = np.unique(self.node[list(home)]) if home else np.empty(0, dtype=np.int64)
        at_home = np.isin(fits, home_nodes)
        visit = fits[np.lexsort((fits, nfree, ~at_home, nth[fits]))]
        scores = self.decision_scores(job.spec.job_class)
        bits = self.free_bits(free) if self.has_topology else None
        home_set = set(home)
        best_key, best, ties = None, None, 0
        for node in visit:
            node = int(node)
            bound = float(nth[node])
            if best_key is not None:
                if bound > best_key[0] + 1e-12:
                    break
                ties += 1
                # only links can break a tie: a node without a topology cannot beat an earlier one
                if ties > self.tie_nodes or self.topologies[node] is None:
                    break
            key, gpus = self._best_on_node(job, n, node, free, scores, bits, home_set)
            if best_key is None or key < best_key:
                best_key, best = key, gpus
        return best, best_key[0]

    def _best_on_node(self, job, n, node, free, scores, bits, home_set):
        """(score, -kept home GPUs, bandwidth removed, rank) and the GPUs of the node's best subset."""
        start = self.node_start[node]
        if self.topologies[node] is None:
            local_free = free.copy()
            local_free[self.node != node] = False
            gpus = self.pm_first(job, n, local_free, tuple(home_set))
            kept = len(home_set.intersection(gpus.tolist()))
            return (float(scores[gpus].max()), -kept, 0.0, 0), gpus
        table = self.table(node, n, job.spec.pattern)
        rows = table.feasible(int(bits[node]))
        members = table.eff_order[rows]  # each subset in its best embedding
        glob = start + members
        product = scores[glob].max(axis=1) * self.comm_slowdowns(job, node, n, table)[rows]
        kept = np.isin(glob, list(home_set)).sum(axis=1) if home_set and self.node[next(iter(home_set))] == node \
            else np.zeros(len(rows))
        removed = self.removed_bandwidth(node, int(bits[node]), table, rows)
        order = np.lexsort((np.arange(len(rows)), removed, -kept, np.round(product, 12)))
        k = int(order[0])
        return (float(product[k]), -float(kept[k]), float(removed[k]), 0), glob[k]

    def comm_slowdowns(self, job: JobState, node: int, n: int, table) -> np.ndarray:
        if self.comm is None:
            return np.ones(len(table.mask))
        return self.comm.slowdowns(job.spec, table)


__all__ = ["CombinedPlacement"]
