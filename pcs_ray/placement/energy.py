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
  the job's class, anywhere (the VAHRM paper's rule, where GPUs of one model
  run at one speed; sticky: HPC jobs stay);
* ``lowest-energy``: the same by predicted power x binned score, i.e. the most
  power-efficient GPUs (energy per unit of work) where speed varies too, as
  it does on Longhorn (VAHRM's and CGVA's placement here);
* ``vahrm``: ``lowest-energy``, except that a workload's first run (no job
  of its model placed here before) gets random free GPUs: VAHRM has no
  profile of it yet and draws nodes at random (paper §III-C, Step 5);
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
    stateful = True  # with first_run_random: the workloads already run (memory) and a random draw

    def __init__(self, *, per_work: bool = False, first_run_random: bool = False) -> None:
        self.per_work, self.first_run_random = per_work, first_run_random

    def prepare(self, facts) -> None:
        if self.per_work:
            facts.need("binned")

    def candidates(self, ctx: Context) -> Iterator[Candidates]:
        ids = np.flatnonzero(ctx.free)
        if self.first_run_random:
            seen = ctx.memory.setdefault("workloads_run", set())
            workload = ctx.spec.model or ctx.spec.job_class
            if workload not in seen:
                seen.add(workload)
                gpus = np.sort(ctx.rng.choice(ids, size=ctx.n, replace=False))
                yield Candidates("first-run", _ACROSS, gpus=gpus[None, :], across=True)
                return
        key = ctx.facts.power_ratio(ctx.spec.job_class)
        if self.per_work:
            key = key * ctx.class_scores
        yield Candidates(self.name, _ACROSS, gpus=_lowest(ctx, key, ids)[None, :], across=True)


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
    help="the free GPUs with the lowest predicted power for the app's class, anywhere (the VAHRM paper's rule); sticky",
    sources=(LowestPower(),),
    sticky=True,
)

LOWEST_ENERGY = Configuration(
    name="lowest-energy",
    help="the free GPUs with the lowest predicted power x binned score (energy per unit of work), anywhere (vahrm, cgva-*); sticky",
    sources=(LowestPower(per_work=True),),
    sticky=True,
)

VAHRM = Configuration(
    name="vahrm",
    help="lowest-energy, but a workload's first run gets random free GPUs (VAHRM has no profile of it yet); sticky",
    sources=(LowestPower(per_work=True, first_run_random=True),),
    sticky=True,
)

ENERGY = Configuration(
    name="energy",
    help="the lowest variability x locality x topology x predicted power (energy per unit of work) per app",
    sources=(EnergyCandidates(), BestNodesFirst(subsets=True, single_gpu=True, budget=8, stop_without_links=True),
             ClusterBest()),
    scores=((Variability(), 1.0), (Locality(), 1.0), (Topology(), 1.0), (Energy(), 1.0)),
    tie_breaks=(KeepGPUs(), PreservedBandwidth()),
    sticky=False,
    class_order=True,
    ranked=True,
    about={"base": COMBINED.name},
)

__all__ = ["ENERGY", "LOWEST_ENERGY", "LOWEST_POWER", "VAHRM", "Energy", "EnergyCandidates", "LowestPower"]
