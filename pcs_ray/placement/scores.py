"""Score plugins: one factor per candidate, positive, lower is better, 1 = no penalty.

Variability, locality and topology are the slowdowns the simulator charges
(a job runs at speedup / (slowest GPU x locality x topology)), so their
weighted product predicts how fast the job runs there. The bandwidth and
packing scores are ratios to the best value possible, so they share that
scale (and ``ln`` of every factor is the score's normalised cost).

Links across nodes are not modelled: across-nodes candidates get 1 from the
link scores and pay the locality penalty instead.
"""

from __future__ import annotations

import numpy as np

from pcs_ray.placement.facts import ClusterFacts
from pcs_ray.placement.plugin import Candidates, Context, Score, member


class Variability(Score):
    """The slowest GPU's binned score for the job's class (PM-Score; 1 = the median GPU)."""

    name = "variability"
    reads = frozenset({"job_class"})
    worst_gpu = True

    def keeps(self, facts: ClusterFacts) -> bool:
        return True

    def prepare(self, facts: ClusterFacts) -> None:
        facts.need("binned")

    def score(self, ctx: Context, batch: Candidates) -> np.ndarray:
        return np.maximum.reduce(ctx.class_scores[batch.gpus], axis=1)

    def floor(self, ctx: Context) -> np.ndarray:
        return ctx.nth_best  # no n GPUs of a node are better than its n best


class Locality(Score):
    """The locality penalty L for a multi-GPU candidate of an across-nodes source, else 1.

    An across-nodes candidate pays L even when its GPUs happen to share a node:
    it is the across row of PAL's L x V matrix.
    """

    name = "locality"
    reads = frozenset()

    def keeps(self, facts: ClusterFacts) -> bool:
        return True

    def score(self, ctx: Context, batch: Candidates) -> np.ndarray:
        charged = batch.across and ctx.n > 1
        return np.full(len(batch), ctx.facts.locality_penalty if charged else 1.0)

    def floor(self, ctx: Context) -> float:
        return 1.0


class Topology(Score):
    """The communication slowdown of the candidate's embedding on its node's links (``CommModel``).

    1 for bandwidth-insensitive jobs, 1-GPU jobs, nodes without a topology
    and across-nodes candidates.
    """

    name = "topology"
    reads = frozenset({"bw_sensitive", "pattern"})

    def keeps(self, facts: ClusterFacts) -> bool:
        return facts.comm is None  # then every factor is 1

    def score(self, ctx: Context, batch: Candidates) -> np.ndarray:
        comm = ctx.facts.comm
        if comm is None or batch.across:
            return np.ones(len(batch))
        if batch.table is not None:
            return comm.slowdowns(ctx.spec, batch.table)[batch.rows]
        local = ctx.facts.local
        return np.asarray([comm.slowdown(ctx.spec, int(node), local[g]) for node, g in zip(batch.nodes, batch.gpus)])

    def floor(self, ctx: Context) -> float:
        return 1.0  # the best embedding a job's size can get costs nothing


def _table_rows(ctx: Context, batch: Candidates):
    """(subset table, rows) of a within-node batch, by the GPU sets where the source did not say."""
    if batch.table is not None:
        return batch.table, batch.rows
    facts = ctx.facts
    node = int(batch.nodes[0])
    table = facts.table(node, ctx.n, ctx.spec.pattern)
    masks = (np.int64(1) << (batch.gpus - facts.node_start[node])).sum(axis=1)
    return table, np.asarray([table.row_of[int(m)] for m in masks], dtype=np.int64)


def _per_node(ctx: Context, batch: Candidates, one_node) -> np.ndarray:
    """Apply ``one_node(sub_batch)`` to the candidates of each node in turn (sources mostly give one node)."""
    nodes = batch.nodes
    if nodes[0] == nodes[-1]:
        return one_node(batch)
    out = np.empty(len(batch))
    for node in np.unique(nodes):
        mask = nodes == node
        out[mask] = one_node(batch.keep(mask))
    return out


class _Links(Score):
    """A score that reads the nodes' links."""

    def prepare(self, facts: ClusterFacts) -> None:
        facts.need("hw_model", "nvlink_bw")


class _Bandwidth(_Links):
    """Best possible over the candidate's own value, for a column of the subset tables (higher is better)."""

    column: str

    def applies(self, ctx: Context) -> bool:
        return True

    def floor(self, ctx: Context) -> float:
        return 1.0

    def score(self, ctx: Context, batch: Candidates) -> np.ndarray:
        if batch.across or not self.applies(ctx):
            return np.ones(len(batch))
        best = ctx.facts.best_table_value(ctx.n, ctx.spec.pattern, self.column)
        if not best > 0 or not np.isfinite(best):
            return np.ones(len(batch))

        def one_node(part: Candidates) -> np.ndarray:
            table, rows = _table_rows(ctx, part)
            return best / np.maximum(getattr(table, self.column)[rows], 1e-3)

        return _per_node(ctx, batch, one_node)


class AggregatedBandwidth(_Bandwidth):
    """The most aggregated link bandwidth any node offers the job's pattern over the candidate's (MAPA Greedy)."""

    name = "aggregated-bandwidth"
    reads = frozenset({"pattern"})
    column = "aggbw"


class EffectiveBandwidth(_Bandwidth):
    """The best predicted effective bandwidth any node offers over the candidate's (MAPA).

    ``sensitive_only``: 1 unless the job is bandwidth-sensitive and multi-GPU
    (MAPA Preserve's rule for such jobs).
    """

    name = "effective-bandwidth"
    reads = frozenset({"bw_sensitive", "pattern"})
    column = "effbw"

    def __init__(self, *, sensitive_only: bool = False) -> None:
        self.sensitive_only = sensitive_only

    def applies(self, ctx: Context) -> bool:
        return not self.sensitive_only or (ctx.spec.bw_sensitive and ctx.n > 1)


class PreservedBandwidth(_Links):
    """1 + NVLink bandwidth the free GPUs lose if the candidate is taken, per the largest node's NVLink total.

    Minimising it maximises MAPA's preserved bandwidth on the node.
    ``insensitive_only``: 1 for bandwidth-sensitive multi-GPU jobs (MAPA
    Preserve's rule for the other jobs).
    """

    name = "preserved-bandwidth"
    reads = frozenset({"bw_sensitive", "pattern"})

    def keeps(self, facts: ClusterFacts) -> bool:
        return facts.nvlink_total == 0  # then every factor is 1; otherwise it reads the node's other free GPUs

    def __init__(self, *, insensitive_only: bool = False) -> None:
        self.insensitive_only = insensitive_only

    def floor(self, ctx: Context) -> float:
        return 1.0

    def score(self, ctx: Context, batch: Candidates) -> np.ndarray:
        facts = ctx.facts
        if batch.across or (self.insensitive_only and ctx.spec.bw_sensitive and ctx.n > 1) or facts.nvlink_total == 0:
            return np.ones(len(batch))

        def one_node(part: Candidates) -> np.ndarray:
            node = int(part.nodes[0])
            if part.table is not None:
                members, pairs = part.table.members[part.rows], part.table.pairs
            else:
                members = np.sort(part.gpus - facts.node_start[node], axis=1)
                pairs = np.triu_indices(ctx.n, 1)
            return 1.0 + removed_bandwidth(facts.nvlink_bw[node], int(ctx.bits[node]), members, pairs) / facts.nvlink_total

        return _per_node(ctx, batch, one_node)


def removed_bandwidth(bw: np.ndarray, bits: int, members: np.ndarray, pairs) -> np.ndarray:
    """NVLink bandwidth (GB/s) the free GPUs of a node (``bits``) lose if each row of ``members`` is taken.

    Preserved bandwidth = (links among free GPUs now) - this.
    """
    free_local = ((bits >> np.arange(bw.shape[0])) & 1).astype(bool)
    reach = bw[:, free_local].sum(axis=1)  # per GPU: bandwidth of its links to free GPUs
    if members.shape[1] < 2:
        return reach[members[:, 0]]
    internal = bw[members[:, pairs[0]], members[:, pairs[1]]].sum(axis=1)
    return reach[members].sum(axis=1) - internal


class BestFit(Score):
    """Free GPUs on the candidate's node(s) per GPU the job takes (1 = it fills them): Packed's rule."""

    name = "best-fit"
    reads = frozenset()

    def score(self, ctx: Context, batch: Candidates) -> np.ndarray:
        if batch.across:
            per_node, node = ctx.per_node.tolist(), ctx.facts.node
            room = np.asarray([sum(per_node[k] for k in set(node[g].tolist())) for g in batch.gpus])
        else:
            room = ctx.per_node[batch.nodes]
        return room / ctx.n

    def floor(self, ctx: Context) -> np.ndarray:
        return ctx.per_node / ctx.n


class KeepGPUs(Score):
    """1 + the share of the job's GPUs that would move (1 = it keeps all it held).

    Known quirk, kept so that results stay those of the combined policy
    before this framework: among a node's subsets (``batch.table``), held
    GPUs count only on the node of ``next(iter(set(home)))``, so a job that
    spanned nodes is kept only there. Counting on every node is the intended rule.
    """

    name = "keep-gpus"
    reads = frozenset()

    def keeps(self, facts: ClusterFacts) -> bool:
        return not facts.has_topology  # with links, held GPUs count on one node of the job only (the quirk)

    def score(self, ctx: Context, batch: Candidates) -> np.ndarray:
        n = ctx.n
        if not ctx.home:
            return np.full(len(batch), 2.0)
        if batch.table is not None and ctx.facts.node[next(iter(set(ctx.home)))] != batch.nodes[0]:
            return np.full(len(batch), 2.0)
        kept = member(batch.gpus, ctx.home).sum(axis=1)
        return 1.0 + (n - kept) / n

    def floor(self, ctx: Context) -> float:
        return 1.0


__all__ = ["AggregatedBandwidth", "BestFit", "EffectiveBandwidth", "KeepGPUs", "Locality", "PreservedBandwidth",
           "Topology", "Variability", "removed_bandwidth"]
