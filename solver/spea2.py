"""SPEA2 (Zitzler, Laumanns, Thiele 2001) over a box of real genes, with deap's operators.

Environmental selection is ``deap.tools.selSPEA2`` over offspring + archive;
mating is a binary tournament on the archive's SPEA2 order; variation is
SBX crossover and polynomial mutation (``cxSimulatedBinaryBounded``,
``mutPolynomialBounded``). Every objective is minimised.

The loop knows nothing about WFQ: it hands batches of genomes to
``evaluate`` and gets objective tuples back. Each generation draws its
random numbers from a stream seeded by ``(seed, generation)``, so a run
restarted from the state after generation g continues exactly as the
uninterrupted run would.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from deap import base, tools

Genome = list[float]
Values = tuple[float, ...]
Evaluate = Callable[[list[Genome]], list[Values]]


class SearchError(ValueError):
    """Bad search settings."""


@dataclass
class Member:
    genes: Genome
    values: Values

    def to_json(self) -> dict:
        return {"genes": list(self.genes), "values": [_json_float(v) for v in self.values]}

    @classmethod
    def from_json(cls, raw: dict) -> "Member":
        return cls([float(g) for g in raw["genes"]], tuple(math.inf if v is None else float(v) for v in raw["values"]))


def _json_float(v: float) -> float | None:
    return v if math.isfinite(v) else None


@dataclass
class SearchState:
    """What survives a generation: enough to continue the search exactly."""

    generation: int  # last completed generation (0 = initial population)
    population: list[Member]
    archive: list[Member]
    evaluations: int = 0
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "generation": self.generation,
            "population": [m.to_json() for m in self.population],
            "archive": [m.to_json() for m in self.archive],
            "evaluations": self.evaluations,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, raw: dict) -> "SearchState":
        return cls(
            int(raw["generation"]),
            [Member.from_json(m) for m in raw["population"]],
            [Member.from_json(m) for m in raw["archive"]],
            int(raw.get("evaluations", 0)),
            dict(raw.get("extra", {})),
        )


def _fitness_class(n_obj: int) -> type:
    return type(f"MinFitness{n_obj}", (base.Fitness,), {"weights": (-1.0,) * n_obj})


class _Individual(list):
    """A genome list carrying a deap fitness (what deap's operators expect)."""

    __slots__ = ("fitness",)


@dataclass
class SPEA2:
    """Settings of one search. ``archive_size`` defaults to the population size."""

    lower: Sequence[float]
    upper: Sequence[float]
    n_obj: int
    population_size: int
    seed: int = 0
    archive_size: int | None = None
    crossover_prob: float = 0.9
    eta_crossover: float = 15.0
    eta_mutation: float = 20.0
    seeds: Sequence[Genome] = ()  # genomes placed in the initial population (e.g. known extremes)
    # A share of the offspring made by ``local_move(parent, rng)`` from a tournament-chosen archive
    # member instead of SBX + polynomial mutation: small steps that fill in the front between its points.
    local_move: Callable[[Genome, random.Random], Genome] | None = None
    local_rate: float = 0.0

    def __post_init__(self) -> None:
        if self.population_size < 2:
            raise SearchError(f"the population needs at least 2 members, got {self.population_size}")
        if self.n_obj < 1:
            raise SearchError("give at least one objective")
        if len(self.lower) != len(self.upper) or any(lo >= hi for lo, hi in zip(self.lower, self.upper)):
            raise SearchError("every gene needs lower < upper")
        if not 0.0 <= self.local_rate <= 1.0:
            raise SearchError(f"the local-move rate must be in [0, 1], got {self.local_rate}")
        self._fitness = _fitness_class(self.n_obj)
        self.archive_size = self.archive_size or self.population_size

    # -- helpers ------------------------------------------------------------------

    def _rng(self, generation: int) -> None:
        random.seed(f"spea2:{self.seed}:{generation}")

    def _individual(self, genes: Sequence[float], values: Values | None = None) -> _Individual:
        ind = _Individual(float(g) for g in genes)
        ind.fitness = self._fitness()
        if values is not None:
            ind.fitness.values = tuple(values)
        return ind

    def _members(self, inds: Sequence[_Individual]) -> list[Member]:
        return [Member(list(i), tuple(i.fitness.values)) for i in inds]

    def _evaluate(self, inds: list[_Individual], evaluate: Evaluate) -> None:
        values = evaluate([list(i) for i in inds])
        if len(values) != len(inds):
            raise RuntimeError(f"evaluate returned {len(values)} results for {len(inds)} genomes")
        for ind, v in zip(inds, values):
            if len(v) != self.n_obj:
                raise RuntimeError(f"evaluate returned {len(v)} objectives, expected {self.n_obj}")
            # deap compares weighted values; inf stays comparable, nan would not
            ind.fitness.values = tuple(math.inf if math.isnan(x) else float(x) for x in v)

    def _select(self, inds: list[_Individual]) -> list[_Individual]:
        return tools.selSPEA2(inds, self.archive_size)

    def _offspring(self, archive: list[_Individual]) -> list[_Individual]:
        order = tools.selSPEA2(archive, len(archive))  # best first, by strength Pareto fitness
        rank = {id(ind): r for r, ind in enumerate(order)}
        lower, upper = list(self.lower), list(self.upper)
        indpb = 1.0 / len(lower)

        def tournament() -> _Individual:
            a, b = random.choice(archive), random.choice(archive)
            return a if rank[id(a)] <= rank[id(b)] else b

        children: list[_Individual] = []
        while len(children) < self.population_size:
            if self.local_move is not None and random.random() < self.local_rate:
                children.append(self._individual(self.local_move(list(tournament()), random)))
                continue
            c1, c2 = self._individual(tournament()), self._individual(tournament())
            if random.random() < self.crossover_prob:
                tools.cxSimulatedBinaryBounded(c1, c2, self.eta_crossover, lower, upper)
            for c in (c1, c2):
                tools.mutPolynomialBounded(c, self.eta_mutation, lower, upper, indpb)
                children.append(c)
        return children[: self.population_size]

    # -- the loop -------------------------------------------------------------------

    def initial(self, evaluate: Evaluate) -> SearchState:
        self._rng(0)
        genomes = [list(s) for s in self.seeds][: self.population_size]
        while len(genomes) < self.population_size:
            genomes.append([random.uniform(lo, hi) for lo, hi in zip(self.lower, self.upper)])
        pop = [self._individual(g) for g in genomes]
        self._evaluate(pop, evaluate)
        archive = self._select(pop)
        return SearchState(0, self._members(pop), self._members(archive), len(pop))

    def step(self, state: SearchState, evaluate: Evaluate) -> SearchState:
        """One generation: mate from the archive, evaluate, select the next archive."""
        generation = state.generation + 1
        self._rng(generation)
        archive = [self._individual(m.genes, m.values) for m in state.archive]
        children = self._offspring(archive)
        self._evaluate(children, evaluate)
        new_archive = self._select(children + archive)
        return SearchState(
            generation, self._members(children), self._members(new_archive),
            state.evaluations + len(children), dict(state.extra),
        )

    def run(
        self,
        evaluate: Evaluate,
        generations: int,
        state: SearchState | None = None,
        on_generation: Callable[[SearchState], bool | None] | None = None,
    ) -> SearchState:
        """Run until ``generations`` offspring generations are done (resuming from ``state``).

        ``on_generation`` sees every completed state (generation 0 included)
        and stops the search early by returning True. The caller's global
        ``random`` state is restored afterwards.
        """
        if generations < 1:
            raise SearchError(f"generations must be >= 1, got {generations}")
        saved = random.getstate()
        try:
            if state is None:
                state = self.initial(evaluate)
                if on_generation is not None and on_generation(state):
                    return state
            while state.generation < generations:
                state = self.step(state, evaluate)
                if on_generation is not None and on_generation(state):
                    break
            return state
        finally:
            random.setstate(saved)



def truncate(values: Sequence[Values], k: int) -> list[int]:
    """Indices of ``k`` of the points chosen by SPEA2's archive truncation (keeps the spread of a front)."""
    if k >= len(values):
        return list(range(len(values)))
    fitness = _fitness_class(len(values[0]))
    inds = []
    for i, v in enumerate(values):
        ind = _Individual([float(i)])
        ind.fitness = fitness()
        ind.fitness.values = tuple(v)
        inds.append(ind)
    saved = random.getstate()
    random.seed("spea2:truncate")
    try:
        return sorted(int(ind[0]) for ind in tools.selSPEA2(inds, k))
    finally:
        random.setstate(saved)
