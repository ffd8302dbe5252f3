"""Evaluate policies by simulation on workload samples, serially or as Ray tasks.

A policy is named by a *spec* string: a decoded WFQ configuration's
canonical JSON (``space.config_key``) or a baseline policy name (``fifo``,
``srsf``, ...). Each (spec, sample) pair is simulated once with the core
simulator, predictions on, and its objective values are cached; a
candidate's value on a sample set is the mean over the set's samples.

The Ray backend fans the missing pairs out as Ray tasks (``pcs_ray.solver.fanout``,
which ``pcs-ray simulate`` shares) on whatever cluster is connected
(``ray.init()`` finds one, or starts a local instance); each sample is put in
the object store once. Both backends run the same function on the same inputs,
so they give identical numbers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence

from pcs_ray.jobs.spec import JobSpec
from pcs_ray.policies import build_policy
from pcs_ray.sim.run import simulate
from pcs_ray.solver.cache import EvaluationCache, Key
from pcs_ray.solver.fanout import RayFanOut, run_in_process
from pcs_ray.solver.objectives import Objective, measure, parse_objectives

Samples = dict[str, list[list[JobSpec]]]  # split name -> samples
Progress = Callable[[int, int], None]  # (done, total) simulations of one batch


def make_policy(spec: str):
    """The policy a spec names: WFQ from a config's JSON, else any policy name."""
    if spec.startswith("{"):
        return build_policy("pcs", config=json.loads(spec))
    return build_policy(spec)


def simulate_spec(spec: str, jobs: Sequence[JobSpec], capacity: int, objectives: Sequence[str]) -> tuple[float, ...]:
    """Objective values of one policy on one sample (the unit of work of both backends)."""
    result = simulate(jobs, capacity, make_policy(spec), predict=True)
    return measure(result, parse_objectives(objectives))


class SerialBackend:
    """In this process, one simulation after another."""

    name = "serial"

    def run(self, tasks: list[Key], samples: Samples, capacity: int, labels: list[str],
            on_result: Callable[[Key, tuple[float, ...]], None]) -> None:
        calls = [(key, (key[0], samples[key[1]][key[2]], capacity, labels)) for key in tasks]
        run_in_process(simulate_spec, calls, on_result)


class RayBackend:
    """Ray tasks on the connected cluster (``pcs_ray.solver.fanout``); results handed back as they finish."""

    name = "ray"

    def __init__(self, address: str | None = None) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        self._fanout = RayFanOut(simulate_spec, max_retries=2)
        self._refs: dict[tuple[str, int], object] = {}
        self._shipped: int | None = None

    def _sample_ref(self, samples: Samples, split: str, i: int):
        if self._shipped != id(samples):
            self._refs.clear()
            self._shipped = id(samples)
        ref = self._refs.get((split, i))
        if ref is None:
            ref = self._refs[(split, i)] = self._fanout.put(samples[split][i])
        return ref

    def cluster_cpus(self) -> float:
        return self._fanout.cluster_cpus()

    def run(self, tasks: list[Key], samples: Samples, capacity: int, labels: list[str],
            on_result: Callable[[Key, tuple[float, ...]], None]) -> None:
        calls = [((spec, split, i), (spec, self._sample_ref(samples, split, i), capacity, labels))
                 for spec, split, i in tasks]
        self._fanout.run(calls, lambda key, values: on_result(key, tuple(values)))


class Evaluator:
    """Mean objective values of policies on a split's samples, through the cache."""

    def __init__(self, samples: Samples, capacity: int, objectives: Sequence[Objective],
                 backend=None, cache: EvaluationCache | None = None) -> None:
        self.samples = samples
        self.capacity = capacity
        self.objectives = tuple(objectives)
        self.labels = [o.label for o in self.objectives]
        self.backend = backend or SerialBackend()
        self.cache = cache if cache is not None else EvaluationCache()
        self.simulations = 0  # run by this evaluator (not from the cache)

    def per_sample(self, spec: str, split: str) -> list[tuple[float, ...]]:
        return [self.cache.get((spec, split, i)) for i in range(len(self.samples[split]))]

    def evaluate(self, specs: Sequence[str], split: str = "train", progress: Progress | None = None) -> list[tuple[float, ...]]:
        """Mean values per spec (inf where any sample gave inf); each missing pair simulated once."""
        count = len(self.samples[split])
        missing = list(dict.fromkeys(
            (spec, split, i) for spec in specs for i in range(count) if (spec, split, i) not in self.cache
        ))
        done = 0

        def store(key: Key, values: tuple[float, ...]) -> None:
            nonlocal done
            self.cache.put(key, values)
            self.simulations += 1
            done += 1
            if progress is not None:
                progress(done, len(missing))

        if missing:
            self.backend.run(missing, self.samples, self.capacity, self.labels, store)
        return [self.mean(spec, split) for spec in specs]

    def mean(self, spec: str, split: str) -> tuple[float, ...]:
        rows = self.per_sample(spec, split)
        out = []
        for k in range(len(self.objectives)):
            column = [r[k] for r in rows]
            out.append(math.inf if any(not math.isfinite(v) for v in column) else sum(column) / len(column))
        return tuple(out)
