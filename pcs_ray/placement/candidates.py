"""Candidate sources: which GPU sets a job could get, in each policy's order of preference.

A source yields batches of :class:`Candidates`; its order breaks the ties the
scores leave (earlier wins). Within-node sources use only the nodes every
node filter passed (``Context.node_ok``); across-nodes sources may use any
free GPU. ``home`` (the GPUs a job held before this round) is preferred on
ties where a source says so, so that re-placing a job moves it only for a
real improvement.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from pcs_ray.placement.facts import ClusterFacts
from pcs_ray.placement.plugin import Candidates, Context, Source, member


def best_scores(ctx: Context, free: np.ndarray) -> np.ndarray:
    """The ``n`` GPUs of ``free`` with the lowest binned scores, the job's own first on ties (PM-First's rule).

    Reads the class's GPUs best first only until it has ``n + 1`` free ones (in growing chunks), not the
    whole cluster: the rule needs no more than those, and the job's own GPUs that tie at the ``n``-th
    score, which it reads from ``free`` itself."""
    ranked = ctx.facts.sorted_gpus(ctx.spec.job_class)
    n, home = ctx.n, ctx.home
    size, k = len(ranked), _HEAD
    while True:
        head = ranked[:k]
        cand = head[free[head]]  # the first free GPUs, best score first, ties by id
        if len(cand) > n or k >= size:
            break
        k *= 4
    if len(cand) <= n or not home:
        return cand[:n]
    scores = ctx.class_scores
    thr = scores[cand[n - 1]]
    lo = int(np.count_nonzero(scores[cand[:n]] < thr))  # those below the n-th score: a prefix
    # Then the tied GPUs: the job's own (by id, as they rank), then the others of the first n. Those hold
    # enough: each of the job's own among them leaves one place fewer to fill.
    mine = sorted(g for g in home if free[g] and scores[g] == thr)[: n - lo]
    tied = cand[lo:n]
    others = tied[~member(tied, home)][: n - lo - len(mine)]
    return np.concatenate([cand[:lo], np.asarray(mine, dtype=cand.dtype), others])


#: how many of a class's GPUs, best first, ``best_scores`` reads first (then 4 times as many, and so on)
_HEAD = 256


def best_on_node(ctx: Context, node: int) -> np.ndarray:
    """:func:`best_scores` among the free GPUs of ``node`` (sorting only the node's GPUs)."""
    facts = ctx.facts
    start = facts.node_start[node]
    ids = start + ctx.free[start : start + facts.node_size[node]].nonzero()[0]
    return _first_n(ctx, ids[np.argsort(ctx.class_scores[ids], kind="stable")])


def _first_n(ctx: Context, cand: np.ndarray) -> np.ndarray:
    """The first ``n`` of ``cand`` (GPUs best score first, ties by id), the job's own first among those
    tied at the ``n``-th score."""
    n, home = ctx.n, ctx.home
    if len(cand) <= n or not home:
        return cand[:n]
    scores = ctx.class_scores[cand]
    thr = scores[n - 1]
    below = cand[scores < thr]
    at = cand[scores == thr]
    mine = member(at, home)
    at = np.concatenate([at[mine], at[~mine]])
    return np.concatenate([below, at[: n - len(below)]])


def lowest_ids(ctx: Context, node: int, n: int, home: tuple[int, ...] = ()) -> np.ndarray:
    """The ``n`` lowest free ids of ``node``, the GPUs of ``home`` first."""
    facts = ctx.facts
    start = facts.node_start[node]
    ids = start + ctx.free[start : start + facts.node_size[node]].nonzero()[0]
    if home and len(ids) > n:
        mine = member(ids, home)
        ids = np.concatenate([ids[mine], ids[~mine]])
    return ids[:n]


#: the node of an across-nodes candidate
_ACROSS = np.array([-1])
_ACROSS.setflags(write=False)


class _ByScore(Source):
    """A source that ranks GPUs by their binned scores."""

    reads = frozenset({"job_class"})

    def prepare(self, facts: ClusterFacts) -> None:
        facts.need("by_score")


class ClusterBest(_ByScore):
    """PM-First: the ``n`` best-scoring free GPUs anywhere (one candidate, across nodes)."""

    name = "cluster-best"

    def keeps(self, facts: ClusterFacts) -> bool:
        return True

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        gpus = best_scores(ctx, ctx.free)
        yield Candidates(self.name, _ACROSS, gpus=gpus[None, :], across=True)


class BestNodesFirst(_ByScore):
    """Nodes in order of the lowest total they could give the job, one batch per node.

    The bound is the product of the scores' floors; with variability scored it
    is the ``n``-th best free score on the node, so this is PAL's L x V
    traversal along the within-node row: the first node holds the job at the
    lowest score bin any node can. Ties go to the node the job was on, then
    the fullest node (best fit), then the lowest index. On a node, the
    candidate is its ``n`` best-scoring GPUs; with ``subsets``, on nodes with
    a topology, every free subset in its best embedding (so links can trade
    against scores). ``single_gpu``: also 1-GPU jobs, where the cluster has
    links (one GPU can still cost links).

    The search stops at a node whose bound exceeds the best total so far, or
    that could only tie it when no tie-break could make it win. Two limits
    of the combined policy's search are kept as options: ``budget``, the
    most nodes visited after the first while their bound does not exceed the
    best, and ``stop_without_links``, ending there at a node without a topology.
    """

    name = "best-nodes"
    reads = frozenset({"job_class", "pattern"})  # the subset tables are per pattern

    def __init__(self, *, subsets: bool = False, single_gpu: bool = False, budget: int | None = None,
                 stop_without_links: bool = False) -> None:
        self.subsets, self.single_gpu, self.budget, self.stop_without_links = subsets, single_gpu, budget, stop_without_links

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        facts, n = ctx.facts, ctx.n
        if n > facts.gpus_per_node or (n == 1 and not (self.single_gpu and facts.has_topology)):
            return
        bound = ctx.node_bounds
        lowest = bound.min()
        if not np.isfinite(lowest):
            return
        tied = (bound == lowest).nonzero()[0]
        if len(tied) > 1:
            at_home = tied[member(tied, ctx.home_nodes)] if ctx.home else tied[:0]
            if len(at_home):
                tied = at_home
            nfree = ctx.per_node[tied]
            tied = tied[nfree == nfree.min()]
        first = int(tied[0])
        yield self._batch(ctx, first)
        can_tie = bool(ctx.config.tie_breaks)  # otherwise a tie goes to the node visited first
        best = ctx.best_total
        if best is not None and not can_tie and lowest >= best - 1e-12:
            return  # no other node can do better than the first (PAL's case: nothing to sort)
        fits = np.isfinite(bound).nonzero()[0]
        at_home = member(fits, ctx.home_nodes) if ctx.home else np.zeros(len(fits), dtype=bool)
        visited = 0
        for node in fits[np.lexsort((fits, ctx.per_node[fits], ~at_home, bound[fits]))]:
            node = int(node)
            if node == first:
                continue
            best = ctx.best_total
            if best is not None:
                if bound[node] > best + 1e-12 or (not can_tie and bound[node] >= best - 1e-12):
                    return
                visited += 1
                if self.budget is not None and visited > self.budget:
                    return
                if self.stop_without_links and not self._has_subsets(ctx, node):
                    return
            yield self._batch(ctx, node)

    def keeps(self, facts: ClusterFacts) -> bool:
        # On a node without links the candidate is its n best GPUs; a subset search trades them against links.
        return not (self.subsets and facts.has_topology)

    def prepare(self, facts: ClusterFacts) -> None:
        super().prepare(facts)
        if self.subsets:
            facts.need("hw_model")

    def _has_subsets(self, ctx: Context, node: int) -> bool:
        return self.subsets and ctx.facts.topologies[node] is not None

    def _batch(self, ctx: Context, node: int) -> Candidates:
        if not self._has_subsets(ctx, node):
            return Candidates(self.name, np.array([node]), gpus=best_on_node(ctx, node)[None, :])
        facts = ctx.facts
        table = facts.table(node, ctx.n, ctx.spec.pattern)
        rows = table.feasible(int(ctx.bits[node]))
        return Candidates(self.name, np.full(len(rows), node), gpus=facts.node_start[node] + table.eff_order[rows],
                          table=table, rows=rows)


class LowestIds(Source):
    """On every node that fits, its lowest free GPU ids (one candidate per node, in node order).

    With ``home``, the job's own nodes come first and its own GPUs first on them.
    """

    name = "lowest-ids"
    reads = frozenset()

    def __init__(self, *, home: bool = True, fallback: bool = False) -> None:
        self.home, self.fallback = home, fallback

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        nodes = ctx.node_ok.nonzero()[0]
        if not len(nodes):
            return
        home = ctx.home if self.home else ()
        if home:
            mine = member(nodes, ctx.home_nodes)
            nodes = np.concatenate([nodes[mine], nodes[~mine]])
        n = ctx.n
        yield Candidates(self.name, nodes, row=lambda i: lowest_ids(ctx, int(nodes[i]), n, home))


class SameSocket(Source):
    """On the nodes that fit, in order, the lowest free ids of the first CPU socket that holds the job."""

    name = "same-socket"
    reads = frozenset()

    def prepare(self, facts: ClusterFacts) -> None:
        facts.need("sockets")

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        facts, n = ctx.facts, ctx.n
        for node in ctx.node_ok.nonzero()[0]:
            start = facts.node_start[node]
            local_free = ctx.free[start : start + facts.node_size[node]].nonzero()[0]
            sockets = facts.sockets[node][local_free]
            for sock in np.unique(sockets):  # sockets in id order
                on = local_free[sockets == sock]
                if len(on) >= n:
                    yield Candidates(self.name, np.array([node]), gpus=(start + on[:n])[None, :])


class Embeddings(Source):
    """On every node that fits, every free subset in its best embedding (MAPA's pattern matches).

    ``embedding`` picks which best: by ``"effective"`` or ``"aggregated"``
    bandwidth. Nodes whose free GPUs form the same subset of the same links
    are offered once (the first): for scores that read only links and free
    GPUs they would tie, and the first would win.
    """

    name = "embeddings"
    reads = frozenset({"pattern"})

    def prepare(self, facts: ClusterFacts) -> None:
        facts.need("hw_model")

    def __init__(self, *, embedding: str = "effective") -> None:
        if embedding not in ("effective", "aggregated"):
            raise ValueError(f"embedding must be 'effective' or 'aggregated', got {embedding!r}")
        self.embedding = embedding

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        facts, n, pattern = ctx.facts, ctx.n, ctx.spec.pattern
        nodes = ctx.node_ok.nonzero()[0]
        if not len(nodes):
            return
        bits = ctx.bits
        # the first node of each (table, free GPUs) group, in node order, found by array operations
        width = facts.gpus_per_node
        if width <= 32:
            key = (facts.table_groups(n, pattern)[nodes] << width) | bits[nodes]
            _, first = np.unique(key, return_index=True)
            nodes = nodes[np.sort(first)]
        else:  # the key would not fit in 64 bits: group one node at a time
            seen: set[tuple[int, int]] = set()
            keep = []
            for node in nodes.tolist():
                group = (id(facts.table(node, n, pattern)), int(bits[node]))
                if group not in seen:
                    seen.add(group)
                    keep.append(node)
            nodes = np.asarray(keep, dtype=np.int64)
        for node in nodes.tolist():
            table = facts.table(node, n, pattern)
            rows = table.feasible(int(bits[node]))
            order = table.agg_order if self.embedding == "aggregated" else table.eff_order
            yield Candidates(self.name, np.full(len(rows), node), gpus=facts.node_start[node] + order[rows],
                             table=table, rows=rows)


class Spread(Source):
    """Across nodes as Packed spreads: the nodes with the most free GPUs first, lowest ids (own GPUs first) on each.

    Every node but the last it takes from gives all its free GPUs (in id order); only the last one chooses
    among its free GPUs, so only that node's are read one by one."""

    name = "spread"
    reads = frozenset()

    def __init__(self, *, fallback: bool = True) -> None:
        self.fallback = fallback

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        per_node, n, facts = ctx.per_node, ctx.n, ctx.facts
        some = per_node.nonzero()[0]  # nodes with a free GPU, in node order
        nodes = some[np.argsort(-per_node[some], kind="stable")]  # the most free GPUs first, ties by node
        held = np.cumsum(per_node[nodes])
        k = int(np.searchsorted(held, n))  # the first node where the GPUs taken reach n
        if k >= len(nodes):  # fewer free GPUs than n: all of them
            k, need = len(nodes) - 1, int(per_node[nodes[-1]])
        else:
            need = n - (int(held[k - 1]) if k else 0)
        whole = facts.grid[nodes[:k]].ravel()
        if not facts.byte_nodes:
            whole = whole[whole >= 0]  # smaller nodes' padding
        last = lowest_ids(ctx, int(nodes[k]), need, ctx.home)
        gpus = np.concatenate([whole[ctx.free[whole]], last])
        yield Candidates(self.name, _ACROSS, gpus=gpus[None, :], across=True)


class RandomDraw(Source):
    """Any ``n`` free GPUs, drawn without repetition from the placement's seeded generator."""

    name = "random"
    stateful = True

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        gpus = ctx.rng.choice(np.flatnonzero(ctx.free), size=ctx.n, replace=False)
        yield Candidates(self.name, _ACROSS, gpus=gpus[None, :], across=True)


__all__ = ["BestNodesFirst", "ClusterBest", "Embeddings", "LowestIds", "RandomDraw", "SameSocket", "Spread",
           "best_on_node", "best_scores", "lowest_ids"]
