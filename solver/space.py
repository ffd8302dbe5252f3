"""The solver's search spaces and their decoding into WFQ configurations (PCS §3.3).

Two spaces, chosen by ``kind``:

``paper`` (the paper's): a genome is (T, W, zeta_min[, delta]). Decoding
turns it into a concrete ``WFQConfig`` using the job sizes of a workload
sample:

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

``cuts``: a genome is (queues, cut_1 .. cut_{Q-1}, W, zeta_min[, delta])
with Q = ``max_queues``. The paper's C^2 walk reaches only some partitions
of the sizes (a first queue can only end where the running C^2 sets a
record), and the artifact's own themis1 configurations fall between them;
here the first ``queues - 1`` cut genes, log10 of seconds over the range of
the sizes, are the thresholds themselves, so every threshold vector of up to
Q queues is reachable. A cut is snapped down to the largest train size at
or below it (the same jobs share a queue, so the same configuration on the
train samples), cuts that leave a queue empty are dropped.

Decoding quantises W, zeta and delta (to 0.01) and canonicalises what has no
effect on the given workloads (a zeta below every job's efficiency is zeta 0,
which makes delta irrelevant), so that genomes that behave identically decode
to the same configuration and the evaluation cache simulates them once.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby

from pcs_ray.jobs.spec import JobSpec
from pcs_ray.policies.wfq import WFQConfig, thresholds_from_c2

T_MIN = 1e-3
W_RANGE = (-3.0, 3.0)
ZETA_RANGE = (0.0, 1.0)
DELTA_RANGE = (0.01, 0.9)
STEP = 0.01  # quantum of W, zeta_min and delta
MAX_WEIGHT_EXPONENT = 600.0  # weights span at most e^600, far inside double precision
GENE_NAMES = ("T", "W", "zeta_min", "delta")
SPACES = ("paper", "cuts")
DEFAULT_MAX_QUEUES = 6
MAX_QUEUES_LIMIT = 64


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
    kind: str = "paper"
    max_queues: int = DEFAULT_MAX_QUEUES  # of the ``cuts`` space

    def __post_init__(self) -> None:
        if self.kind not in SPACES:
            raise SpaceError(f"unknown search space {self.kind!r}: choose {' or '.join(SPACES)}")
        if not 2 <= self.max_queues <= MAX_QUEUES_LIMIT:
            raise SpaceError(f"the number of queues must be between 2 and {MAX_QUEUES_LIMIT}, got {self.max_queues}")

    @classmethod
    def from_samples(cls, samples: Sequence[Sequence[JobSpec]], search_delta: bool = True, kind: str = "paper",
                     max_queues: int = DEFAULT_MAX_QUEUES) -> "SearchSpace":
        """Sizes pooled from ``samples`` (the train samples): thresholds follow the workload, not one sample."""
        jobs = [j for sample in samples for j in sample]
        if len(jobs) < 2:
            raise SpaceError("the workload needs at least 2 jobs to search WFQ configurations")
        sizes = tuple(sorted(j.service for j in jobs))
        c2 = max_running_c2(sizes)
        if not c2 > 0:
            raise SpaceError("every job has the same size: there is only one queue and nothing to search")
        return cls(sizes, c2, min(efficiencies(jobs)), search_delta, kind, max_queues)

    @property
    def gene_names(self) -> tuple[str, ...]:
        tail = GENE_NAMES[1: 4 if self.search_delta else 3]
        if self.kind == "paper":
            return ("T", *tail)
        return ("queues", *(f"log10_cut{i}" for i in range(1, self.max_queues)), *tail)

    @property
    def _cut_range(self) -> tuple[float, float]:
        return math.log10(self.sizes[0]), math.log10(self.sizes[-1])

    @property
    def lower(self) -> tuple[float, ...]:
        tail = (W_RANGE[0], ZETA_RANGE[0], DELTA_RANGE[0])[: self.dimensions - self._head]
        if self.kind == "paper":
            return (T_MIN, *tail)
        return (1.0, *[self._cut_range[0]] * (self.max_queues - 1), *tail)

    @property
    def upper(self) -> tuple[float, ...]:
        tail = (W_RANGE[1], ZETA_RANGE[1], DELTA_RANGE[1])[: self.dimensions - self._head]
        if self.kind == "paper":
            return (max(self.c2_max, T_MIN * 2), *tail)
        # queues rounds to the nearest integer; the top is reachable by a whole unit of the gene
        return (self.max_queues + 0.5, *[self._cut_range[1]] * (self.max_queues - 1), *tail)

    @property
    def _head(self) -> int:
        """Genes before W: T, or queues and the cuts."""
        return 1 if self.kind == "paper" else self.max_queues

    @property
    def dimensions(self) -> int:
        return self._head + (3 if self.search_delta else 2)

    def clip(self, genes: Sequence[float]) -> list[float]:
        return [min(max(float(g), lo), hi) for g, lo, hi in zip(genes, self.lower, self.upper)]

    def decode(self, genes: Sequence[float]) -> WFQConfig:
        """The concrete configuration a genome stands for on this workload."""
        if len(genes) != self.dimensions:
            raise SpaceError(f"expected {self.dimensions} genes {self.gene_names}, got {len(genes)}")
        genes = self.clip(genes)
        head, (W, zeta, *rest) = genes[: self._head], genes[self._head:]
        delta = rest[0] if rest else 0.0
        thresholds = thresholds_from_c2(self.sizes, head[0]) if self.kind == "paper" else self._cut_thresholds(head)
        W, zeta, delta = _quantise(W), _quantise(zeta), (_quantise(delta) if rest else 0.0)
        if zeta <= self.min_efficiency + 1e-12:
            zeta = delta = 0.0  # every job runs at every allocation: same caps as no cap at all
        if len(thresholds) == 1:
            W = 0.0  # one queue: its weight is irrelevant
        else:  # keep exp(-i W) within floating point for every queue
            bound = MAX_WEIGHT_EXPONENT / (len(thresholds) - 1)
            W = min(max(W, -bound), bound)
        return WFQConfig.from_params(thresholds, W, zeta, delta)

    def _cut_thresholds(self, head: Sequence[float]) -> tuple[float, ...]:
        """The ``cuts`` space's thresholds: the first queues-1 cuts, sorted, snapped down to train sizes."""
        count = min(max(int(round(head[0])), 1), self.max_queues)
        cuts = set()
        for u in head[1:count]:
            i = bisect.bisect_right(self.sizes, 10.0 ** u * (1 + 1e-12)) - 1  # tolerate log10 round trips
            if i >= 0 and self.sizes[i] < self.sizes[-1]:  # a cut at the largest size leaves the last queue empty
                cuts.add(self.sizes[i])
        return (*sorted(cuts), math.inf)

    def neighbour(self, genes: Sequence[float], rng) -> list[float]:
        """A small step from ``genes`` that changes one decoded parameter: a local move along the front.

        SBX and polynomial mutation scale their steps to a gene's whole range
        (a cut moves ~40 % of its size at eta 20), so two neighbouring
        configurations of the front, a few job sizes or one weight quantum
        apart, are rarely both tried. Here one active gene moves by 2^m of
        its own quantum (m in 0..5): a cut to the 2^m-th train size above or
        below its own, W, zeta or delta by 2^m x 0.01, T by a factor
        (1 + 0.01 x 2^m), the queue count by one. ``rng`` is a
        ``random.Random``-like source (the search's seeded stream).
        """
        genes = self.clip(genes)
        step = 2 ** rng.randrange(6)
        sign = rng.choice((-1, 1))
        active = list(range(self._head, self.dimensions))  # W, zeta[, delta]
        if self.kind == "paper":
            active.append(0)
        else:
            count = min(max(int(round(genes[0])), 1), self.max_queues)
            # one queue: W, zeta and delta have no effect there (decode drops W), only a second queue does
            active = [0, *range(1, count)] + (active if count > 1 else [])
        i = rng.choice(active)
        out = list(genes)
        if self.kind == "paper" and i == 0:
            out[0] = genes[0] * (1 + STEP * step) ** sign
        elif self.kind == "cuts" and i == 0:
            out[0] = float(min(max(int(round(genes[0])) + sign, 1), self.max_queues))
        elif self.kind == "cuts" and i < self._head:
            k = bisect.bisect_right(self.sizes, 10.0 ** genes[i] * (1 + 1e-12)) - 1
            k = min(max(k + sign * step, 0), len(self.sizes) - 1)
            out[i] = math.log10(self.sizes[k])
        else:
            out[i] = genes[i] + sign * STEP * step
        return self.clip(out)

    def encode_thresholds(self, thresholds: Sequence[float], W: float = 0.0, zeta: float = 0.0,
                          delta: float = DELTA_RANGE[0]) -> list[float]:
        """A ``cuts`` genome for the given thresholds (the finite ones, at most ``max_queues - 1``)."""
        if self.kind != "cuts":
            raise SpaceError("only the cuts space encodes thresholds directly")
        finite = sorted(t for t in thresholds if math.isfinite(t))[: self.max_queues - 1]
        lo, hi = self._cut_range
        cuts = [min(max(math.log10(t), lo), hi) for t in finite]
        cuts += [hi] * (self.max_queues - 1 - len(cuts))
        return self.clip([len(finite) + 1, *cuts, W, zeta, delta][: self.dimensions])

    def extremes(self) -> list[list[float]]:
        """PCS §3.1's extremes: FIFO (one queue), SJF-like (many queues, steep weights), fair-like (equal weights)."""
        lo, hi = self.lower, self.upper
        tail = [0.0, DELTA_RANGE[0]][: self.dimensions - self._head - 1]
        if self.kind == "paper":
            return [[hi[0], 0.0, *tail], [lo[0], hi[1], *tail], [lo[0], 0.0, *tail]]
        a, b = self._cut_range
        many = [a + (b - a) * i / self.max_queues for i in range(1, self.max_queues)]
        fifo = self.encode_thresholds((), 0.0)
        return [fifo, [float(self.max_queues), *many, W_RANGE[1], *tail], [float(self.max_queues), *many, 0.0, *tail]]

    def seeds(self, count: int) -> list[list[float]]:
        """Up to ``count`` starting genomes: the extremes, then (``cuts``) one cut at log-even places and the
        paper's C^2 partitions that fit.

        The cuts space is larger; starting it where the paper's space starts
        keeps what the paper's decoding finds within reach of the first
        generations, and the single cuts spread two-queue configurations over
        the range of sizes, which T reaches only at its records.
        """
        out = self.extremes()
        if self.kind == "cuts":
            lo, hi = self._cut_range
            singles = max(count // 4, 1)
            for k in range(singles):
                cut = 10.0 ** (lo + (hi - lo) * (k + 1) / (singles + 1))
                out.append(self.encode_thresholds((cut,), (0.5, 1.0, 2.0)[k % 3]))
            seen = set()
            for k in range(4 * count):
                T = T_MIN * (self.c2_max / T_MIN) ** (k / max(4 * count - 1, 1))
                thresholds = thresholds_from_c2(self.sizes, T)
                if 1 < len(thresholds) <= self.max_queues and thresholds not in seen:
                    seen.add(thresholds)
                    out.append(self.encode_thresholds(thresholds, 1.0))
        return out[: max(count, 3)]

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            **({"max_queues": self.max_queues} if self.kind == "cuts" else {}),
            "genes": list(self.gene_names),
            "lower": list(self.lower),
            "upper": list(self.upper),
            "c2_max": self.c2_max,
            "jobs": len(self.sizes),
        }


def describe_genes(genes: Sequence[float], space: SearchSpace) -> dict:
    """The genome as named, clipped parameters (for tables and JSON)."""
    return dict(zip(space.gene_names, space.clip(genes)))


def queues(config: WFQConfig) -> int:
    return len(config.thresholds)


def is_fifo(config: WFQConfig) -> bool:
    return len(config.thresholds) == 1 and math.isinf(config.thresholds[0])
