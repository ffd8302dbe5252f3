"""PM-First (PAL paper, Algorithm 1): variability-sensitive classes pick the best GPUs first.

The scheduler's allocation is already the truncated queue (the jobs that run
this round, in its order); PM-First sorts it by class (A first, stable, so no
job jumps the cut) and gives each job the free GPUs with the lowest binned
PM-scores for its class. Non-sticky: every running job is re-placed each
round; a job keeps its GPUs when they are still among the best (ties go to
the GPUs it holds), so only real improvements migrate.
"""

from __future__ import annotations

from pcs_ray.placement.candidates import ClusterBest
from pcs_ray.placement.framework import Configuration
from pcs_ray.placement.scores import Variability

PM_FIRST = Configuration(
    name="pm-first",
    help="variability-sensitive classes (A first) get the GPUs with the best binned scores",
    sources=(ClusterBest(),),
    scores=((Variability(), 1.0),),
    sticky=False,
    class_order=True,
)

__all__ = ["PM_FIRST"]
