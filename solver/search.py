"""One preference-solver run: samples, search space, SPEA2, the front and its references.

Ties the pieces together: train samples for the search and separate test
samples for the report (``workload``), genomes decoded into WFQ
configurations (``space``), evaluations through the cache and a backend
(``evaluate``), SPEA2 (``spea2``), a checkpoint per generation
(``checkpoint``). The reported front is the set of non-dominated
configurations among *all* those evaluated on the train samples, each then
evaluated on the test samples.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pcs_ray.policies import WFQConfig
from pcs_ray.solver.cache import EvaluationCache
from pcs_ray.solver.checkpoint import Checkpoint
from pcs_ray.solver.evaluate import Evaluator
from pcs_ray.solver.front import FrontPoint, Reference, normalised_hypervolume, pareto_indices
from pcs_ray.solver.objectives import Objective
from pcs_ray.solver.space import DEFAULT_MAX_QUEUES, MAX_QUEUES_LIMIT, SPACES, SearchSpace, config_key, describe_genes
from pcs_ray.solver.spea2 import SPEA2, SearchError, SearchState, truncate
from pcs_ray.solver.workload import WorkloadSource

BASELINES = ("fifo", "srsf", "themis", "afs")


@dataclass(frozen=True)
class Problem:
    """Everything that determines a search's result (and its checkpoint's identity)."""

    source: WorkloadSource
    gpus: int
    objectives: tuple[Objective, ...]
    samples: int = 3
    test_samples: int = 3
    population: int = 40
    seed: int = 0
    search_delta: bool = True
    space: str = "paper"
    max_queues: int = DEFAULT_MAX_QUEUES
    local_rate: float = 0.0  # share of offspring made by a local move (``SearchSpace.neighbour``)

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise SearchError(f"the cluster needs at least 1 GPU, got {self.gpus}")
        if self.samples < 1 or self.test_samples < 1:
            raise SearchError("need at least 1 train sample and 1 test sample")
        if self.population < 2:
            raise SearchError(f"the population needs at least 2 members, got {self.population}")
        if not self.objectives:
            raise SearchError("give at least one objective")
        if self.space not in SPACES:
            raise SearchError(f"unknown search space {self.space!r}: choose {' or '.join(SPACES)}")
        if not 2 <= self.max_queues <= MAX_QUEUES_LIMIT:
            raise SearchError(f"max queues must be between 2 and {MAX_QUEUES_LIMIT}, got {self.max_queues}")
        if not 0.0 <= self.local_rate <= 1.0:
            raise SearchError(f"the local-move rate must be between 0 and 1, got {self.local_rate}")

    def fingerprint(self) -> dict:
        raw = {
            "workload": self.source.describe(), "gpus": self.gpus, "objectives": [o.label for o in self.objectives],
            "samples": self.samples, "test_samples": self.test_samples, "population": self.population,
            "seed": self.seed, "search_delta": self.search_delta,
            "jobs_digest": _digest(self.source.jobs) if self.source.jobs else None,
        }
        if self.space != "paper":  # checkpoints of the paper's space written before there was a choice stay valid
            raw |= {"space": self.space, "max_queues": self.max_queues}
        if self.local_rate:  # likewise for searches without local moves
            raw["local_rate"] = self.local_rate
        return json.loads(json.dumps(raw))


def _digest(jobs) -> str:
    import hashlib

    h = hashlib.sha256()
    for j in jobs:
        h.update(f"{j.job_id},{j.submit_time!r},{j.service!r},{j.min_gpus},{j.max_gpus},{j.speedup!r};".encode())
    return h.hexdigest()[:16]


@dataclass
class GenerationReport:
    generation: int
    evaluations: int  # candidates evaluated so far (genomes, cached or not)
    simulations: int  # simulations this process ran so far
    front_size: int
    hypervolume: float  # of the archive's train front, as a fraction of the box [0, hv_ref]
    hv_ref: tuple[float, ...]  # 1.1 x the initial population's worst train values
    wall_s: float


class Search:
    """A solver run over ``problem`` with ``backend`` (serial when None), optionally checkpointed."""

    def __init__(self, problem: Problem, backend=None, checkpoint: str | Path | None = None, fresh: bool = False) -> None:
        self.problem = problem
        p = problem
        self.train = p.source.samples(p.gpus, p.seed, "train", p.samples)
        self.test = p.source.samples(p.gpus, p.seed, "test", p.test_samples)
        for split, samples in (("train", self.train), ("test", self.test)):
            for sample in samples:
                too_big = [j for j in sample if j.min_gpus > p.gpus]
                if too_big:
                    raise SearchError(f"job {too_big[0].job_id} needs {too_big[0].min_gpus} GPUs; the cluster has {p.gpus}")
        self.space = SearchSpace.from_samples(self.train, p.search_delta, p.space, p.max_queues)
        self.checkpoint = Checkpoint(checkpoint, p.fingerprint(), fresh) if checkpoint is not None else None
        cache = self.checkpoint.cache() if self.checkpoint is not None else EvaluationCache()
        self.evaluator = Evaluator({"train": self.train, "test": self.test}, p.gpus, p.objectives, backend, cache)
        self.genes_of: dict[str, list[float]] = {}  # first genome seen per decoded configuration
        self.algorithm = SPEA2(self.space.lower, self.space.upper, len(p.objectives), p.population, seed=p.seed,
                               seeds=self.space.seeds(p.population // 2), local_move=self._local_move,
                               local_rate=p.local_rate)

    def close(self) -> None:
        self.evaluator.cache.close()

    # -- evaluation -----------------------------------------------------------------

    def evaluate_genomes(self, genomes: list[list[float]], progress=None) -> list[tuple[float, ...]]:
        specs = []
        for g in genomes:
            spec = config_key(self.space.decode(g))
            self.genes_of.setdefault(spec, self.space.clip(g))
            specs.append(spec)
        return self.evaluator.evaluate(specs, "train", progress)

    def _local_move(self, genes: list[float], rng, tries: int = 8) -> list[float]:
        """A neighbour of ``genes`` that decodes to a configuration the search has not met, if one turns up
        in ``tries`` draws (a cached configuration would cost a slot of the generation and teach nothing)."""
        for _ in range(tries):
            out = self.space.neighbour(genes, rng)
            if config_key(self.space.decode(out)) not in self.genes_of:
                break
        return out

    # -- the search -------------------------------------------------------------------

    def run(self, generations: int, on_generation: Callable[[GenerationReport], None] | None = None,
            time_limit: float | None = None, progress=None) -> SearchState:
        """SPEA2 for ``generations`` generations (resuming from the checkpoint).

        Stops early after the generation that passes ``time_limit`` seconds, or
        when ``on_generation`` returns True.
        """
        if generations < 1:
            raise SearchError(f"generations must be >= 1, got {generations}")
        started = time.perf_counter()
        state = self.checkpoint.load() if self.checkpoint is not None else None
        if state is not None:
            # The saved first-seen genomes come first: a configuration met in an earlier
            # generation keeps that genome, exactly as in a run that was never interrupted.
            for spec, genes in state.extra.get("genes_of", {}).items():
                self.genes_of.setdefault(spec, genes)
            for m in state.population + state.archive:
                self.genes_of.setdefault(config_key(self.space.decode(m.genes)), self.space.clip(m.genes))

        def finished(s: SearchState) -> bool:
            if "hv_ref" not in s.extra:
                s.extra["hv_ref"] = list(_initial_reference([m.values for m in s.population]))
            s.extra["genes_of"] = self.genes_of
            if self.checkpoint is not None:
                self.checkpoint.save(s)
            stop = False
            if on_generation is not None:
                train = [m.values for m in s.archive]
                front = pareto_indices(train)
                ref = tuple(s.extra["hv_ref"])
                stop = bool(on_generation(GenerationReport(
                    s.generation, s.evaluations, self.evaluator.simulations, len(front),
                    normalised_hypervolume([train[i] for i in front], ref), ref, time.perf_counter() - started,
                )))
            return stop or (time_limit is not None and time.perf_counter() - started >= time_limit)

        evaluate = (lambda gs: self.evaluate_genomes(gs, progress)) if progress else self.evaluate_genomes
        if state is not None and state.generation >= generations:
            return state
        return self.algorithm.run(evaluate, generations, state, finished)

    # -- results -----------------------------------------------------------------------

    def train_front(self) -> list[str]:
        """Specs of the non-dominated configurations among all the search evaluated on every train sample.

        Only configurations the search itself produced count: reference
        configurations evaluated through the same cache never enter the front.
        """
        count = len(self.train)
        specs = sorted(
            s for s in self.genes_of
            if all(self.evaluator.cache.get((s, "train", i)) is not None for i in range(count))
        )
        values = [self.evaluator.mean(s, "train") for s in specs]
        return [specs[i] for i in pareto_indices(values)]

    def front(self, max_points: int | None = None, progress=None) -> list[FrontPoint]:
        """The train front (thinned to ``max_points`` by SPEA2 truncation), evaluated on the test samples,
        sorted by the first objective's train value."""
        specs = self.train_front()
        if max_points is not None and len(specs) > max_points:
            keep = truncate([self.evaluator.mean(s, "train") for s in specs], max_points)
            specs = [specs[i] for i in keep]
        self.evaluator.evaluate(specs, "test", progress)
        points = []
        for spec in specs:
            config = WFQConfig.from_dict(json.loads(spec))
            genes = self.genes_of.get(spec)
            points.append(FrontPoint(
                config=config,
                genes=describe_genes(genes, self.space) if genes else {},
                train=self.evaluator.mean(spec, "train"), test=self.evaluator.mean(spec, "test"),
                train_std=self._std(spec, "train"), test_std=self._std(spec, "test"),
            ))
        points.sort(key=lambda p: (p.train, p.spec))
        return points

    def _std(self, spec: str, split: str) -> tuple[float, ...]:
        rows = np.asarray(self.evaluator.per_sample(spec, split), dtype=float)
        return tuple(float(x) for x in rows.std(axis=0))

    def references(self, configs: Sequence[tuple[str, WFQConfig]] = (), baselines: Sequence[str] = BASELINES,
                   progress=None) -> list[Reference]:
        """Baseline policies and given WFQ configurations, evaluated on the same train and test samples."""
        labelled = [(name, name) for name in baselines] + [(label, config_key(c)) for label, c in configs]
        specs = [spec for _, spec in labelled]
        self.evaluator.evaluate(specs, "test", progress)
        self.evaluator.evaluate(specs, "train", progress)
        return [
            Reference(label, spec, test=self.evaluator.mean(spec, "test"), train=self.evaluator.mean(spec, "train"))
            for label, spec in labelled
        ]

    def describe(self) -> dict:
        p = self.problem
        return {
            "workload": p.source.describe(), "gpus": p.gpus, "samples": p.samples, "test_samples": p.test_samples,
            "population": p.population, "seed": p.seed, "space": self.space.describe(),
            "genes": list(self.space.gene_names),
        }


def _initial_reference(values: Sequence[Sequence[float]]) -> tuple[float, ...]:
    finite = [v for v in values if all(math.isfinite(x) for x in v)]
    if not finite:
        return tuple(1.0 for _ in values[0])
    worst = np.max(np.asarray(finite, dtype=float), axis=0)
    return tuple(float(w * 1.1) if w > 0 else 1.0 for w in worst)
