"""What a set of GPUs on one node offers a communicating job: embeddings, bandwidths, slowdown.

MAPA's vocabulary: the *application graph* of an N-GPU job (``ring``: a cycle,
as NCCL's ring all-reduce; ``tree``: a chain, as NCCL's intra-node trees;
``all-to-all``: every pair) is embedded in the node's complete *hardware
graph*. For a GPU subset, each ordering of it is one embedding:

* aggregated bandwidth: sum of the link bandwidths the pattern's edges use;
* effective bandwidth: predicted all-reduce bandwidth. On DGX-1-like links
  (NV1/NV2/PCIe) for 1..5 pattern edges it is the MAPA regression over the
  counts (x, y, z) of double-NVLink, single-NVLink and PCIe edges of the
  embedding (``data/mapa/effbw-dgx1v.json``); elsewhere the slowest used link;
* preserved bandwidth: sum over the links among the GPUs left free.

An allocation is an embedding: the job's GPUs in rank order (``JobState.gpus``),
its ring or chain following that order, as in MAPA, where each matching
pattern is scored. :class:`SubsetTable` precomputes, for every subset of a
node size, the best embedding by effective and by aggregated bandwidth,
so matching a job is a vectorised filter on free GPUs, not a graph search.
Subsets whose internal links are all alike (DGX-2, DGX A100, HGX H100) need
one ordering; mixed ones are enumerated in full (fine for 8-GPU nodes and
16-GPU nodes up to ~6-GPU jobs; larger mixed cases take seconds once).
"""

from __future__ import annotations

import itertools
import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from pcs_ray.jobs.spec import JobSpec
from pcs_ray.data import data_dir
from pcs_ray.cluster.topology import PCIE_CODES, TopoMatrix, link_bandwidth, nvlinks

PATTERNS = ("ring", "tree", "all-to-all")
_ALIASES = {"ring": "ring", "tree": "tree", "chain": "tree", "all-to-all": "all-to-all", "alltoall": "all-to-all",
            "a2a": "all-to-all", "all2all": "all-to-all"}


def canonical_pattern(name: str) -> str:
    p = _ALIASES.get((name or "ring").lower())
    if p is None:
        raise ValueError(f"unknown communication pattern {name!r}; valid: {', '.join(PATTERNS)}")
    return p


def pattern_edges(pattern: str, n: int) -> list[tuple[int, int]]:
    """Edges of the application graph over positions ``0..n-1`` (a 2-GPU ring is one edge)."""
    pattern = canonical_pattern(pattern)
    if n < 2:
        return []
    if pattern == "all-to-all":
        return list(itertools.combinations(range(n), 2))
    chain = [(i, i + 1) for i in range(n - 1)]
    return chain + [(n - 1, 0)] if pattern == "ring" and n > 2 else chain


def _orderings(pattern: str, n: int) -> np.ndarray:
    """Position orderings giving every distinct embedding of the pattern on n GPUs."""
    if pattern == "all-to-all" or n <= 2:
        return np.arange(n)[None, :]
    if pattern == "ring":  # fix position 0, drop mirror images
        perms = [(0, *p) for p in itertools.permutations(range(1, n)) if p[0] < p[-1]]
    else:
        perms = [p for p in itertools.permutations(range(n)) if p[0] < p[-1]]
    return np.asarray(perms, dtype=np.int64)


# -- effective bandwidth models ----------------------------------------------------


class EffBWRegression:
    """MAPA's 14-term regression of effective bandwidth on (x, y, z) link counts."""

    TERMS = 14

    def __init__(self, theta: list[float], check_values: dict[str, float] | None = None, max_edges: int = 5) -> None:
        if len(theta) != self.TERMS:
            raise ValueError(f"the effective-bandwidth regression needs {self.TERMS} coefficients, got {len(theta)}")
        self.theta = np.asarray(theta, dtype=np.float64)
        self.check_values = dict(check_values or {})
        self.max_edges = max_edges

    @classmethod
    def from_json(cls, path: str | Path | None = None) -> "EffBWRegression":
        p = Path(path) if path is not None else data_dir() / "mapa" / "effbw-dgx1v.json"
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{p}: cannot read the effective-bandwidth model ({e})") from None
        return cls(raw["theta"], raw.get("check_values"))

    def predict(self, x, y, z) -> np.ndarray:
        """Predicted GB/s for arrays (or scalars) of double-NVLink, single-NVLink and PCIe counts."""
        x, y, z = (np.asarray(v, dtype=np.float64) for v in (x, y, z))
        terms = [x, y, z, 1 / (x + 1), 1 / (y + 1), 1 / (z + 1), x * y, y * z, z * x,
                 1 / (x * y + 1), 1 / (y * z + 1), 1 / (z * x + 1), x * y * z, 1 / (x * y * z + 1)]
        return sum(t * th for t, th in zip(terms, self.theta))

    def applies(self, codes: set[str], edges: int) -> bool:
        """Trained on DGX-1 V100 rings of 2..5 GPUs: NV1/NV2/PCIe links, at most 5 edges."""
        return edges <= self.max_edges and all(c in ("NV1", "NV2") or c in PCIE_CODES for c in codes)


@lru_cache(maxsize=1)
def default_regression() -> EffBWRegression | None:
    """The MAPA regression from the shared data, or None where the data is absent."""
    try:
        return EffBWRegression.from_json()
    except (ValueError, KeyError):
        return None


# -- per-node subset tables --------------------------------------------------------


class SubsetTable:
    """Every ``n``-subset of one node's GPUs with its best-embedding scores for one pattern.

    Arrays are row-aligned: ``members`` (m x n local ids, lexicographic),
    ``mask`` (bitmask of members), ``aggbw``, ``effbw`` (GB/s), ``internal``
    (sum of link bandwidths among the members, for preserved bandwidth).
    """

    def __init__(self, topo: TopoMatrix, n: int, pattern: str, regression: EffBWRegression | None) -> None:
        size = topo.size
        if not 1 <= n <= size:
            raise ValueError(f"subset size {n} outside 1..{size}")
        self.n, self.pattern = n, canonical_pattern(pattern)
        bw = np.asarray([[link_bandwidth(c) if c != "X" else 0.0 for c in row] for row in topo.links])
        kind = np.asarray([[_kind(c) for c in row] for row in topo.links], dtype=np.int64)
        code_id = {c: k for k, c in enumerate(sorted({c for row in topo.links for c in row}))}
        codes = np.asarray([[code_id[c] for c in row] for row in topo.links], dtype=np.int64)
        self.bw = bw
        members = np.asarray(list(itertools.combinations(range(size), n)), dtype=np.int64).reshape(-1, n)
        self.members = members
        self.mask = (np.int64(1) << members).sum(axis=1)
        iu = self.pairs = np.triu_indices(n, 1)
        self.internal = bw[members[:, iu[0]], members[:, iu[1]]].sum(axis=1) if n > 1 else np.zeros(len(members))
        edges = np.asarray(pattern_edges(self.pattern, n), dtype=np.int64).reshape(-1, 2)
        used_codes = {c for row in topo.links for c in row if c != "X"}
        use_regression = regression is not None and regression.applies(used_codes, len(edges))
        m = len(members)
        self.use_regression = use_regression
        self.regression = regression if use_regression else None
        self._bw, self._kind, self._edges = bw, kind, edges
        self.aggbw = np.zeros(m)
        self.effbw = np.full(m, np.inf)
        self.eff_order = members.copy()  # each subset in its best-effbw embedding's rank order
        self.agg_order = members.copy()  # ... and in its best-aggbw embedding's
        self.row_of = {int(mk): r for r, mk in enumerate(self.mask)}
        if len(edges) == 0:
            return
        if n > 1:
            sub_codes = codes[members[:, iu[0]], members[:, iu[1]]]
            uniform = sub_codes.min(axis=1) == sub_codes.max(axis=1)
        else:
            uniform = np.ones(m, dtype=bool)
        orders = _orderings(self.pattern, n)
        for rows, order_set in ((np.flatnonzero(uniform), orders[:1]), (np.flatnonzero(~uniform), orders)):
            if len(rows) == 0:
                continue
            chunk = max(1, 2_000_000 // (len(order_set) * len(edges)))
            for lo in range(0, len(rows), chunk):
                part = rows[lo : lo + chunk]
                placed = members[part][:, order_set]  # rows x orders x n
                u, v = placed[..., edges[:, 0]], placed[..., edges[:, 1]]
                agg = bw[u, v].sum(axis=-1)
                eff = self._score(u, v)
                # first maximum: Greedy's embedding is the first with the most aggregated bandwidth
                ka, ke = agg.argmax(axis=1), eff.argmax(axis=1)
                idx = np.arange(len(part))
                self.aggbw[part] = agg[idx, ka]
                self.effbw[part] = eff[idx, ke]
                self.agg_order[part] = placed[idx, ka]
                self.eff_order[part] = placed[idx, ke]

    def _score(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Effective bandwidth of embeddings given their edge endpoints (last axis = edges)."""
        if self.use_regression:
            k = self._kind[u, v]
            return self.regression.predict((k == 2).sum(-1), (k == 1).sum(-1), (k == 0).sum(-1))
        return self._bw[u, v].min(axis=-1)

    def embedding_effbw(self, ranked_local_ids) -> float:
        """Effective bandwidth of the embedding that puts rank i on ``ranked_local_ids[i]``."""
        ids = np.asarray(ranked_local_ids, dtype=np.int64)
        if len(self._edges) == 0:
            return float("inf")
        return float(self._score(ids[self._edges[:, 0]], ids[self._edges[:, 1]]))

    def feasible(self, free_bits: int) -> np.ndarray:
        """Rows whose members are all in ``free_bits``."""
        return np.flatnonzero((self.mask & ~np.int64(free_bits)) == 0)


def _kind(code: str) -> int:
    """0 = PCIe path, 1 = single NVLink, 2 = double (or more) NVLink: the regression's x/y/z."""
    k = nvlinks(code)
    return 0 if k == 0 else (1 if k == 1 else 2)


_TABLES: dict[tuple, SubsetTable] = {}


def subset_table(topo: TopoMatrix, n: int, pattern: str, regression: EffBWRegression | None) -> SubsetTable:
    """A cached :class:`SubsetTable` (nodes with the same links share one)."""
    key = (tuple(map(tuple, topo.links)), n, canonical_pattern(pattern), id(regression))
    table = _TABLES.get(key)
    if table is None:
        table = _TABLES[key] = SubsetTable(topo, n, pattern, regression)
    return table


def uniform_topology(size: int, code: str = "PHB") -> TopoMatrix:
    """A node whose GPUs all talk over the same link (what a node without a topology file looks like)."""
    return TopoMatrix(gpus=[f"GPU{i}" for i in range(size)],
                      links=[["X" if i == j else code for j in range(size)] for i in range(size)])


# -- what a slow allocation costs a job ----------------------------------------------


class CommModel:
    """Slowdown of a bandwidth-sensitive job from its effective bandwidth (per node topologies).

    A sensitive job spends ``comm_fraction`` of its iteration communicating
    when it gets the best effective bandwidth its size can get on the node;
    communication time scales with 1 / effective bandwidth, so
    ``slowdown = (1 - f) + f * best / effective``. Insensitive jobs: 1.0.
    (MAPA measured up to 3x for VGG-16 between double NVLink and PCIe; with
    f = 0.5 the model gives 2.4x for that pair.)
    """

    def __init__(self, topologies: list[TopoMatrix | None], *, comm_fraction: float = 0.5,
                 regression: EffBWRegression | None | str = "default") -> None:
        if not 0.0 <= comm_fraction <= 1.0:
            raise ValueError(f"comm_fraction must be in 0..1, got {comm_fraction}")
        self.topologies = topologies
        self.comm_fraction = comm_fraction
        self.regression = default_regression() if regression == "default" else regression
        self._slow: dict[int, np.ndarray] = {}

    def table(self, node: int, n: int, pattern: str) -> SubsetTable | None:
        topo = self.topologies[node]
        return None if topo is None else subset_table(topo, n, pattern, self.regression)

    def effective_bandwidth(self, spec: JobSpec, node: int, local_ids) -> float | None:
        """Effective bandwidth (GB/s) of the job's pattern with rank i on ``local_ids[i]`` of ``node``."""
        n = len(local_ids)
        table = self.table(node, n, spec.pattern) if n > 1 else None
        if table is None:
            return None
        return table.embedding_effbw(local_ids)

    def slowdowns(self, spec: JobSpec, table: SubsetTable) -> np.ndarray:
        """Per-row slowdown of ``table`` for ``spec`` in each row's best embedding (ones when insensitive)."""
        if not spec.bw_sensitive or table.n < 2 or self.comm_fraction == 0:
            return np.ones(len(table.mask))
        out = self._slow.get(id(table))
        if out is None:
            out = self._slow[id(table)] = self.slowdown_at(table.effbw.max(), table.effbw)
        return out

    def slowdown(self, spec: JobSpec, node: int, local_ids) -> float:
        n = len(local_ids)
        if not spec.bw_sensitive or n < 2:
            return 1.0
        table = self.table(node, n, spec.pattern)
        if table is None or self.comm_fraction == 0:
            return 1.0
        return self.slowdown_at(table.effbw.max(), table.embedding_effbw(local_ids))

    def slowdown_at(self, best: float, effective):
        """``(1 - f) + f * best / effective``, never below 1 (vectorises over ``effective``)."""
        f = self.comm_fraction
        eff = np.maximum(effective, 1e-3)  # the regression can dip below zero far outside its data
        return (1 - f) + f * np.maximum(best / eff, 1.0)


__all__ = [
    "PATTERNS", "CommModel", "EffBWRegression", "SubsetTable", "canonical_pattern", "default_regression",
    "pattern_edges", "subset_table", "uniform_topology",
]
