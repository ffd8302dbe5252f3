"""What placement knows about a cluster that does not change while it runs: GPUs, scores, links.

One :class:`ClusterFacts` is built per placement and shared by its forks
(predictions), so every plugin reads the same tables and none rebuilds them
per decision. Tables that only some configurations need (binned scores,
per-node subset tables, sockets, NVLink bandwidths) are built on first use.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from pcs_ray.cluster import ClusterSpec
from pcs_ray.cluster.topology import TopoMatrix, link_bandwidth, nvlinks, read_topo
from pcs_ray.placement.bandwidth import CommModel, SubsetTable, uniform_topology
from pcs_ray.variability.profiles import bin_cluster_scores


class ClusterFacts:
    """Per-GPU and per-node arrays of one cluster plus the placement's options about it.

    ``topology`` applies to every node; without it, nodes use the ``topology``
    file named in the cluster spec, if any. ``comm`` turns links into the
    slowdown the simulator charges (:class:`CommModel`, built from the
    topologies by default). ``binned`` overrides the per-class binned scores
    (otherwise K-means with ``bin_seed``, as the PAL paper bins).
    """

    def __init__(
        self,
        cluster: ClusterSpec,
        *,
        topology: TopoMatrix | None = None,
        locality_penalty: float | None = None,
        comm=None,
        binned: dict[str, np.ndarray] | None = None,
        bin_seed: int = 0,
    ) -> None:
        self.cluster = cluster
        self.locality_penalty = cluster.locality_penalty if locality_penalty is None else float(locality_penalty)
        if self.locality_penalty < 1.0:
            raise ValueError(f"locality penalty must be >= 1, got {self.locality_penalty}")
        sizes = [len(n.gpus) for n in cluster.nodes]
        self.num_gpus = cluster.num_gpus
        self.num_nodes = len(sizes)
        self.node = np.repeat(np.arange(self.num_nodes, dtype=np.int64), sizes)  # global id -> node position
        self.node_size = np.asarray(sizes, dtype=np.int64)
        self.node_start = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.local = np.arange(self.num_gpus, dtype=np.int64) - self.node_start[self.node]  # index on its node
        self.gpus_per_node = int(self.node_size.max())
        self.classes = sorted({c for node in cluster.nodes for g in node.gpus for c in g.scores})
        self.raw: dict[str, np.ndarray] = {
            c: np.asarray([cluster.score(i, c) for i in range(self.num_gpus)], dtype=np.float64) for c in self.classes
        }
        self.ones = np.ones(self.num_gpus)
        self.topologies = self._node_topologies(topology)
        self.has_topology = any(t is not None for t in self.topologies)
        if comm is None and self.has_topology:
            comm = CommModel(self.topologies)
        self.comm = comm
        self._binned_given = binned
        self.bin_seed = bin_seed

    def _node_topologies(self, topology: TopoMatrix | None) -> list[TopoMatrix | None]:
        out: list[TopoMatrix | None] = []
        for node in self.cluster.nodes:
            topo = topology if topology is not None else (read_topo(node.topology) if node.topology else None)
            if topo is not None and topo.size != len(node.gpus):
                raise ValueError(f"node {node.name}: topology has {topo.size} GPUs, the node has {len(node.gpus)}")
            out.append(topo)
        return out

    def need(self, *tables: str) -> None:
        """Build these tables now (names of the cached properties below): plugins call it when a
        placement is created, so the first decision is not slow and bad input fails early."""
        for name in tables:
            getattr(self, name)

    # -- power ---------------------------------------------------------------------
    def power(self, job_class: str) -> np.ndarray | None:
        """Each GPU's predicted power (W) for ``job_class`` from the cluster spec; None unless every GPU has one."""
        cache = self.__dict__.setdefault("_power", {})
        if job_class not in cache:
            values = [self.cluster.gpu(i).power.get(job_class) for i in range(self.num_gpus)]
            cache[job_class] = None if any(v is None for v in values) else np.asarray(values, dtype=np.float64)
        return cache[job_class]

    def power_ratio(self, job_class: str) -> np.ndarray:
        """Predicted power over the cluster's median for the class (1 everywhere without power data)."""
        cache = self.__dict__.setdefault("_power_ratio", {})
        if job_class not in cache:
            p = self.power(job_class)
            cache[job_class] = self.ones if p is None else p / float(np.median(p))
        return cache[job_class]

    # -- variability ---------------------------------------------------------------
    def raw_scores(self, job_class: str) -> np.ndarray:
        """Each GPU's measured slowdown for ``job_class`` (what a job really runs at)."""
        return self.raw.get(job_class, self.ones)

    @cached_property
    def binned(self) -> dict[str, np.ndarray]:
        """Per-class binned scores: what variability-aware placement decides on (the PAL paper)."""
        given = self._binned_given
        return given if given is not None else bin_cluster_scores(self.raw, seed=self.bin_seed)

    def decision_scores(self, job_class: str) -> np.ndarray:
        return self.binned.get(job_class, self.ones)

    @cached_property
    def by_score(self) -> dict[str, np.ndarray]:
        """Per class, all GPUs best binned score first (ties by id); ``""`` for a class without scores."""
        out = {c: np.argsort(v, kind="stable") for c, v in self.binned.items()}
        out[""] = np.arange(self.num_gpus)
        return out

    def sorted_gpus(self, job_class: str) -> np.ndarray:
        """All GPUs, best binned score first (ties by id)."""
        by = self.by_score
        return by.get(job_class, by[""])

    @cached_property
    def grid(self) -> np.ndarray:
        """node x slot -> global id; smaller nodes are padded with -1."""
        grid = np.full((self.num_nodes, self.gpus_per_node), -1, dtype=np.int64)
        for pos in range(self.num_nodes):
            start, size = self.node_start[pos], self.node_size[pos]
            grid[pos, :size] = np.arange(start, start + size)
        return grid

    @cached_property
    def _grid_safe(self) -> tuple[np.ndarray, np.ndarray]:
        pad = self.grid < 0
        return np.where(pad, 0, self.grid), ~pad

    def node_scores(self, scores: np.ndarray, free: np.ndarray) -> np.ndarray:
        """node x slot matrix of ``scores``, +inf where the GPU is busy or missing."""
        safe, real = self._grid_safe
        return np.where(free[safe] & real, scores[safe], np.inf)

    # -- free GPUs -------------------------------------------------------------------
    @cached_property
    def byte_nodes(self) -> bool:
        """Whether every node has 8, 16 or 32 GPUs: then the free mask packed into bytes is the nodes' bitmasks
        side by side (1, 2 or 4 bytes each), read without a pass per GPU in Python or floats."""
        w = self.gpus_per_node
        return w in (8, 16, 32) and bool((self.node_size == w).all())

    def free_per_node(self, free: np.ndarray) -> np.ndarray:
        if self.byte_nodes:
            packed = np.packbits(free, bitorder="little")
            per_byte = _POPCOUNT[packed]
            if self.gpus_per_node > 8:
                return per_byte.reshape(self.num_nodes, -1).sum(axis=1)
            return per_byte
        return np.bincount(self.node[free], minlength=self.num_nodes)

    @cached_property
    def _bit(self) -> np.ndarray:
        return np.int64(1) << self.local

    def free_bits(self, free: np.ndarray) -> np.ndarray:
        """Per node, the bitmask of its free GPUs (bit = local index)."""
        if self.byte_nodes:
            packed = np.packbits(free, bitorder="little")
            return packed.view(f"<u{self.gpus_per_node // 8}").astype(np.int64)
        return np.bincount(self.node, weights=np.where(free, self._bit, 0), minlength=self.num_nodes).astype(np.int64)

    # -- links -----------------------------------------------------------------------
    @cached_property
    def hw(self) -> list[TopoMatrix]:
        """Each node's links; a node without a topology counts as uniform PCIe."""
        return [t if t is not None else uniform_topology(int(self.node_size[k])) for k, t in enumerate(self.topologies)]

    @cached_property
    def hw_model(self) -> CommModel:
        """Subset tables of every node (the given communication model's settings, uniform PCIe filled in)."""
        given = self.comm if isinstance(self.comm, CommModel) else CommModel(self.hw)
        return CommModel(self.hw, comm_fraction=given.comm_fraction, regression=given.regression)

    def table(self, node: int, n: int, pattern: str) -> SubsetTable:
        """The subset table of ``node``'s links for ``n``-GPU jobs of ``pattern`` (looked up per node:
        the shared cache's key is the whole link matrix, too slow to build on every decision)."""
        key = (id(self.hw[node]), n, pattern)
        tables = self.__dict__.setdefault("_tables", {})
        table = tables.get(key)
        if table is None:
            table = tables[key] = self.hw_model.table(node, n, pattern)
        return table

    def table_groups(self, n: int, pattern: str) -> np.ndarray:
        """Per node, a number shared by exactly the nodes whose ``table(node, n, pattern)`` is the same object
        (-1 for nodes smaller than ``n``), so that a decision can group nodes without looking each one up."""
        key = (n, pattern)
        cache = self.__dict__.setdefault("_table_groups", {})
        groups = cache.get(key)
        if groups is None:
            seen: dict[int, int] = {}
            groups = cache[key] = np.fromiter(
                (seen.setdefault(id(self.table(k, n, pattern)), len(seen)) if n <= self.node_size[k] else -1
                 for k in range(self.num_nodes)), dtype=np.int64, count=self.num_nodes)
        return groups

    @cached_property
    def sockets(self) -> list[np.ndarray]:
        return [np.asarray(t.sockets(), dtype=np.int64) for t in self.hw]

    @cached_property
    def nvlink_bw(self) -> list[np.ndarray]:
        """Per node, GPU x GPU NVLink bandwidth (0 for PCIe: PCIe is always there, NVLinks run out)."""
        return [np.asarray([[link_bandwidth(c) if nvlinks(c) else 0.0 for c in row] for row in t.links]) for t in self.hw]

    @cached_property
    def nvlink_total(self) -> float:
        """The most NVLink bandwidth any one node has (GB/s, each link once): preserved bandwidth's unit."""
        return max(float(np.triu(bw, 1).sum()) for bw in self.nvlink_bw)

    def best_table_value(self, n: int, pattern: str, column: str) -> float:
        """The best ``column`` (``aggbw``/``effbw``) any node's links offer an ``n``-GPU job."""
        key = (n, pattern, column)
        cache = self.__dict__.setdefault("_best_values", {})
        if key not in cache:
            nodes = {id(t): k for k, t in reversed(list(enumerate(self.hw))) if n <= self.node_size[k]}
            values = [getattr(self.table(k, n, pattern), column).max() for k in nodes.values()]
            cache[key] = float(max(values)) if values else 0.0
        return cache[key]


#: set bits per byte value
_POPCOUNT = np.array([b.bit_count() for b in range(256)], dtype=np.int64)


__all__ = ["ClusterFacts"]
