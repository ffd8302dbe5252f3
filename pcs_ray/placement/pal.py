"""PAL (PAL paper, Algorithm 2): trade variability against locality through the L x V matrix.

For a job of ``1 < N <= GPUs per node`` the matrix has one row per locality
level (within a node: 1; across nodes: the penalty L) and one column per
score bin V_i; its entries L x V_i are traversed in increasing order and the
first feasible allocation wins: *within* at V_i means some node has N free
GPUs scoring <= V_i, *across* means the cluster has. Other jobs use PM-First.

Traversing the matrix entry by entry costs a pass over the cluster per
entry; the first feasible *within* entry is the smallest per-node N-th best
free score, and the first feasible *across* entry the cluster's N-th best,
so ``select`` computes both directly and compares ``v_within`` with
``L * v_across`` (ties go to packing, as in the traversal). ``lv_traversal``
is the literal order, kept for tests and explanations.
"""

from __future__ import annotations

import numpy as np

from pcs_ray.placement.pmfirst import VariabilityAware
from pcs_ray.state import JobState


def lv_traversal(bins, penalty: float) -> list[tuple[float, float, float]]:
    """Entries ``(L, V, L*V)`` of the L x V matrix in traversal order (within first on ties)."""
    values = sorted(set(float(b) for b in bins))
    entries = [(1.0, v, v) for v in values] + [(float(penalty), v, float(penalty) * v) for v in values]
    return sorted(entries, key=lambda e: (e[2], e[0], e[1]))


class PALPlacement(VariabilityAware):
    """L x V traversal for node-sized multi-GPU jobs, PM-First otherwise."""

    name = "pal"

    def __init__(self, cluster, **kw) -> None:
        super().__init__(cluster, **kw)
        # node x slot -> global id (-1 pads smaller nodes)
        self.grid = np.full((self.num_nodes, self.gpus_per_node), -1, dtype=np.int64)
        for pos in range(self.num_nodes):
            start, size = self.node_start[pos], self.node_size[pos]
            self.grid[pos, :size] = np.arange(start, start + size)
        self._pad = self.grid < 0
        self._grid_safe = np.where(self._pad, 0, self.grid)

    def select(self, job: JobState, n: int, free: np.ndarray, home: tuple[int, ...]) -> np.ndarray:
        if not 1 < n <= self.gpus_per_node:
            return self.pm_first(job, n, free, home)
        node, v_within = self.best_node(job, n, free, home)
        across = self.pm_first(job, n, free, home)
        v_across = float(self.decision_scores(job.spec.job_class)[across].max())
        if node >= 0 and v_within <= self.locality_penalty * v_across:
            return self.on_node(job, node, n, free, home)
        return across

    def node_scores(self, job: JobState, free: np.ndarray) -> np.ndarray:
        """node x slot matrix of binned scores, +inf where the GPU is busy or missing."""
        s = self.decision_scores(job.spec.job_class)
        return np.where(free[self._grid_safe] & ~self._pad, s[self._grid_safe], np.inf)

    def best_node(self, job: JobState, n: int, free: np.ndarray, home: tuple[int, ...]) -> tuple[int, float]:
        """The node whose ``n`` best free GPUs have the lowest worst score (-1 if none fits).

        Ties: the job's current node, then the node with the fewest free GPUs (best fit), then the lowest index.
        """
        m = self.node_scores(job, free)
        nth = np.partition(m, n - 1, axis=1)[:, n - 1]
        best = nth.min()
        if not np.isfinite(best):
            return -1, np.inf
        tied = np.flatnonzero(nth == best)
        if len(tied) > 1:
            if home:
                home_nodes = np.unique(self.node[list(home)])
                at_home = tied[np.isin(tied, home_nodes)]
                if len(at_home):
                    tied = at_home
            nfree = np.isfinite(m[tied]).sum(axis=1)
            tied = tied[nfree == nfree.min()]
        return int(tied[0]), float(best)

    def on_node(self, job: JobState, node: int, n: int, free: np.ndarray, home: tuple[int, ...]) -> np.ndarray:
        """The ``n`` lowest-score free GPUs of ``node`` (its own first on ties)."""
        local_free = free.copy()
        local_free[self.node != node] = False
        return self.pm_first(job, n, local_free, home)
