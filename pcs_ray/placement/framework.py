"""Placement as candidates -> filters -> scores, after the Kubernetes scheduling framework.

For one job that needs ``n`` GPUs, a :class:`Configuration` runs:

1. **Filters** on nodes (``Filter.nodes``): which nodes may hold a within-node
   candidate; every rejected node is counted under the filter's typed
   :class:`Reason` (:class:`NodeFits` always runs first: not enough free GPUs).
2. **Sources** (``Source.candidates``) yield :class:`Candidates`, batches of
   GPU sets within one node or across nodes, in the source's preference order.
   A ``fallback`` source runs only when no earlier source produced a candidate.
3. **Filters** on candidates (``Filter.candidates``) drop GPU sets, counted by reason.
4. **Scores** (``Score.score``) give every candidate a *factor*: positive, lower
   is better, 1 = no penalty (the unit the simulator charges: a job runs at
   speedup / (variability x locality x topology)). The total is the weighted
   product ``prod(value ** weight)``, i.e. weights act on ``ln(value)``, the
   scores' common normalised scale. The lowest total wins; totals equal to 12
   decimals are ties, broken by a within-node candidate before an across-nodes
   one, then by the ``tie_breaks`` scores in order, then by source order.

Plugins hold no per-cluster state (that is :class:`ClusterFacts`) and no
per-decision state (that is the :class:`Context`, Kubernetes' CycleState with
typed fields), so one configuration serves every placement built from it.
Adding a plugin is a subclass of :class:`Score` or :class:`Filter` and a
configuration that lists it (``Configuration.with_score``/``with_filter``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar, NamedTuple

import numpy as np

from pcs_ray.placement.facts import ClusterFacts
from pcs_ray.state import JobState


class PlacementError(RuntimeError):
    """A placement broke its contract (returned busy or too few GPUs): a bug, not user error."""


@dataclass(frozen=True)
class Reason:
    """Why a filter rejected a node or candidate: a stable ``code`` (the explanation's key) and a sentence."""

    code: str
    text: str


NOT_ENOUGH_GPUS = Reason("not-enough-gpus", "the node has fewer free GPUs than the job needs")


class Unplaceable(PlacementError):
    """Filters rejected every candidate; ``rejections`` counts them by reason code."""

    def __init__(self, job_id: int, rejections: dict[str, int]) -> None:
        self.rejections = dict(rejections)
        why = ", ".join(f"{code}: {k}" for code, k in self.rejections.items()) or "no candidates"
        super().__init__(f"job {job_id}: every candidate was rejected ({why})")


def member(values: np.ndarray, among) -> np.ndarray:
    """``np.isin(values, among)``; for small inputs (a job's held GPUs or their nodes against a few
    candidates) a broadcast compare, several times faster than ``isin``, which matters on the hot path."""
    among = np.asarray(among)
    if values.size * among.size > 2048:
        return np.isin(values, among)
    return (values[..., None] == among).any(axis=-1)


class Candidates:
    """A batch of candidate GPU sets for one job, from one source.

    ``nodes`` is each candidate's node (``-1`` for candidates of an
    ``across`` batch, which may spread over nodes). GPU ids (rows of ``n``
    global ids in rank order) are given, or built on first use by ``row(i)``,
    so scores that only read ``nodes`` never pay for them. ``table``/``rows``
    say which rows of a node's :class:`~pcs_ray.placement.bandwidth.SubsetTable`
    the candidates are, for scores that read links.
    """

    __slots__ = ("source", "nodes", "across", "table", "rows", "_gpus", "_row")

    def __init__(self, source: str, nodes: np.ndarray, *, gpus: np.ndarray | None = None,
                 row: Callable[[int], np.ndarray] | None = None, across: bool = False,
                 table=None, rows: np.ndarray | None = None) -> None:
        self.source, self.nodes, self.across, self.table, self.rows = source, nodes, across, table, rows
        self._gpus, self._row = gpus, row

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def gpus(self) -> np.ndarray:
        if self._gpus is None:
            self._gpus = np.stack([self._row(i) for i in range(len(self.nodes))])
        return self._gpus

    def one(self, i: int) -> np.ndarray:
        return self._gpus[i] if self._gpus is not None else self._row(i)

    def keep(self, mask: np.ndarray) -> "Candidates":
        """The candidates where ``mask`` is true."""
        idx = np.flatnonzero(mask)
        row = self._row
        return Candidates(
            self.source, self.nodes[idx], across=self.across, table=self.table,
            rows=None if self.rows is None else self.rows[idx],
            gpus=None if self._gpus is None else self._gpus[idx],
            row=None if row is None else (lambda i: row(int(idx[i]))),
        )


class Context:
    """One decision: the job, its GPU count, the free GPUs, the GPUs it held; shared work computed once."""

    def __init__(self, config: "Configuration", facts: ClusterFacts, job: JobState, n: int, free: np.ndarray,
                 home: tuple[int, ...], rng: np.random.Generator | None = None) -> None:
        self.config, self.facts, self.job, self.spec, self.n, self.free, self.home = config, facts, job, job.spec, n, free, home
        self.rng = rng  # the placement's seeded generator (random choices stay reproducible)
        self.rejections: dict[str, int] = {}
        #: the best total so far (``None`` before the first candidate): sources may stop early with it
        self.best_total: float | None = None

    @cached_property
    def per_node(self) -> np.ndarray:
        """Free GPUs per node."""
        return self.facts.free_per_node(self.free)

    @cached_property
    def class_scores(self) -> np.ndarray:
        """Binned scores of the job's class per GPU (what variability-aware placement decides on)."""
        return self.facts.decision_scores(self.spec.job_class)

    @cached_property
    def nth_best(self) -> np.ndarray:
        """Per node, the ``n``-th best free binned score (+inf where fewer than ``n`` GPUs are free)."""
        m = self.facts.node_scores(self.class_scores, self.free)
        return np.partition(m, self.n - 1, axis=1)[:, self.n - 1]

    @cached_property
    def bits(self) -> np.ndarray:
        """Per node, the bitmask of its free GPUs."""
        return self.facts.free_bits(self.free)

    @cached_property
    def home_nodes(self) -> np.ndarray:
        """The node of each GPU the job held before this decision."""
        return self.facts.node[list(self.home)] if self.home else np.empty(0, dtype=np.int64)

    @cached_property
    def node_ok(self) -> np.ndarray:
        """Nodes that pass every node filter (a within-node candidate may use them); rejections counted."""
        ok = None
        for f in self.config.node_filters:
            keep = f.nodes(self)
            if ok is None:
                rejected = len(keep) - int(np.count_nonzero(keep))
                ok = keep
            else:
                rejected = int(np.count_nonzero(ok & ~keep))
                ok = ok & keep
            if rejected:
                self.reject(f.reason, rejected)
        return ok

    def reject(self, reason: Reason, count: int) -> None:
        self.rejections[reason.code] = self.rejections.get(reason.code, 0) + count

    @cached_property
    def node_bounds(self) -> np.ndarray:
        """Per node, a lower bound of the total any candidate within it can score (+inf where
        ``node_ok`` is false): the weighted product of the scores' floors."""
        scalar, arrays = 1.0, []
        for plugin, weight in self.config.scores:
            floor = plugin.floor(self)
            if np.ndim(floor) == 0:
                scalar *= float(floor) ** weight
            else:
                arrays.append(floor if weight == 1.0 else np.power(floor, weight))
        ok = self.node_ok
        if scalar == 0.0 or not arrays:
            return np.where(ok, scalar, np.inf)
        bound = arrays[0]
        for term in arrays[1:]:
            bound = bound * term
        if scalar != 1.0:
            bound = bound * scalar
        return np.where(ok, bound, np.inf)


# -- the three kinds of plugin ------------------------------------------------------------


class Source:
    """Generates candidate GPU sets for a job (Kubernetes has nodes; we have GPU sets)."""

    name: ClassVar[str]
    #: only when no earlier source of the configuration produced a candidate
    fallback: bool = False

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        raise NotImplementedError


class Filter:
    """Rejects nodes (``nodes``) and/or candidates (``candidates``) with a typed reason.

    Override one or both; return a boolean keep-mask, one entry per node or per candidate.
    """

    name: ClassVar[str]
    reason: ClassVar[Reason]

    def nodes(self, ctx: Context) -> np.ndarray:
        raise NotImplementedError

    def candidates(self, ctx: Context, batch: Candidates) -> np.ndarray:
        raise NotImplementedError


class Score:
    """Rates candidates: one factor per candidate, positive, lower is better, 1 = no penalty.

    ``floor`` bounds the factor from below for any candidate within each node
    (an array over nodes, or one number for all): searches skip nodes that
    cannot win. The default, 0, says nothing, so every node is searched.
    """

    name: ClassVar[str]

    def score(self, ctx: Context, batch: Candidates) -> np.ndarray:
        raise NotImplementedError

    def floor(self, ctx: Context) -> np.ndarray | float:
        return 0.0


class NodeFits(Filter):
    """A node needs ``n`` free GPUs to hold the job by itself."""

    name = "node-fits"
    reason = NOT_ENOUGH_GPUS

    def nodes(self, ctx: Context) -> np.ndarray:
        return ctx.per_node >= ctx.n


def _overrides(plugin: Filter, method: str) -> bool:
    return getattr(type(plugin), method) is not getattr(Filter, method)


# -- configurations and the decision ------------------------------------------------------


class Decision(NamedTuple):
    """What is kept per job: the winner only (row ``row`` of its batch's score arrays), plus rejection counts.

    The arrays are the batch's, kept by reference: nothing is converted until someone asks (``explain``).
    """

    source: str
    gpus: np.ndarray
    values: list[np.ndarray]  # each score's factors, in the configuration's order
    ties: list[np.ndarray]  # each tie-break score's factors
    row: int
    rejections: dict[str, int]
    candidates: int  # how many candidates were scored


@dataclass(frozen=True)
class Configuration:
    """A named placement: its plugins, their weights, and how jobs are ordered and kept.

    ``sticky``: only jobs whose GPU count changed are placed (else every
    running job is re-placed each round). ``class_order``: jobs are placed
    variability class A first (PM-First's order). ``ranked``: candidates'
    GPUs are in rank order (an embedding of the job's communication pattern)
    and kept so; otherwise GPU ids are sorted. ``about`` adds settings to
    ``Placement.describe()``.
    """

    name: str
    help: str
    sources: tuple[Source, ...]
    scores: tuple[tuple[Score, float], ...] = ()
    tie_breaks: tuple[Score, ...] = ()
    filters: tuple[Filter, ...] = ()
    sticky: bool = True
    class_order: bool = False
    ranked: bool = False
    about: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not any(isinstance(f, NodeFits) for f in self.filters):
            object.__setattr__(self, "filters", (NodeFits(), *self.filters))
        for plugin, weight in self.scores:
            if not weight >= 0:
                raise ValueError(f"{self.name}: score {plugin.name} needs a weight >= 0, got {weight}")
        object.__setattr__(self, "unit_weights", all(w == 1.0 for _, w in self.scores))
        object.__setattr__(self, "node_filters", tuple(f for f in self.filters if _overrides(f, "nodes")))
        object.__setattr__(self, "batch_filters", tuple(f for f in self.filters if _overrides(f, "candidates")))

    def with_score(self, plugin: Score, weight: float = 1.0, **changes) -> "Configuration":
        """This configuration with one more weighted score (``changes``: e.g. a new ``name`` and ``help``)."""
        return dataclasses.replace(self, scores=(*self.scores, (plugin, float(weight))), **changes)

    def with_filter(self, plugin: Filter, **changes) -> "Configuration":
        """This configuration with one more filter."""
        return dataclasses.replace(self, filters=(*self.filters, plugin), **changes)

    def context(self, facts: ClusterFacts, job: JobState, n: int, free: np.ndarray, home: tuple[int, ...],
                rng: np.random.Generator | None = None) -> Context:
        return Context(self, facts, job, n, free, home, rng)

    def decide(self, ctx: Context) -> tuple[np.ndarray, Decision]:
        """The winning GPU set for ``ctx``'s job and what to keep about it.

        Totals within 1e-12 of each other tie (inside a batch: equal when
        rounded to 12 decimals); a tie goes to a within-node candidate, then
        to the tie-break scores, then to the earlier candidate.
        """
        scores, tie_breaks, batch_filters = self.scores, self.tie_breaks, self.batch_filters
        first_wins = not scores and not tie_breaks  # nothing to compare: the first candidate wins
        unit = self.unit_weights
        best_batch, best_total, best_rest = None, 0.0, ()
        best_i, best_values, best_ties, seen = 0, [], [], 0
        for source in self.sources:
            if source.fallback and best_batch is not None:
                continue
            for batch in source.candidates(ctx):
                for f in batch_filters:
                    keep = f.candidates(ctx, batch)
                    if not keep.all():
                        ctx.reject(f.reason, len(keep) - int(np.count_nonzero(keep)))
                        batch = batch.keep(keep)
                k = len(batch)
                if not k:
                    continue
                seen += k
                if first_wins:
                    best_batch = batch
                    break
                values = [plugin.score(ctx, batch) for plugin, _ in scores]
                ties = [plugin.score(ctx, batch) for plugin in tie_breaks]
                if k == 1 and unit:  # the common case, in Python floats (the same IEEE products)
                    i, total = 0, 1.0
                    for v in values:
                        total = total * float(v[0])
                else:
                    product = _weighted_product(values, scores, k)
                    i = 0 if k == 1 else int(np.lexsort((*reversed(ties), np.round(product, 12)))[0])
                    total = float(product[i])
                rest = (batch.across, *[float(t[i]) for t in ties]) if ties else (batch.across,)
                if best_batch is not None:
                    gap = total - best_total
                    if gap > 1e-12 or (gap >= -1e-12 and not rest < best_rest):
                        continue
                best_batch, best_total, best_rest, best_i = batch, total, rest, i
                best_values, best_ties = values, ties
                ctx.best_total = total
            if first_wins and best_batch is not None:
                break
        if best_batch is None:
            raise Unplaceable(ctx.spec.job_id, ctx.rejections)
        gpus = best_batch.one(best_i)
        return gpus, Decision(best_batch.source, gpus, best_values, best_ties, best_i, ctx.rejections, seen)


def _weighted_product(values: list[np.ndarray], scores, k: int) -> np.ndarray:
    """``prod(value ** weight)`` over the scores, in order (a weight of 1 multiplies the value itself)."""
    if not values:
        return np.ones(k)
    total = None
    for v, (_, w) in zip(values, scores):
        term = v if w == 1.0 else np.power(v, w)
        total = term if total is None else total * term
    return total


__all__ = [
    "NOT_ENOUGH_GPUS", "Candidates", "Configuration", "Context", "Decision", "Filter", "NodeFits",
    "PlacementError", "Reason", "Score", "Source", "Unplaceable", "member",
]
