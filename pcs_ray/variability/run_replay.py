"""Run-to-run variability in the simulator: each run on a GPU replays that GPU's next recorded run.

PAL's profiles model the part of a GPU's slowness that persists; the Longhorn
records also show runs on the *same* GPU varying over time (ResNet: 20 %
coefficient of variation over three days). :class:`RunReplay` replays the
records of the job's own application, as PAL's profiles do per class
(``pcs_ray.variability.longhorn.CLASS_APPS``: ResNet-50 for class A, BERT for B,
PageRank for C and D): per application, whole recorded nodes are laid on
the simulated nodes (drawn without repetition, seeded like variability
profiles; records without nodes, GPU by GPU), and their later runs (the runs
the slow-run model did not train on) play on one clock per application:
simulated time plus one seeded offset, wrapping around the records' span,
selects each device's latest recorded run at that moment, its state then.
One clock and whole nodes keep together what the records show together: a
node-wide slow event (Longhorn's slow ResNet and BERT runs are the four GPUs
of one node at once) stays one node's event, and the node and cabinet
history in a record's features is the replayed history before that moment,
as the model was trained. A job that starts (or moves) on
some GPUs at time t takes each one's record at t: it runs slower by the
largest recorded slowdown (``runtime / its application's mean``; the slowest
GPU sets a bulk-synchronous job's pace), and the run is **slow** when any of
those records is (more than 1.5 sigma above its application's mean, the
label of ``pcs_ray.variability.slow_runs``). Each record also carries the slow-run
model's prediction for that run, made from features known before it ran
(its application among them, RUSH's M(j, S)): the prediction of each GPU's
record now is what RUSH's start function and the slow-run placement filter
see (``predicted_slow``), the model's honest view of a run of this job
started there now. Waiting can help twice: other GPUs free up, and a GPU's
state moves on with time.

SGEMM's records, three quarters of the data, are a kernel benchmark whose
tiny spread makes a GPU 3 % slower than the mean slow on every run: it
stands for no job class, and the replay's model is trained without it, on
the applications it replays (as RUSH trains on the proxy applications it
schedules; trained on all four, SGEMM's persistently slow GPUs are all the
model learns to predict: none of the ResNet or BERT later runs is predicted
slow). ``longhorn_replay(per_class=False)`` is the ablation that replays
every application's records by device whatever the job, with the model
trained on all four, as this module did first.

:class:`ReplayedPlacement` wraps a placement and applies the draws; its
``summary`` counts runs and slow runs.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pcs_ray.variability.longhorn import CLASS_APPS
from pcs_ray.jobs.state import JobState, Snapshot

#: names ``--run-variability`` accepts
SOURCES = ("longhorn",)
MIN_RECORDS = 3  # devices with fewer later runs are used only when too few others exist


@dataclass(frozen=True)
class DeviceRuns:
    """One recorded device's later runs in time order."""

    device: str
    slowdown: np.ndarray  # runtime / the app's mean
    slow: np.ndarray  # bool: the run was slow
    predicted: np.ndarray  # bool: the model predicted it slow
    times: np.ndarray | None = None  # seconds since the first later run of the application (None: one an hour)

    def clock(self) -> tuple[np.ndarray, float]:
        """Start times from 0 and the span after which the record wraps around (one more typical gap)."""
        t = np.arange(len(self.slowdown)) * 3600.0 if self.times is None else np.asarray(self.times, dtype=float)
        gap = float(np.median(np.diff(t))) if len(t) > 1 else 3600.0
        return t, float(t[-1] + max(gap, 1.0))


ANY = "*"  # the pool of every application's records, by device


@functools.lru_cache(maxsize=2)
def longhorn_devices(seed: int = 0, apps: tuple[str, ...] | None = None
                     ) -> tuple[dict[str, tuple[DeviceRuns, ...]], dict]:
    """Fit the slow-run model on the Longhorn records of ``apps`` (default: all four) (``slowruns.fit``) and
    group its later runs by application and device (and, under ``ANY``, by device across applications).

    Cached: the fit takes tens of seconds and does not depend on the simulation's seed."""
    from pcs_ray.variability.slow_runs import build_dataset, fit, load_records

    runs = [r for r in load_records("longhorn") if apps is None or r.app in apps]
    ds = build_dataset(runs)
    result = fit(ds, data="longhorn" if apps is None else f"longhorn ({', '.join(apps)})", seed=seed)
    test = np.flatnonzero(result.test)
    predicted = result.predict(ds.X[test])
    rows: dict[tuple[str, str], list[tuple[float, bool, bool, int]]] = defaultdict(list)
    for i, p in zip(test, predicted):
        row = (float(ds.slowdown[i]), bool(ds.y[i]), bool(p), ds.runs[i].ts)
        rows[ds.runs[i].app, ds.runs[i].device].append(row)
        rows[ANY, ds.runs[i].device].append(row)  # test runs are in time order across applications too
    first: dict[str, int] = {}  # per pool, its first later run: every device of a pool shares its clock
    for (app, _), v in rows.items():
        first[app] = min(first.get(app, v[0][3]), v[0][3])
    pools: dict[str, list[DeviceRuns]] = defaultdict(list)
    for (app, d), v in sorted(rows.items()):
        times = np.array([r[3] - first[app] for r in v], dtype=float)
        pools[app].append(DeviceRuns(d, np.array([r[0] for r in v]), np.array([r[1] for r in v]),
                                     np.array([r[2] for r in v]), times))
    return {app: tuple(v) for app, v in pools.items()}, result.to_json()


def _node_of(device: str) -> str:
    """The recorded node of a device key ``cabinet-node-slot`` (a key without one is its own node)."""
    parts = device.rsplit("-", 1)
    return parts[0] if len(parts) == 2 and parts[1].isdigit() else device


class _Lane:
    """One application's recorded nodes on the simulated ones, all on one clock (see ``RunReplay``)."""

    def __init__(self, pool: Sequence[DeviceRuns], node_of: Sequence[int], rng: np.random.Generator) -> None:
        sim_nodes: dict[int, list[int]] = defaultdict(list)
        for g, n in enumerate(node_of):
            sim_nodes[int(n)].append(g)
        width = max(len(v) for v in sim_nodes.values())
        groups: dict[str, list[DeviceRuns]] = defaultdict(list)
        for d in pool:
            groups[_node_of(d.device)].append(d)
        if max(len(v) for v in groups.values()) < width:  # records without nodes as wide: GPU by GPU
            sim_nodes, width = {g: [g] for g in range(len(node_of))}, 1
        recorded = [sorted(v, key=lambda d: d.device) for _, v in sorted(groups.items())]
        usable = [v for v in recorded if len(v) >= width and all(len(d.slowdown) >= MIN_RECORDS for d in v)]
        if len(usable) < len(sim_nodes):
            usable = [v for v in recorded if len(v) >= width] or recorded
        if not usable:
            raise ValueError("run variability: no recorded devices")
        # Whole recorded nodes onto simulated nodes, without repetition while they last (PAL samples profiles
        # so); a larger cluster draws again.
        picks: list[int] = []
        while len(picks) < len(sim_nodes):
            picks.extend(rng.choice(len(usable), size=min(len(sim_nodes) - len(picks), len(usable)), replace=False))
        self.devices: list[DeviceRuns] = [pool[0]] * len(node_of)
        for (_, gpus), k in zip(sorted(sim_nodes.items()), picks):
            for j, g in enumerate(gpus):
                self.devices[g] = usable[k][j % len(usable[k])]
        self.span = max(d.clock()[1] for d in self.devices)
        self.offset = float(rng.uniform(0.0, self.span))  # one clock for the whole lane: T = offset + now
        self._times: dict[int, tuple[DeviceRuns, np.ndarray]] = {}

    def record(self, g: int, now: float) -> int:
        """The device's latest record started by recorded time ``offset + now`` (wrapping around the lane's
        span; before its first record of a cycle, its last of the previous one)."""
        d = self.devices[g]
        known = self._times.get(g)
        if known is None or known[0] is not d:  # tests put other devices in
            known = self._times[g] = (d, d.clock()[0])
        return int(np.searchsorted(known[1], (self.offset + now) % self.span, side="right")) - 1


class RunReplay:
    """Per application and simulated GPU, a recorded device's runs replayed in order (see the module's note).

    ``devices`` is one pool for every job, or a pool per application with ``classes`` mapping a job class
    to its application (a class without one uses the ``ANY`` pool, or the first)."""

    def __init__(self, devices: Sequence[DeviceRuns] | Mapping[str, Sequence[DeviceRuns]], num_gpus: int,
                 seed: int = 0, about: dict | None = None, classes: Mapping[str, str] | None = None,
                 node_of: Sequence[int] | None = None) -> None:
        self.pools = dict(devices) if isinstance(devices, Mapping) else {ANY: devices}
        self.seed = seed
        self.classes = {c: a for c, a in (classes or {}).items() if a in self.pools}
        self.default = ANY if ANY in self.pools else next(iter(sorted(self.pools)))
        self.bind_nodes(range(num_gpus) if node_of is None else node_of)
        self.now = 0.0  # the simulated time of the latest decision
        self.about = dict(about or {})
        self.owner_free = None  # set by ReplayedPlacement: the placement's free-GPU view
        self.runs = self.slow_runs = self.predicted_runs = self.predicted_and_slow = 0

    def bind_nodes(self, node_of: Sequence[int]) -> None:
        """Map recorded nodes onto the simulated cluster's nodes (``node_of``: the node of each GPU), seeded."""
        rng = np.random.default_rng(self.seed)
        self.lanes = {app: _Lane(self.pools[app], list(node_of), rng) for app in sorted(self.pools)}
        self.devices = self.lanes[self.default].devices  # the default lane's (tests replace entries)

    def lane(self, job: JobState | None) -> _Lane:
        """The records a run of ``job`` replays: its class's application's."""
        app = self.classes.get(job.spec.job_class) if job is not None else None
        return self.lanes[app if app is not None else self.default]

    def predicted_slow(self, job: JobState | None = None, now: float | None = None) -> np.ndarray:
        """Per GPU, whether the model predicts a run of ``job`` started there at ``now`` (default: the latest
        decision's time) slow."""
        now = self.now if now is None else now
        lane = self.lane(job)
        return np.fromiter((d.predicted[lane.record(g, now)] for g, d in enumerate(lane.devices)), dtype=bool,
                           count=len(lane.devices))

    def would_be_slow(self, job: JobState, n: int, free: int, now: float) -> bool:
        """RUSH's M(j, S): whether ``job`` would run slow if launched at ``now`` on ``n`` GPUs, i.e. fewer
        than ``n`` free GPUs are predicted fast once the GPUs granted earlier this round (``free`` are left
        of the free ones) are taken from the fast ones, as the slow-run filter takes them."""
        self.now = now
        free_mask = self.owner_free()
        fast = int(np.count_nonzero(free_mask & ~self.predicted_slow(job, now)))
        granted = int(np.count_nonzero(free_mask)) - free
        return fast - granted < n

    def draw(self, gpus: Sequence[int], now: float | None = None, job: JobState | None = None
             ) -> tuple[float, bool, bool]:
        """One run of ``job`` on ``gpus`` started at ``now``: (slowdown, slow, predicted slow) from each GPU's
        record then."""
        now = self.now if now is None else now
        lane = self.lane(job)
        factor, slow, predicted = 0.0, False, False
        for g in gpus:
            d, c = lane.devices[g], lane.record(g, now)
            factor = max(factor, float(d.slowdown[c]))
            slow |= bool(d.slow[c])
            predicted |= bool(d.predicted[c])
        self.runs += 1
        self.slow_runs += slow
        self.predicted_runs += predicted
        self.predicted_and_slow += slow and predicted
        return factor, slow, predicted

    def summary(self) -> dict:
        return {"runs": self.runs, "slow_runs": self.slow_runs, "predicted_slow_runs": self.predicted_runs,
                "predicted_and_slow": self.predicted_and_slow}


def longhorn_replay(num_gpus: int, seed: int = 0, per_class: bool = True) -> RunReplay:
    """The Longhorn replay: each job class replays its application's records, and the model is trained on
    those applications' earlier runs, as RUSH trains on the applications it schedules (``per_class=False``:
    every application's records by device whatever the job, the model trained on all four; an ablation)."""
    apps = sorted(set(CLASS_APPS.values())) if per_class else [ANY]
    pools, model = longhorn_devices(0, tuple(apps) if per_class else None)
    about = {"run_variability": "longhorn" if per_class else "longhorn (every application's records, any job)",
             "model": model["chosen"], "model_test_f1": model["chosen_test_f1"],
             "model_by_app": model["chosen_by_app"]}
    return RunReplay({a: pools[a] for a in apps}, num_gpus, seed, about, CLASS_APPS if per_class else None)


class ReplayedPlacement:
    """A placement whose every new run draws run-to-run slowdowns (same interface as the one it wraps)."""

    def __init__(self, inner, replay: RunReplay) -> None:
        self.inner = inner
        self.replay = replay
        base = getattr(inner, "inner", inner)  # a PlacementLog's placement
        replay.owner_free = base.free_mask
        node = getattr(getattr(base, "facts", None), "node", None)
        if node is not None and len(node) == len(replay.devices) and len(set(node.tolist())) < len(node):
            replay.bind_nodes(node)  # whole recorded nodes onto the cluster's nodes
        base.facts.slow_runs = replay  # what the slow-run filter reads
        self.slow_jobs: dict[int, int] = {}  # job id -> its slow runs
        self._last: dict[int, tuple[int, ...]] = {}  # job id -> the GPUs of its current run
        self._factor: dict[int, float] = {}  # job id -> its current run's drawn slowdown

    def __getattr__(self, name):
        if name == "inner":  # unpickling asks before ``inner`` is set: no recursion into itself
            raise AttributeError(name)
        return getattr(self.inner, name)

    def place(self, snap: Snapshot, changed: Iterable[JobState], alloc: Mapping[int, int] | None = None, settle=None):
        self.replay.now = snap.now  # what the slow-run filter's predictions are for
        touched = self.inner.place(snap, changed, alloc, settle)
        for job in touched:
            jid = job.spec.job_id
            if not job.gpus:
                continue
            if job.gpus != self._last.get(jid):  # a new run: each GPU's next record
                factor, slow, _ = self.replay.draw(job.gpus, snap.now, job)
                self._last[jid], self._factor[jid] = job.gpus, factor
                if slow:
                    self.slow_jobs[jid] = self.slow_jobs.get(jid, 0) + 1
            job.slowdown = self.inner.slowdown(job, job.gpus) * self._factor[jid]
        return touched

    def release(self, job: JobState) -> None:
        self._last.pop(job.spec.job_id, None)
        self._factor.pop(job.spec.job_id, None)
        self.inner.release(job)

    def fork(self):
        return self.inner.fork()  # forecasts know no future draws

    def summary(self) -> dict:
        inner = self.inner.summary() if hasattr(self.inner, "summary") else {}
        return {**inner, **self.replay.summary()}

    def describe(self) -> dict:
        return {**self.inner.describe(), **self.replay.about}


__all__ = ["ANY", "SOURCES", "DeviceRuns", "ReplayedPlacement", "RunReplay", "longhorn_devices", "longhorn_replay"]
