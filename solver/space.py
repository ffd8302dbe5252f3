"""The WFQ(T, W, zeta_min[, delta]) search space and its decoding (PCS §3.3).

A genome is four floats. Decoding turns it into a concrete ``WFQConfig``
using the job sizes of a workload sample:

* ``T`` in ``[T_MIN, C2max]``: queues are cut so each queue's squared
  coefficient of variation of sizes stays <= T (``thresholds_from_c2``).
  ``C2max`` is the largest running C^2 over the sorted sizes, so the top of
  the range always gives a single queue (FIFO order), as the paper's
  ``T = C2max`` does.
* ``W`` in ``[-3, 3]``: weights ``w_i = exp(-i W)``; negative W favours the
  queues of large jobs.
* ``zeta_min`` in ``[0, 1]``: cap every job at the largest k with
  ``speedup(k)/k >= zeta_min``.
* ``delta`` in ``[0.01, 0.9]``: the step by which leftover GPUs relax zeta
  inside a queue (the artifact's fourth parameter; fixed to 0 when the
  space is built with ``search_delta=False``, which relaxes straight to 0).

Decoding quantises W, zeta and delta (to 0.01) and canonicalises what has no
effect on the given workloads (a zeta below every job's efficiency is zeta 0,
which makes delta irrelevant), so that genomes that behave identically decode
to the same configuration and the evaluation cache simulates them once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby

from pcs_ray.job import JobSpec
from pcs_ray.policies.wfq import WFQConfig, thresholds_from_c2

T_MIN = 1e-3
W_RANGE = (-3.0, 3.0)
ZETA_RANGE = (0.0, 1.0)
DELTA_RANGE = (0.01, 0.9)
STEP = 0.01  # quantum of W, zeta_min and delta
MAX_WEIGHT_EXPONENT = 600.0  # weights span at most e^600, far inside double precision
GENE_NAMES = ("T", "W", "zeta_min", "delta")


class SpaceError(ValueError):
    """A workload the search space cannot be built from."""


def max_running_c2(sizes: Iterable[float]) -> float:
    """Largest C^2 of a prefix of the sorted sizes, equal sizes entering together (as ``thresholds_from_c2`` cuts)."""
    n = s1 = s2 = 0.0
    best = 0.0
    for x, group in groupby(sorted(float(v) for v in sizes)):
        c = float(len(list(group)))
        n, s1, s2 = n + c, s1 + c * x, s2 + c * x * x
        mean = s1 / n
        if mean:
            best = max(best, (s2 / n - mean * mean) / (mean * mean))
    return best


def efficiencies(jobs: Iterable[JobSpec]) -> frozenset[float]:
    """Every ``speedup(k)/k`` a job can run at: the values zeta_min is compared with."""
    out = set()
    for job in jobs:
        for k in range(job.min_gpus, job.max_gpus + 1):
            out.add(job.speedup[k] / k)
    return frozenset(out)


def _quantise(x: float) -> float:
    return round(round(x / STEP) * STEP, 6)


def config_key(config: WFQConfig) -> str:
    """A canonical string for a configuration: equal keys simulate identically."""
    d = config.to_dict()
    d["class_rates"] = [float(f"{w:.12g}") for w in d["class_rates"]]
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


def canonical_dict(config: WFQConfig) -> dict:
    """The configuration as written to files: the same numbers the solver simulated (see ``config_key``)."""
    return json.loads(config_key(config))


@dataclass(frozen=True)
class SearchSpace:
    """Bounds and decoder for one workload (``sizes`` decide the thresholds)."""

    sizes: tuple[float, ...]
    c2_max: float
    min_efficiency: float
    search_delta: bool = True

    @classmethod
    def from_samples(cls, samples: Sequence[Sequence[JobSpec]], search_delta: bool = True) -> "SearchSpace":
        """Sizes pooled from ``samples`` (the train samples): thresholds follow the workload, not one sample."""
        jobs = [j for sample in samples for j in sample]
        if len(jobs) < 2:
            raise SpaceError("the workload needs at least 2 jobs to search WFQ configurations")
        sizes = tuple(sorted(j.service for j in jobs))
        c2 = max_running_c2(sizes)
        if not c2 > 0:
            raise SpaceError("every job has the same size: there is only one queue and nothing to search")
        return cls(sizes, c2, min(efficiencies(jobs)), search_delta)

    @property
    def lower(self) -> tuple[float, ...]:
        return (T_MIN, W_RANGE[0], ZETA_RANGE[0], DELTA_RANGE[0])[: self.dimensions]

    @property
    def upper(self) -> tuple[float, ...]:
        return (max(self.c2_max, T_MIN * 2), W_RANGE[1], ZETA_RANGE[1], DELTA_RANGE[1])[: self.dimensions]

    @property
    def dimensions(self) -> int:
        return 4 if self.search_delta else 3

    def clip(self, genes: Sequence[float]) -> list[float]:
        return [min(max(float(g), lo), hi) for g, lo, hi in zip(genes, self.lower, self.upper)]

    def decode(self, genes: Sequence[float]) -> WFQConfig:
        """The concrete configuration a genome stands for on this workload."""
        if len(genes) != self.dimensions:
            raise SpaceError(f"expected {self.dimensions} genes {GENE_NAMES[: self.dimensions]}, got {len(genes)}")
        T, W, zeta, *rest = self.clip(genes)
        delta = rest[0] if rest else 0.0
        thresholds = thresholds_from_c2(self.sizes, T)
        W, zeta, delta = _quantise(W), _quantise(zeta), (_quantise(delta) if rest else 0.0)
        if zeta <= self.min_efficiency + 1e-12:
            zeta = delta = 0.0  # every job runs at every allocation: same caps as no cap at all
        if len(thresholds) == 1:
            W = 0.0  # one queue: its weight is irrelevant
        else:  # keep exp(-i W) within floating point for every queue
            bound = MAX_WEIGHT_EXPONENT / (len(thresholds) - 1)
            W = min(max(W, -bound), bound)
        return WFQConfig.from_params(thresholds, W, zeta, delta)

    def describe(self) -> dict:
        return {
            "genes": list(GENE_NAMES[: self.dimensions]),
            "lower": list(self.lower),
            "upper": list(self.upper),
            "c2_max": self.c2_max,
            "jobs": len(self.sizes),
        }


def describe_genes(genes: Sequence[float], space: SearchSpace) -> dict:
    """The genome as named, clipped parameters (for tables and JSON)."""
    return dict(zip(GENE_NAMES, space.clip(genes)))


def queues(config: WFQConfig) -> int:
    return len(config.thresholds)


def is_fifo(config: WFQConfig) -> bool:
    return len(config.thresholds) == 1 and math.isinf(config.thresholds[0])
