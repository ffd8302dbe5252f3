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
   scores' common normalised scale. The lowest total wins; totals within
   1e-12 are ties, broken by a within-node candidate before an across-nodes
   one, then by the ``tie_breaks`` scores in order, then by source order.

The plugin interfaces are in ``plugin.py``; this module runs them. Adding a
plugin is a subclass of ``Score`` or ``Filter`` and a configuration that
lists it (``Configuration.with_score``/``with_filter``, then ``register``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from pcs_ray.placement.facts import ClusterFacts
from pcs_ray.placement.plugin import Context, Filter, NodeFits, Score, Source, overrides
from pcs_ray.jobs.state import JobState


class PlacementError(RuntimeError):
    """A placement broke its contract (returned busy or too few GPUs): a bug, not user error."""


class Unplaceable(PlacementError):
    """Filters rejected every candidate; ``rejections`` counts them by reason code."""

    def __init__(self, job_id: int, rejections: dict[str, int]) -> None:
        self.rejections = dict(rejections)
        why = ", ".join(f"{code}: {k}" for code, k in self.rejections.items()) or "no candidates"
        super().__init__(f"job {job_id}: every candidate was rejected ({why})")


# -- how much placement work was asked for ------------------------------------------------


class Counters:
    """Placement work done in this process (``bench/sim_scale.py`` reads it): ``decisions`` computed by a
    configuration and ``gpus_read``, the cluster GPUs their contexts read (each reads the free mask of the
    whole cluster); ``reused``, decisions looked up again (``Placement``'s reuse table); ``kept``, jobs a
    re-placing round left on their GPUs without deciding again (``Placement``'s round record); ``rounds``,
    calls of ``Placement.place`` and the rounds a queue play places itself (``Placement.count``);
    ``gpus_touched``, GPUs whose holder changed: each GPU a job gained or
    lost in a round, or gave back when it finished (what the events asked for, whatever the work done)."""

    __slots__ = ("decisions", "gpus_read", "gpus_touched", "kept", "reused", "rounds")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.decisions = self.gpus_read = self.reused = self.kept = self.rounds = self.gpus_touched = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


#: this process's placement work
COUNTERS = Counters()


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
    total: float = 1.0  # the winner's weighted product
    across: bool = False  # the winner came from an across-nodes batch

    def compact(self) -> "Decision":
        """The same decision holding only the winner's numbers (for jobs whose decision is final)."""
        row = self.row
        return Decision(self.source, tuple(int(g) for g in self.gpus), [(float(v[row]),) for v in self.values],
                        [(float(t[row]),) for t in self.ties], 0, self.rejections, self.candidates, self.total,
                        self.across)


@dataclass(frozen=True)
class Configuration:
    """A named placement: its plugins, their weights, and how jobs are ordered and kept.

    ``sticky``: only jobs whose GPU count changed are placed (else every
    running job is re-placed each round). ``class_order``: jobs are placed
    variability class A first (PM-First's order). ``size_order``: within a
    class, jobs with more GPUs this round are placed first, so the worst GPUs
    a full cluster must still hand out go to its smallest jobs (a synchronous
    job runs at its slowest GPU's pace, so one bad GPU costs as many
    GPU-seconds as its job has GPUs). ``ranked``: candidates'
    GPUs are in rank order (an embedding of the job's communication pattern)
    and kept so; otherwise GPU ids are sorted. ``about`` adds settings to
    ``Placement.describe()``. ``cache_fields`` (derived from the plugins'
    ``reads``): the job fields a decision depends on besides the free GPUs,
    the GPU count and the GPUs held, or ``None`` where a decision must never be reused.
    """

    name: str
    help: str
    sources: tuple[Source, ...]
    scores: tuple[tuple[Score, float], ...] = ()
    tie_breaks: tuple[Score, ...] = ()
    filters: tuple[Filter, ...] = ()
    sticky: bool = True
    class_order: bool = False
    size_order: bool = False
    ranked: bool = False
    about: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not any(isinstance(f, NodeFits) for f in self.filters):
            object.__setattr__(self, "filters", (NodeFits(), *self.filters))
        for plugin, weight in self.scores:
            if not weight >= 0:
                raise ValueError(f"{self.name}: score {plugin.name} needs a weight >= 0, got {weight}")
        object.__setattr__(self, "unit_weights", all(w == 1.0 for _, w in self.scores))
        object.__setattr__(self, "node_filters", tuple(f for f in self.filters if overrides(f, "nodes")))
        object.__setattr__(self, "batch_filters", tuple(f for f in self.filters if overrides(f, "candidates")))
        object.__setattr__(self, "cache_fields", _cache_fields(self.plugins()))

    def sized(self) -> "Configuration":
        """This configuration placing larger jobs first within a class, named ``<name>-sized``."""
        return dataclasses.replace(
            self, name=f"{self.name}-sized", size_order=True,
            help=f"{self.help}; within a class larger jobs are placed first, so the worst GPUs left go to the smallest",
        )

    def with_score(self, plugin: Score, weight: float = 1.0, **changes) -> "Configuration":
        """This configuration with one more weighted score (``changes``: e.g. a new ``name`` and ``help``)."""
        return dataclasses.replace(self, scores=(*self.scores, (plugin, float(weight))), **changes)

    def with_filter(self, plugin: Filter, **changes) -> "Configuration":
        """This configuration with one more filter."""
        return dataclasses.replace(self, filters=(*self.filters, plugin), **changes)

    def plugins(self) -> tuple:
        """Every plugin of the configuration, once each."""
        seen: dict[int, object] = {}
        for plugin in (*self.sources, *self.filters, *(p for p, _ in self.scores), *self.tie_breaks):
            seen.setdefault(id(plugin), plugin)
        return tuple(seen.values())

    def context(self, facts: ClusterFacts, job: JobState, n: int, free: np.ndarray, home: tuple[int, ...],
                rng: np.random.Generator | None = None, memory: dict | None = None,
                planned: tuple[int, ...] | None = None) -> Context:
        return Context(self, facts, job, n, free, home, rng, memory, planned)

    def decide(self, ctx: Context) -> tuple[np.ndarray, Decision]:
        """The winning GPU set for ``ctx``'s job and what to keep about it.

        Totals within 1e-12 of each other tie (inside a batch: equal when
        rounded to 12 decimals); a tie goes to a within-node candidate, then
        to the tie-break scores, then to the earlier candidate.
        """
        COUNTERS.decisions += 1
        COUNTERS.gpus_read += len(ctx.free)
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
                    if k == 1:
                        i = 0
                    elif ties:
                        i = int(np.lexsort((*reversed(ties), product.round(12)))[0])
                    else:
                        i = int(product.round(12).argmin())  # the first of the lowest
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
        return gpus, Decision(best_batch.source, gpus, best_values, best_ties, best_i, ctx.rejections, seen,
                              best_total, best_batch.across)

    def keeps(self, facts: ClusterFacts) -> bool:
        """Whether a job re-placed with the GPUs it won as its home wins them again, without deciding, when the
        free GPUs differ from those it was decided on only by GPUs taken that it did not win and GPUs freed whose
        binned score for its class is at least the winner's total (strictly above it, by more than the 1e-12
        of a tie, where an across-nodes winner could have tied a within-node candidate): every plugin keeps
        (``Plugin.keeps``), the factors multiply with unit weights, and one of them is the worst GPU's score.

        Why: a candidate holding a freed GPU totals at least that GPU's score (every other factor is at least
        1), so it cannot beat the winner; taking GPUs the winner did not hold only makes other candidates
        worse; and among equal totals the held GPUs come first. So ``Placement`` keeps such jobs where
        they are, and a re-placing round costs decisions only where something the job could prefer changed.
        """
        if not all(p.keeps(facts) for p in self.plugins()):
            return False
        return self.unit_weights and any(p.worst_gpu for p, _ in self.scores)


def _cache_fields(plugins) -> tuple[str, ...] | None:
    """The job fields a decision of these plugins depends on besides the free GPUs, the count and the held
    GPUs, sorted; ``None`` when a plugin did not declare them or draws random numbers (never reuse its decisions)."""
    fields: set[str] = set()
    for plugin in plugins:
        if plugin.reads is None or plugin.stateful:
            return None
        fields |= plugin.reads
    return tuple(sorted(fields))


def _weighted_product(values: list[np.ndarray], scores, k: int) -> np.ndarray:
    """``prod(value ** weight)`` over the scores, in order (a weight of 1 multiplies the value itself)."""
    if not values:
        return np.ones(k)
    total = None
    for v, (_, w) in zip(values, scores):
        term = v if w == 1.0 else np.power(v, w)
        total = term if total is None else total * term
    return np.asarray(total)


__all__ = [
    "COUNTERS", "Configuration", "Counters", "Decision", "PlacementError", "Unplaceable",
]
