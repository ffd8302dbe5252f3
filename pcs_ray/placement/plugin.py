"""What placement plugins implement and what they see (the framework's vocabulary).

Three kinds of plugin, after the Kubernetes scheduling framework's extension points:

* :class:`Source` yields :class:`Candidates` (GPU sets for one job) in its order of preference;
* :class:`Filter` rejects nodes and/or candidates, each rejection counted under a typed :class:`Reason`;
* :class:`Score` rates candidates with a factor (positive, lower is better, 1 = no penalty) and may
  bound it from below per node (``floor``) so that searches can skip nodes.

Every plugin reads one :class:`Context` per decision: the job, the free GPUs,
the GPUs it held, and shared per-decision work computed once on first use
(Kubernetes' CycleState, with typed fields instead of a string-keyed map).
Per-cluster tables live in :class:`~pcs_ray.placement.facts.ClusterFacts`;
plugins keep no state of their own, so one instance serves every placement.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from pcs_ray.placement.facts import ClusterFacts
from pcs_ray.jobs.state import JobState


@dataclass(frozen=True)
class Reason:
    """Why a filter rejected a node or candidate: a stable ``code`` (the explanation's key) and a sentence."""

    code: str
    text: str


NOT_ENOUGH_GPUS = Reason("not-enough-gpus", "the node has fewer free GPUs than the job needs")


def member(values: np.ndarray, among) -> np.ndarray:
    """``np.isin(values, among)``; for small inputs (a job's held GPUs or their nodes against a few
    candidates) a broadcast compare, several times faster than ``isin``, which matters on the hot path."""
    among = np.asarray(among)
    if values.size * among.size > 2048:
        ids = among.dtype.kind in "iu" and values.dtype.kind in "iu"
        if ids and values.ndim == 1 and values.size <= 512:
            # a few ids (a job's tied GPUs against its own): a set of them, whatever the range of the ids, where
            # isin's table would span the cluster
            seen = set(among.ravel().tolist())
            return np.fromiter(map(seen.__contains__, values.tolist()), dtype=bool, count=values.size)
        # many ids: a lookup table over their range, linear in the inputs (the default sorts them)
        return np.isin(values, among, kind="table" if ids else None)
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


class cached:
    """``functools.cached_property`` without the lock Python 3.11's takes on every first access:
    a context is built per placement decision, thousands of times per forward play, and never shared
    between threads."""

    def __init__(self, func) -> None:
        self.func, self.name, self.__doc__ = func, func.__name__, func.__doc__

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.func(obj)
        return value


class Context:
    """One decision: the job, its GPU count, the free GPUs, the GPUs it held; shared work computed once.

    ``config`` is the deciding ``framework.Configuration`` (its filters and
    scores; not imported here, which would be a cycle).
    """

    def __init__(self, config, facts: ClusterFacts, job: JobState, n: int, free: np.ndarray,
                 home: tuple[int, ...], rng: np.random.Generator | None = None, memory: dict | None = None,
                 planned: tuple[int, ...] | None = None) -> None:
        self.config, self.facts, self.job, self.spec, self.n, self.free, self.home = config, facts, job, job.spec, n, free, home
        self.rng = rng  # the placement's seeded generator (random choices stay reproducible)
        #: what the placement remembers between decisions for its plugins (e.g. the workloads already run)
        self.memory = {} if memory is None else memory
        #: the GPUs the policy chose for this job, if it chose any (``Placement.place``'s ``alloc.gpus``)
        self.planned = planned
        self.rejections: dict[str, int] = {}
        #: the best total so far (``None`` before the first candidate): sources may stop early with it
        self.best_total: float | None = None

    @cached
    def per_node(self) -> np.ndarray:
        """Free GPUs per node."""
        return self.facts.free_per_node(self.free)

    @cached
    def class_scores(self) -> np.ndarray:
        """Binned scores of the job's class per GPU (what variability-aware placement decides on)."""
        return self.facts.decision_scores(self.spec.job_class)

    @cached
    def nth_best(self) -> np.ndarray:
        """Per node, the ``n``-th best free binned score (+inf where fewer than ``n`` GPUs are free)."""
        m = self.facts.node_scores(self.class_scores, self.free)
        return np.partition(m, self.n - 1, axis=1)[:, self.n - 1]

    @cached
    def bits(self) -> np.ndarray:
        """Per node, the bitmask of its free GPUs."""
        return self.facts.free_bits(self.free)

    @cached
    def home_nodes(self) -> np.ndarray:
        """The node of each GPU the job held before this decision."""
        return self.facts.node[list(self.home)] if self.home else np.empty(0, dtype=np.int64)

    @cached
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

    @cached
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
        with np.errstate(invalid="ignore"):  # 0 x inf on a node that does not fit: masked below
            for term in arrays[1:]:
                bound = bound * term
        if scalar != 1.0:
            bound = bound * scalar
        return np.where(ok, bound, np.inf)


# -- the three kinds of plugin ------------------------------------------------------------


class Plugin:
    """What every plugin has: a name (the explanation's key) and a hook run when a placement is built."""

    name: ClassVar[str]
    #: The job's spec fields (``JobSpec`` attribute names) this plugin's answers depend on, beyond the free
    #: GPUs, the GPU count, the GPUs the job held and the placement's fixed cluster facts. ``None``
    #: (undeclared) means a configuration using the plugin never reuses a decision (``Configuration.cache_fields``).
    reads: ClassVar[frozenset[str] | None] = None
    #: Draws from the placement's generator or keeps state between decisions (``Context.rng``/``memory``):
    #: the same inputs need not give the same answer, so its decisions are never reused.
    stateful: ClassVar[bool] = False

    def keeps(self, facts: ClusterFacts) -> bool:
        """Whether, as far as this plugin goes, a job re-placed with the GPUs it won as its home wins them again
        when the free GPUs differ from its decision's only by GPUs taken that it did not win and GPUs freed
        whose binned score for its class is no better than the winner's total (``Configuration.keeps``).
        True of scores whose factor reads only the candidate's own GPUs and is at least 1, of sources that
        offer the best-scoring GPUs first and the held ones first on ties, of tie-breaks that prefer the
        held GPUs; the default, False, never assumes it."""
        return False

    def prepare(self, facts: ClusterFacts) -> None:
        """Build the per-cluster tables this plugin reads (e.g. binned scores), once per placement,
        so that the first decision is not slow and bad input fails at construction."""


class Source(Plugin):
    """Generates candidate GPU sets for a job (Kubernetes has nodes; we have GPU sets)."""

    #: only when no earlier source of the configuration produced a candidate
    fallback: bool = False

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        raise NotImplementedError


class Filter(Plugin):
    """Rejects nodes (``nodes``) and/or candidates (``candidates``) with a typed reason.

    Override one or both; return a boolean keep-mask, one entry per node or per candidate.
    """

    reason: ClassVar[Reason]

    def nodes(self, ctx: Context) -> np.ndarray:
        raise NotImplementedError

    def candidates(self, ctx: Context, batch: Candidates) -> np.ndarray:
        raise NotImplementedError


class Score(Plugin):
    """Rates candidates: one factor per candidate, positive, lower is better, 1 = no penalty.

    ``floor`` bounds the factor from below for any candidate within each node
    (an array over nodes, or one number for all): searches skip nodes that
    cannot win. The default, 0, says nothing, so every node is searched.
    """


    #: The factor is the candidate's worst binned score for the job's class (``Configuration.keeps``' threshold).
    worst_gpu: ClassVar[bool] = False

    def score(self, ctx: Context, batch: Candidates) -> np.ndarray:
        raise NotImplementedError

    def floor(self, ctx: Context) -> np.ndarray | float:
        return 0.0


class NodeFits(Filter):
    """A node needs ``n`` free GPUs to hold the job by itself."""

    name = "node-fits"
    reason = NOT_ENOUGH_GPUS
    reads = frozenset()

    def keeps(self, facts: ClusterFacts) -> bool:
        return True

    def nodes(self, ctx: Context) -> np.ndarray:
        return ctx.per_node >= ctx.n


def overrides(plugin: Filter, method: str) -> bool:
    """Whether ``plugin`` implements ``method`` (``"nodes"`` or ``"candidates"``) itself."""
    return getattr(type(plugin), method) is not getattr(Filter, method)


__all__ = ["NOT_ENOUGH_GPUS", "Candidates", "Context", "Filter", "NodeFits", "Plugin", "Reason", "Score", "Source",
           "member", "overrides"]
