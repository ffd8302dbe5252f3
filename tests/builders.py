"""What test modules build again and again, built one way: a clock the test moves by hand, a coordinator
core, its configuration, job specs and states, submissions, clusters, traces, and the CLI run in this
process. Keyword arguments carry the common defaults; a test names only what it cares about."""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pcs_ray import cli
from pcs_ray.cluster import ClusterSpec, GPUSpec, NodeSpec
from pcs_ray.coordinator import Coordinator, Journal
from pcs_ray.coordinator.config import CoordinatorConfig, build_core, cluster_dict
from pcs_ray.coordinator.local import LocalCoordinator
from pcs_ray.data import data_dir
from pcs_ray.jobs.spec import JobSpec, linear_speedup
from pcs_ray.jobs.state import JobState
from pcs_ray.placement import create_placement
from pcs_ray.policies import WFQConfig, WFQPolicy, build_policy
from pcs_ray.variability.run_replay import DeviceRuns, ReplayedPlacement, RunReplay
from pcs_ray.workloads.traces import read_pcs_trace

DATA = data_dir()


# -- time --------------------------------------------------------------------------------------------


class Clock:
    """Reads ``t``, which only the test moves; ``sleep`` moves it too, ``late`` seconds past what was asked,
    and records what was asked in ``slept``."""

    def __init__(self, t: float = 1000.0, late: float = 0.0) -> None:
        self.t, self.late, self.slept = t, late, []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds + self.late


# -- the coordinator ---------------------------------------------------------------------------------


def coordinator(*, cluster: ClusterSpec | None = None, gpus: int = 4, per_node: int | None = None, policy="fifo",
                journal: Journal | str | Path | None = None, checkpoint_root: str | Path = "/tmp/ckpt", placement=None,
                workloads=("tiny",), **options) -> Coordinator:
    """A coordinator core without Ray. ``cluster`` defaults to ``gpus`` alike GPUs, ``per_node`` a node (all
    on one node when not given); ``policy`` and ``placement`` are names or built ones; ``journal`` a
    ``Journal``, a path for one, or none for one in memory. ``options`` are the core's own (``clock``, ...)."""
    cluster = cluster if cluster is not None else ClusterSpec.homogeneous(gpus, per_node or gpus)
    if not isinstance(journal, Journal):
        journal = Journal(":memory:" if journal is None else journal)
    return Coordinator(cluster, build_policy(policy) if isinstance(policy, str) else policy, journal,
                       checkpoint_root=checkpoint_root,
                       placement=create_placement(placement, cluster) if isinstance(placement, str) else placement,
                       workloads=workloads, **options)


def clocked(*, t: float = 1000.0, **options) -> tuple[Coordinator, Clock]:
    """``coordinator(**options)`` on a fresh ``Clock`` at ``t``, and that clock."""
    clock = Clock(t)
    return coordinator(clock=clock, **options), clock


def placed_core(cluster: ClusterSpec, policy, **options) -> tuple[Coordinator, Clock]:
    """A core whose forecasts play placement along (packed-sticky), on a fresh ``Clock``, and that clock."""
    return clocked(cluster=cluster, policy=policy, placement="packed-sticky", **options)


def core_config(state_dir: str | Path, *, gpus: int = 1, per_node: int | None = None, policy: str | None = "fifo",
                restart_overhead: float = 0.0) -> CoordinatorConfig:
    """What ``pcs-ray start`` hands ``build_core``: ``gpus`` alike GPUs, state kept under ``state_dir``."""
    return CoordinatorConfig(cluster=cluster_dict(ClusterSpec.homogeneous(gpus, per_node or gpus)),
                             state_dir=str(state_dir), policy=policy, restart_overhead=restart_overhead)


def local_start(state_dir: str | Path, *, clock=time.time, **config) -> LocalCoordinator:
    """What ``pcs-ray start`` runs, hosted in this process: ``build_core`` on ``core_config(state_dir, **config)``."""
    return LocalCoordinator(build_core(core_config(state_dir, **config), clock=clock))


def whole_play(core: Coordinator) -> dict[int, float]:
    """The forecasts a full play under the lock gives: policy and placement re-run at every event."""
    core.model.sync(core.now(), core.active, core._dirty, core.speed)
    return core.model.engine.fork().play_forward()


# -- what is submitted -------------------------------------------------------------------------------


def submission(*, workload: str = "tiny", steps: int = 100, gpus: int = 1, step_time: float = 0.1, **fields) -> dict:
    """A job as a client submits it (``fields``: any other of the job file's fields)."""
    return {"workload": workload, "steps": steps, "gpus": gpus, "step_time": step_time, **fields}


def external_submission(*, steps: int = 1000, gpus: int = 1, **fields) -> dict:
    """A job whose runs an outside executor (a Tune sweep) carries out, a second a step."""
    return submission(workload="tiny_cnn", steps=steps, gpus=gpus, step_time=1.0, executor="external", **fields)


def random_submission(rng: random.Random) -> dict:
    """A small job of random width, flexibility, class and speed."""
    gpus = rng.choice([1, 1, 2, 4])
    return {"workload": "tiny", "steps": rng.randrange(50, 3000), "gpus": gpus, "min_gpus": rng.choice([1, gpus]),
            "class": rng.choice("ABCD"), "step_time": rng.uniform(0.05, 0.5)}


def submit_random(core: Coordinator, clock: Clock, rng: random.Random, count: int, gap: float) -> None:
    """``count`` random submissions, ``gap`` seconds apart."""
    for _ in range(count):
        clock.t += gap
        core.submit(random_submission(rng))


def job_spec(job_id: int, *, submit: float = 0.0, service: float = 100.0, runtime: float | None = None,
             max_gpus: int = 1, min_gpus: int = 1, rigid: bool = False, speedup=None, **fields) -> JobSpec:
    """A job as submitted: linear speedup up to ``max_gpus`` unless ``speedup`` says otherwise (its table
    then sets ``max_gpus``); a rigid one runs on all of them. ``runtime``, where given, is its run time on
    all its GPUs and sets ``service``. ``fields``: any other of ``JobSpec``'s."""
    if speedup is None:
        speedup = linear_speedup(max_gpus)
    else:
        max_gpus = len(speedup) - 1
    if runtime is not None:
        service = runtime * speedup[max_gpus]
    return JobSpec(job_id, float(submit), float(service), max_gpus, tuple(speedup),
                   min_gpus=max_gpus if rigid else min_gpus, **fields)


def job_state(job_id: int, *, alloc: int = 0, start: float | None = None, rem: float | None = None,
              attained: float = 0.0, **spec) -> JobState:
    """A job as a policy or placement sees it: ``job_spec(job_id, **spec)`` holding ``alloc`` GPUs since
    ``start``, with ``rem`` of its service left (all of it when not given) and ``attained`` GPU-seconds."""
    state = JobState.new(job_spec(job_id, **spec))
    if rem is not None:
        state.remaining = float(rem)
    state.attained = float(attained)
    state.alloc = alloc
    state.start_time = start
    return state


def running(spec: JobSpec, alloc: int, since: float = 0.0) -> JobState:
    """``spec`` running on ``alloc`` GPUs since ``since``."""
    state = JobState.new(spec)
    state.alloc, state.since = alloc, since
    return state


def holding(job_id: int, gpus: int, **spec) -> JobState:
    """A rigid job of ``gpus`` GPUs that holds them all, as a placement is asked to place it."""
    return job_state(job_id, max_gpus=gpus, rigid=True, alloc=gpus, **spec)


# -- clusters and traces -----------------------------------------------------------------------------


def unequal_cluster(nodes: int = 4, per_node: int = 4) -> ClusterSpec:
    """Unequal GPUs and a locality penalty: placement plays along in every forecast."""
    pick = random.Random(3)
    return ClusterSpec(nodes=[NodeSpec(name=f"n{n}", gpus=[
        GPUSpec(index=i, uuid=f"GPU-f-{n}-{i}", scores={c: pick.uniform(1.0, 1.6) for c in "ABCD"})
        for i in range(per_node)]) for n in range(nodes)], locality_penalty=1.3)


def measured_cluster(nodes: int, per_node: int, seed: int) -> ClusterSpec:
    """GPUs with PAL's measured per-class scores (drawn with repetition) and a locality penalty:
    which GPUs a job gets changes its speed, so placement plays along in every forecast."""
    with (DATA / "pal" / "variability" / "32gpu-variability.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    pick = random.Random(seed)
    out = [NodeSpec(name=f"node{n}", gpus=[
        GPUSpec(index=i, uuid=f"GPU-t-{n}-{i}", scores={c: float(r[f"PerfVar_class{c}"]) for c in "ABCD"})
        for i, r in enumerate(pick.choice(rows) for _ in range(per_node))]) for n in range(nodes)]
    return ClusterSpec(nodes=out, locality_penalty=1.2)


def philly(vc: str, n: int, speedup: str = "model") -> list[JobSpec]:
    """The first ``n`` jobs of the PCS artifact's trace of Philly's virtual cluster ``vc``."""
    return read_pcs_trace(DATA / "pcs" / "traces" / f"trace_{vc}.csv", speedup=speedup)[:n]


def vc_config(vc: str, kind: str) -> WFQPolicy:
    """The PCS artifact's WFQ configuration for ``vc`` tuned for ``kind`` (jct, bal, pred)."""
    return WFQPolicy(WFQConfig.load(DATA / "pcs" / "configs" / f"PCS_config_{vc}_{kind}.json"))


def with_costs(jobs: list[JobSpec]) -> list[JobSpec]:
    """Per-job start and move costs (the coordinator's measured ones); every third job moves at the engine's overhead."""
    return [replace(j, start_cost=float(j.job_id % 4) * 7.0, move_cost=None if j.job_id % 3 == 0 else 3.0 + j.job_id % 5)
            for j in jobs]


def classed(jobs: list[JobSpec]) -> list[JobSpec]:
    """The jobs spread over the four job classes by id."""
    return [replace(j, job_class="ABCD"[j.job_id % 4]) for j in jobs]


def forecasts(result) -> list[tuple]:
    """What a simulation forecast for each job, and when the job really ran."""
    return [(r.job_id, r.first_pred, r.last_pred, r.refreshes, r.bound, r.start, r.finish) for r in result.records]


# -- run-to-run variability -------------------------------------------------------------------------


def recorded_devices(k: int, slow_gpu: int | None = None) -> list[DeviceRuns]:
    """``k`` recorded devices of nominal runs; ``slow_gpu``'s records are all slow, 3x, and predicted so."""
    out = []
    for i in range(k):
        bad = i == slow_gpu
        out.append(DeviceRuns(f"d{i}", np.full(3, 3.0 if bad else 1.0), np.full(3, bad), np.full(3, bad)))
    return out


def slow_device(pace: float) -> DeviceRuns:
    """A recorded device whose runs all take ``pace`` times the nominal, and are predicted slow."""
    return DeviceRuns("s", np.full(3, pace), np.full(3, True), np.full(3, True))


def replayed(placement: str, recorded: list[DeviceRuns], seed: int = 0) -> ReplayedPlacement:
    """``placement`` on as many GPUs as there are recorded devices (nodes of four), their runs replayed from
    ``recorded`` (``seed`` lays the devices on the GPUs)."""
    cluster = ClusterSpec.homogeneous(len(recorded), 4)
    return ReplayedPlacement(create_placement(placement, cluster), RunReplay(recorded, len(recorded), seed=seed))


# -- the command line --------------------------------------------------------------------------------


def invoke(capsys, *args) -> tuple[int, str, str]:
    """``pcs-ray ARGS`` in this process: its exit status, standard output and standard error."""
    code = cli.run([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def wait_until(predicate, timeout: float = 60.0, what: str = "a condition", every: float = 0.05):
    """``predicate()``'s first true value, asked every ``every`` seconds; an AssertionError naming ``what``
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s: {what}")
        time.sleep(every)
    return value


# -- bench scripts ---------------------------------------------------------------------------


@contextlib.contextmanager
def bench_module(name: str):
    """``bench/<name>.py`` loaded as a module, with ``bench/`` on the path as ``python bench/<name>.py`` has it
    (its ``common`` helpers), for a test of the bench's own arithmetic."""
    path = Path(__file__).resolve().parent.parent / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_bench", path)
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(path.parent))
        spec.loader.exec_module(module)
        yield module
    sys.modules.pop("common", None)
