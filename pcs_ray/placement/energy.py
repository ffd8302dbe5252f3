"""Energy-aware placement: the GPUs predicted to draw least for the job (VAHRM), and an energy score
that joins variability, locality and topology in the combined placement.

A GPU's predicted power for a job class comes from the cluster spec
(``GPUSpec.power``, W; ``simulate --power`` fills it from a power profile's
predictions). A job's energy on a GPU set is its power times its run time;
the run time is what the combined product already scores (slowest GPU x
locality x topology), so the :class:`Energy` factor is the set's mean
predicted power over the cluster's median for the class, and
``variability x locality x topology x energy`` is the job's energy per unit
of work relative to a median GPU. Without power data the factor is 1.

Configurations:

* ``lowest-power``: the ``n`` free GPUs with the lowest predicted power for
  the job's class, anywhere (the VAHRM paper's rule, §III-C Step 5; sticky:
  HPC jobs stay);
* ``lowest-energy``: the same by predicted power x binned score, i.e. the most
  power-efficient GPUs (energy per unit of work) where speed varies too, as
  it does on Longhorn (CGVA's placement here);
* ``vahrm``: the GPUs the ``vahrm`` policy chose in its Step 5 (lowest
  predicted power; random for a workload's first run, which VAHRM has no
  profile of yet), handed over with its allocation; ``lowest-power`` where
  the policy chose none;
* ``cva``: lowest predicted power for the jobs that stand for the paper's CPU
  jobs (``CPU_STANDINS``), random free GPUs for the others (CVA, Table V);
* ``energy``: the combined placement with the energy score, over candidates
  that also include the lowest-power and lowest power x score GPU sets of the
  cluster and of each node.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from pcs_ray.placement.candidates import BestNodesFirst, ClusterBest
from pcs_ray.placement.combined import COMBINED
from pcs_ray.placement.framework import Configuration
from pcs_ray.placement.plugin import Candidates, Context, Score, Source, member
from pcs_ray.placement.scores import KeepGPUs, Locality, PreservedBandwidth, Topology, Variability

_ACROSS = np.array([-1])
_ACROSS.setflags(write=False)


def _lowest(ctx: Context, key: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The ``n`` of ``ids`` with the lowest ``key``, the job's own GPUs first on ties, then by id."""
    if ctx.home:
        mine = member(ids, ctx.home)
        order = np.lexsort((ids, ~mine, key[ids]))
    else:
        order = np.lexsort((ids, key[ids]))
    return ids[order[: ctx.n]]


class LowestPower(Source):
    """The ``n`` free GPUs with the lowest predicted power for the job's class (one across-nodes candidate);
    ``per_work``: the lowest predicted power x binned score, i.e. energy per unit of work."""

    name = "lowest-power"

    def __init__(self, *, per_work: bool = False) -> None:
        self.per_work = per_work

    def prepare(self, facts) -> None:
        if self.per_work:
            facts.need("binned")

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        key = ctx.facts.power_ratio(ctx.spec.job_class)
        if self.per_work:
            key = key * ctx.class_scores
        yield Candidates(self.name, _ACROSS, gpus=_lowest(ctx, key, np.flatnonzero(ctx.free))[None, :], across=True)


class PolicyChoice(Source):
    """The GPUs the policy chose (VAHRM's Step 5: lowest predicted power, random for a workload's first
    run, ``VAHRMPolicy``), so that the GPUs it costed against the budget are the GPUs the job gets and
    the policy's memory alone says what a first run is; without a choice, the lowest-power GPUs."""

    name = "policy"
    stateful = True  # what the policy chose is not in the decision's cache key

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        chosen = ctx.planned
        if chosen is not None and len(chosen) == ctx.n and ctx.free[list(chosen)].all():
            yield Candidates(self.name, _ACROSS, gpus=np.asarray(chosen, dtype=np.int64)[None, :], across=True)
            return
        yield from _BY_POWER.candidates(ctx)


#: The job classes that stand for the VAHRM paper's CPU jobs in its GPU-only mixes (``pcs_ray.workloads.energy``):
#: class A, ResNet-50, the variability-sensitive class.
CPU_STANDINS = frozenset({"A"})


class CPUVariationAware(Source):
    """CVA (paper Table V, after its ref. [19]): power-efficient GPUs (lowest predicted power) for the jobs
    that stand for CPU jobs (``CPU_STANDINS``), random free GPUs for the others."""

    name = "cva"
    stateful = True  # a random draw

    def __init__(self, efficient_classes: frozenset[str] = CPU_STANDINS) -> None:
        self.efficient_classes = efficient_classes

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        if ctx.spec.job_class in self.efficient_classes:
            yield from _BY_POWER.candidates(ctx)
            return
        gpus = np.sort(ctx.rng.choice(np.flatnonzero(ctx.free), size=ctx.n, replace=False))
        yield Candidates("random", _ACROSS, gpus=gpus[None, :], across=True)


_BY_POWER = LowestPower()


class EnergyCandidates(Source):
    """Low-energy GPU sets: the lowest power, and the lowest power x binned score, over the whole
    cluster and on every node that holds the job by itself."""

    name = "low-energy"

    def prepare(self, facts) -> None:
        facts.need("binned")

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        facts = ctx.facts
        power = facts.power_ratio(ctx.spec.job_class)
        keys = (power, power * ctx.class_scores)
        ids = np.flatnonzero(ctx.free)
        yield Candidates(self.name, np.full(len(keys), -1), gpus=np.stack([_lowest(ctx, k, ids) for k in keys]),
                         across=True)
        if ctx.n == 1:
            return  # a 1-GPU job's cluster-wide choice is already the best within any node
        for node in np.flatnonzero(ctx.node_ok):
            start = facts.node_start[node]
            on = start + np.flatnonzero(ctx.free[start : start + facts.node_size[node]])
            rows = np.stack([np.sort(_lowest(ctx, k, on)) for k in keys])
            yield Candidates(self.name, np.full(len(rows), node), gpus=rows)


class Energy(Score):
    """The candidate's mean predicted power over the cluster's median for the class (1 without power data)."""

    name = "energy"

    def score(self, ctx: Context, batch: Candidates) -> np.ndarray:
        return ctx.facts.power_ratio(ctx.spec.job_class)[batch.gpus].mean(axis=1)

    def floor(self, ctx: Context) -> np.ndarray:
        ratio = ctx.facts.power_ratio(ctx.spec.job_class)
        best = ctx.facts.node_scores(ratio, ctx.free).min(axis=1)
        return np.where(np.isfinite(best), best, 0.0)  # nodes without free GPUs are filtered anyway


LOWEST_POWER = Configuration(
    name="lowest-power",
    help="the free GPUs with the lowest predicted power for the job's class, anywhere (the VAHRM paper's rule); sticky",
    sources=(LowestPower(),),
    sticky=True,
)

LOWEST_ENERGY = Configuration(
    name="lowest-energy",
    help="the free GPUs with the lowest predicted power x binned score (energy per unit of work), anywhere (cgva-*); sticky",
    sources=(LowestPower(per_work=True),),
    sticky=True,
)

VAHRM = Configuration(
    name="vahrm",
    help="the GPUs the vahrm policy chose: lowest predicted power, random for a workload's first run (else lowest-power); sticky",
    sources=(PolicyChoice(),),
    sticky=True,
)

CVA = Configuration(
    name="cva",
    help="lowest predicted power for class A (the VAHRM mixes' stand-in for CPU jobs), random free GPUs for the rest (cva-*); sticky",
    sources=(CPUVariationAware(),),
    sticky=True,
)

ENERGY = Configuration(
    name="energy",
    help="the lowest variability x locality x topology x predicted power (energy per unit of work) per job",
    sources=(EnergyCandidates(), BestNodesFirst(subsets=True, single_gpu=True, budget=8, stop_without_links=True),
             ClusterBest()),
    scores=((Variability(), 1.0), (Locality(), 1.0), (Topology(), 1.0), (Energy(), 1.0)),
    tie_breaks=(KeepGPUs(), PreservedBandwidth()),
    sticky=False,
    class_order=True,
    ranked=True,
    about={"base": COMBINED.name},
)

__all__ = ["CPU_STANDINS", "CVA", "ENERGY", "LOWEST_ENERGY", "LOWEST_POWER", "VAHRM", "CPUVariationAware", "Energy",
           "EnergyCandidates", "LowestPower", "PolicyChoice"]
