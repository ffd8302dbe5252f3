"""PM-First (PAL paper, Algorithm 1): variability-sensitive classes pick the best GPUs first.

The scheduler's allocation is already the truncated queue (the jobs that run
this round, in its order); PM-First sorts it by class (A first, stable, so no
job jumps the cut) and gives each job the free GPUs with the lowest binned
PM-scores for its class. Non-sticky: every running job is re-placed each
round; a job keeps its GPUs when they are still among the best (ties go to
the GPUs it holds), so only real improvements migrate.
"""

from __future__ import annotations

import numpy as np

from pcs_ray.placement.base import Placement
from pcs_ray.placement.profiles import bin_cluster_scores
from pcs_ray.state import JobState, Snapshot


class VariabilityAware(Placement):
    """Binned per-class scores, each class's GPUs pre-sorted by them, and the class order."""

    sticky_default = False

    def __init__(self, cluster, *, binned: dict[str, np.ndarray] | None = None, bin_seed: int = 0, **kw) -> None:
        super().__init__(cluster, **kw)
        self.binned = binned if binned is not None else bin_cluster_scores(self.raw, seed=bin_seed)
        ones = np.ones(self.num_gpus)
        self._by_score = {c: np.argsort(v, kind="stable") for c, v in self.binned.items()}
        self._by_score[""] = np.arange(self.num_gpus)
        self._ones_binned = ones

    def decision_scores(self, job_class: str) -> np.ndarray:
        return self.binned.get(job_class, self._ones_binned)

    def sorted_gpus(self, job_class: str) -> np.ndarray:
        """All GPUs, best binned score first (ties by id)."""
        return self._by_score.get(job_class, self._by_score[""])

    def order(self, jobs: list[JobState], snap: Snapshot) -> list[JobState]:
        return sorted(jobs, key=lambda j: j.spec.job_class)

    def pm_first(self, job: JobState, n: int, free: np.ndarray, home: tuple[int, ...], limit: float = np.inf) -> np.ndarray:
        """The ``n`` free GPUs with the lowest binned scores (at most ``limit``), the job's own first on ties."""
        cls = job.spec.job_class
        ranked = self.sorted_gpus(cls)
        cand = ranked[free[ranked]]
        if len(cand) <= n or not home:
            return cand[:n]
        scores = self.decision_scores(cls)[cand]
        thr = scores[n - 1]
        below = cand[scores < thr]
        at = cand[scores == thr]
        mine = np.isin(at, home)
        at = np.concatenate([at[mine], at[~mine]])
        return np.concatenate([below, at[: n - len(below)]])


class PMFirstPlacement(VariabilityAware):
    """Greedy lowest binned scores, class A first."""

    name = "pm-first"

    def select(self, job: JobState, n: int, free: np.ndarray, home: tuple[int, ...]) -> np.ndarray:
        return self.pm_first(job, n, free, home)
