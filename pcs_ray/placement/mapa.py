"""MAPA (Ranganath et al., SC'21): allocate by matching the job's communication pattern to the links.

Variants (all sticky, all blind to GPU variability):

* ``baseline``: lowest free GPU ids on the first node that fits (what Docker does);
* ``topo``: the first CPU socket that fits, else ``baseline`` (Topo-aware);
* ``greedy``: the embedding with the most aggregated bandwidth;
* ``preserve``: bandwidth-sensitive jobs the highest predicted effective
  bandwidth, insensitive ones the embedding that leaves the most bandwidth
  among the GPUs still free (Algorithm 1).

MAPA allocates inside one server; on a cluster the candidates are the
embeddings on every node that fits the job (nodes whose free GPUs form the
same subset of the same topology are scored once), and a job no node fits
is spread like Packed. Nodes without a topology count as uniform PCIe.
Ties go to the lowest node, then the lowest GPU ids.
"""

from __future__ import annotations

import numpy as np

from pcs_ray.placement.bandwidth import CommModel, SubsetTable, uniform_topology
from pcs_ray.placement.base import Placement
from pcs_ray.placement.packed import packed_select
from pcs_ray.topology import link_bandwidth, nvlinks
from pcs_ray.state import JobState

VARIANTS = ("baseline", "topo", "greedy", "preserve")


class TopologyAware(Placement):
    """Per-node hardware graphs as subset tables, free-GPU bitmasks per node, preserved bandwidth."""

    def __init__(self, cluster, **kw) -> None:
        super().__init__(cluster, **kw)
        self.hw = [t if t is not None else uniform_topology(int(self.node_size[k]))
                   for k, t in enumerate(self.topologies)]
        given = self.comm if isinstance(self.comm, CommModel) else CommModel(self.hw)
        self._hw_model = CommModel(self.hw, comm_fraction=given.comm_fraction, regression=given.regression)
        self.sockets = [np.asarray(t.sockets(), dtype=np.int64) for t in self.hw]
        self._bit = np.int64(1) << self.local
        # Preserved bandwidth counts NVLinks only: PCIe is always there, NVLinks are what runs out.
        self._bw = [np.asarray([[link_bandwidth(c) if nvlinks(c) else 0.0 for c in row] for row in t.links])
                    for t in self.hw]

    def table(self, node: int, n: int, pattern: str) -> SubsetTable:
        return self._hw_model.table(node, n, pattern)

    def free_bits(self, free: np.ndarray) -> np.ndarray:
        """Per node, the bitmask of its free GPUs (bit = local index)."""
        return np.bincount(self.node, weights=np.where(free, self._bit, 0), minlength=self.num_nodes).astype(np.int64)

    def removed_bandwidth(self, node: int, bits: int, table: SubsetTable, rows: np.ndarray) -> np.ndarray:
        """Bandwidth lost to the free GPUs of ``node`` if ``rows`` of ``table`` were allocated.

        Preserved bandwidth = (links among free GPUs now) - this, so maximising
        one is minimising the other.
        """
        bw = self._bw[node]
        free_local = ((bits >> np.arange(bw.shape[0])) & 1).astype(bool)
        reach = bw[:, free_local].sum(axis=1)  # per GPU: bandwidth of its links to free GPUs
        members = table.members[rows]
        if table.n < 2:
            return reach[members[:, 0]]
        iu = table.pairs
        internal = bw[members[:, iu[0]], members[:, iu[1]]].sum(axis=1)
        return reach[members].sum(axis=1) - internal

    def to_global(self, node: int, local_ids) -> np.ndarray:
        return self.node_start[node] + np.asarray(local_ids, dtype=np.int64)


class MAPAPlacement(TopologyAware):
    """One of MAPA's four pattern-selection policies (``variant``)."""

    name = "mapa"
    ranked = True

    def __init__(self, cluster, *, variant: str = "preserve", **kw) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"unknown MAPA variant {variant!r}; valid: {', '.join(VARIANTS)}")
        super().__init__(cluster, **kw)
        self.variant = variant

    def describe(self) -> dict:
        return {**super().describe(), "variant": self.variant}

    def select(self, job: JobState, n: int, free: np.ndarray, home: tuple[int, ...]) -> np.ndarray:
        per_node = self.free_per_node(free)
        fits = np.flatnonzero(per_node >= n)
        if len(fits) == 0:
            return packed_select(self, n, free, home)
        if self.variant == "baseline":
            return self._lowest(int(fits[0]), n, free)
        if self.variant == "topo":
            return self._same_socket(fits, n, free)
        return self._best_embedding(job, n, free, fits)

    def _lowest(self, node: int, n: int, free: np.ndarray) -> np.ndarray:
        start = self.node_start[node]
        return start + np.flatnonzero(free[start : start + self.node_size[node]])[:n]

    def _same_socket(self, fits: np.ndarray, n: int, free: np.ndarray) -> np.ndarray:
        for node in fits:
            start = self.node_start[node]
            local_free = np.flatnonzero(free[start : start + self.node_size[node]])
            sockets = self.sockets[node][local_free]
            for sock in np.unique(sockets):  # sockets in id order
                on = local_free[sockets == sock]
                if len(on) >= n:
                    return start + on[:n]
        return self._lowest(int(fits[0]), n, free)

    def _best_embedding(self, job: JobState, n: int, free: np.ndarray, fits: np.ndarray) -> np.ndarray:
        bits = self.free_bits(free)
        sensitive = job.spec.bw_sensitive and n > 1
        best_key, best = None, None
        seen: set[tuple[int, int]] = set()
        for node in fits:
            node = int(node)
            table = self.table(node, n, job.spec.pattern)
            group = (id(table), int(bits[node]))
            if group in seen:  # same links, same free GPUs: same scores as an earlier node
                continue
            seen.add(group)
            rows = table.feasible(int(bits[node]))
            if self.variant == "greedy":
                score = table.aggbw[rows]
            elif sensitive:
                score = table.effbw[rows]
            else:
                score = -self.removed_bandwidth(node, int(bits[node]), table, rows)
            k = int(np.argmax(score))  # first maximum: lowest ids within the node
            key = float(score[k])
            if best_key is None or key > best_key + 1e-9:
                order = table.agg_order if self.variant == "greedy" else table.eff_order
                best_key, best = key, (node, order[rows[k]])
        node, local_ids = best
        return self.to_global(node, local_ids)


__all__ = ["VARIANTS", "MAPAPlacement", "TopologyAware"]
