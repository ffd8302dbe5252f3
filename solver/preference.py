"""PCS's preference interface (§3.2) in Python.

    set_preference(("jct", "avg"), ("pred_err", "p99"))
    front = update_pareto_front(workload="themis1", gpus=64)
    set_wfq_config(front[3])

``update_pareto_front`` runs the solver on a CDF workload, a trace, the
coordinator's job history or a list of jobs and returns the front's
configurations with their train and test objective values;
``set_wfq_config`` writes the chosen configuration where the coordinator
reads it (``$PCS_RAY_WFQ_CONFIG``, default ``~/.pcs-ray/wfq_config.json``),
in the JSON format ``pcs-ray simulate --pcs-config`` loads. The module-level
functions use one default ``PreferenceSolver``; make your own for several.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path

from pcs_ray.jobs.spec import JobSpec
from pcs_ray.policies import WFQConfig
from pcs_ray.solver.front import FrontPoint
from pcs_ray.workloads.history import read_history
from pcs_ray.solver.objectives import Objective, parse_objective, parse_objectives
from pcs_ray.solver.search import Problem, Search
from pcs_ray.solver.space import DEFAULT_MAX_QUEUES, canonical_dict
from pcs_ray.solver.workload import WorkloadSource
from pcs_ray.workloads.traces import read_trace

CONFIG_ENV = "PCS_RAY_WFQ_CONFIG"


class PreferenceError(ValueError):
    """A preference or choice the solver cannot act on."""


def default_config_path() -> Path:
    """Where the coordinator reads its WFQ configuration."""
    env = os.environ.get(CONFIG_ENV)
    return Path(env) if env else Path.home() / ".pcs-ray" / "wfq_config.json"


def resolve_source(workload: str | None = None, trace: str | Path | None = None, history: str | Path | None = None,
                   jobs: Sequence[JobSpec] | None = None, num_jobs: int | None = None, load: float = 0.9,
                   speedup: str = "linear") -> WorkloadSource:
    """Exactly one of a CDF workload name, a trace file, a job-history file or a list of jobs."""
    given = [n for n, v in (("workload", workload), ("trace", trace), ("history", history), ("jobs", jobs)) if v is not None]
    if len(given) != 1:
        raise PreferenceError(f"give exactly one of workload, trace, history or jobs (got {', '.join(given) or 'none'})")
    if workload is not None:
        return WorkloadSource.generated(workload, 500 if num_jobs is None else num_jobs, load)
    if trace is not None:
        return WorkloadSource.from_jobs(str(trace), read_trace(trace, speedup=speedup), num_jobs)
    if history is not None:
        return WorkloadSource.from_jobs(str(history), read_history(history), num_jobs)
    return WorkloadSource.from_jobs("jobs", list(jobs), num_jobs)


def write_wfq_config(config: WFQConfig, path: str | Path) -> Path:
    """Write ``config`` atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(canonical_dict(config), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


_COMPARISON = re.compile(r"^\s*([\w:./]+)\s*(<=|<)\s*([0-9.eE+-]+)\s*(h|s|%)?\s*$")


def choose(points: Sequence[FrontPoint], objectives: Sequence[Objective], preference: str, split: str = "test") -> int:
    """Index of the point a preference such as ``"min jct:avg where pred_err:p99 <= 20"`` picks.

    Constraints are ``OBJECTIVE <= X`` joined by ``and``; JCT bounds may be
    given in hours (``h``) or seconds. Values are the ``split`` ones.
    """
    text = preference.strip().lower()
    m = re.match(r"^(min|lowest|minimi[sz]e)\s+(\S+)(?:\s+(?:where|with|if)\s+(.+))?$", text)
    if not m:
        raise PreferenceError(f"preference {preference!r} must read 'min OBJECTIVE [where OBJECTIVE <= X [and ...]]'")
    labels = [o.label for o in objectives]

    def index_of(spec: str) -> int:
        o = parse_objective(spec)
        if o.label not in labels:
            raise PreferenceError(f"{o.label} is not an objective of this front ({', '.join(labels)})")
        return labels.index(o.label)

    target = index_of(m.group(2))
    limits = []
    for clause in re.split(r"\s+and\s+", m.group(3) or "") if m.group(3) else []:
        c = _COMPARISON.match(clause)
        if not c:
            raise PreferenceError(f"constraint {clause!r} must read 'OBJECTIVE <= NUMBER'")
        k = index_of(c.group(1))
        bound = float(c.group(3)) * (3600.0 if c.group(4) == "h" else 1.0)
        limits.append((k, bound, c.group(2)))

    def values(p: FrontPoint):
        return p.test if split == "test" and p.test is not None else p.train

    ok = [
        i for i, p in enumerate(points)
        if all(values(p)[k] < b if op == "<" else values(p)[k] <= b for k, b, op in limits)
    ]
    if not ok:
        raise PreferenceError(f"no configuration on the front meets {m.group(3)!r}")
    return min(ok, key=lambda i: (values(points[i])[target], i))


class PreferenceSolver:
    """The three calls of PCS's preference interface, with their state."""

    def __init__(self) -> None:
        self.objectives: tuple[Objective, ...] = ()
        self.front: list[FrontPoint] = []
        self.search: Search | None = None

    def set_preference(self, *objectives) -> tuple[Objective, ...]:
        """Objectives as ``(metric, measure)`` pairs or ``"metric:measure"`` strings, all minimised."""
        self.objectives = parse_objectives(objectives)
        return self.objectives

    def update_pareto_front(
        self, workload: str | None = None, *, trace=None, history=None, jobs=None, gpus: int = 64,
        num_jobs: int | None = None, load: float = 0.9, samples: int = 3, test_samples: int = 3,
        generations: int = 20, population: int = 40, seed: int = 0, backend=None, checkpoint=None,
        time_limit: float | None = None, on_generation=None, max_points: int | None = None,
        space: str = "paper", max_queues: int = DEFAULT_MAX_QUEUES, num_apps: int | None = None,
    ) -> list[FrontPoint]:
        """Search WFQ configurations; returns the front (train and test values), best first objective first.

        ``num_apps`` is the deprecated spelling of ``num_jobs``.
        """
        if not self.objectives:
            raise PreferenceError("call set_preference(...) first")
        if num_apps is not None:
            if num_jobs is not None:
                raise PreferenceError("num_apps and num_jobs are one argument: give num_jobs")
            warnings.warn("num_apps is deprecated; use num_jobs", FutureWarning, stacklevel=2)
            num_jobs = num_apps
        source = resolve_source(workload, trace, history, jobs, num_jobs, load)
        problem = Problem(source, gpus, self.objectives, samples, test_samples, population, seed, space=space,
                          max_queues=max_queues)
        search = Search(problem, backend, checkpoint)
        try:
            search.run(generations, on_generation, time_limit)
            self.front = search.front(max_points)
        finally:
            search.close()
        self.search = search
        return self.front

    def set_wfq_config(self, config: WFQConfig | FrontPoint | int, path: str | Path | None = None) -> Path:
        """Write the chosen configuration (a config, a front point or its index) for the coordinator."""
        if isinstance(config, int):
            if not 0 <= config < len(self.front):
                raise PreferenceError(f"no configuration {config} on the front (it has {len(self.front)})")
            config = self.front[config]
        if isinstance(config, FrontPoint):
            config = config.config
        return write_wfq_config(config, path if path is not None else default_config_path())


_default = PreferenceSolver()
set_preference = _default.set_preference
update_pareto_front = _default.update_pareto_front
set_wfq_config = _default.set_wfq_config
