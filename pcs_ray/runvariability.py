"""Run-to-run variability in the simulator: each run on a GPU replays that GPU's next recorded run.

PAL's profiles model the part of a GPU's slowness that persists; the Longhorn
records also show runs on the *same* GPU varying over time (ResNet: 20 %
coefficient of variation over three days). :class:`RunReplay` replays the
records of the job's own application, as PAL's profiles do per class
(``pcs_ray.longhorn.CLASS_APPS``: ResNet-50 for class A, BERT for B,
PageRank for C and D): per application, every simulated GPU is one recorded
device (drawn without repetition, seeded like variability profiles) whose
later runs of that application (the runs the slow-run model did not train
on) play on their own clock: simulated time plus a seeded offset per GPU,
wrapping around the device's recorded span, selects the device's latest
recorded run at that moment, its state then. A job that starts (or moves) on
some GPUs at time t takes each one's record at t: it runs slower by the
largest recorded slowdown (``runtime / its application's mean``; the slowest
GPU sets a bulk-synchronous job's pace), and the run is **slow** when any of
those records is (more than 1.5 sigma above its application's mean, the
label of ``pcs_ray.slowruns``). Each record also carries the slow-run
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

from pcs_ray.longhorn import CLASS_APPS
from pcs_ray.state import JobState, Snapshot

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
    times: np.ndarray | None = None  # seconds since the first of these runs (None: one an hour)

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
    from pcs_ray.slowruns import build_dataset, fit, load_records

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
    pools: dict[str, list[DeviceRuns]] = defaultdict(list)
    for (app, d), v in sorted(rows.items()):
        pools[app].append(DeviceRuns(d, np.array([r[0] for r in v]), np.array([r[1] for r in v]),
                                     np.array([r[2] for r in v]), np.array([r[3] - v[0][3] for r in v], dtype=float)))
    return {app: tuple(v) for app, v in pools.items()}, result.to_json()


class _Lane:
    """One application's recorded devices, one per simulated GPU, with their clocks and offsets."""

    def __init__(self, pool: Sequence[DeviceRuns], num_gpus: int, rng: np.random.Generator) -> None:
        usable = [d for d in pool if len(d.slowdown) >= MIN_RECORDS]
        if len(usable) < num_gpus:
            usable = list(pool)
        if not usable:
            raise ValueError("run variability: no recorded devices")
        # Without repetition while the records last (PAL samples profiles so); a larger cluster draws again.
        picks, left = [], num_gpus
        while left > 0:
            picks.extend(rng.choice(len(usable), size=min(left, len(usable)), replace=False))
            left -= len(usable)
        self.devices = [usable[i] for i in picks]
        self.clocks = [d.clock() for d in self.devices]
        self.offset = np.array([rng.uniform(0.0, span) for _, span in self.clocks])

    def record(self, g: int, now: float) -> int:
        times, span = self.clocks[g]
        return int(np.searchsorted(times, (self.offset[g] + now) % span, side="right")) - 1


class RunReplay:
    """Per application and simulated GPU, a recorded device's runs replayed in order (see the module's note).

    ``devices`` is one pool for every job, or a pool per application with ``classes`` mapping a job class
    to its application (a class without one uses the ``ANY`` pool, or the first)."""

    def __init__(self, devices: Sequence[DeviceRuns] | Mapping[str, Sequence[DeviceRuns]], num_gpus: int,
                 seed: int = 0, about: dict | None = None, classes: Mapping[str, str] | None = None) -> None:
        rng = np.random.default_rng(seed)
        pools = dict(devices) if isinstance(devices, Mapping) else {ANY: devices}
        self.lanes = {app: _Lane(pools[app], num_gpus, rng) for app in sorted(pools)}
        self.classes = {c: a for c, a in (classes or {}).items() if a in self.lanes}
        self.default = ANY if ANY in self.lanes else next(iter(self.lanes))
        self.devices = self.lanes[self.default].devices  # the default lane's (tests replace entries)
        self.now = 0.0  # the simulated time of the latest decision
        self.about = dict(about or {})
        self.owner_free = None  # set by ReplayedPlacement: the placement's free-GPU view
        self.runs = self.slow_runs = self.predicted_runs = self.predicted_and_slow = 0

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
        base.facts.slow_runs = replay  # what the slow-run filter reads
        self.slow_jobs: dict[int, int] = {}  # job id -> its slow runs
        self._last: dict[int, tuple[int, ...]] = {}  # job id -> the GPUs of its current run
        self._factor: dict[int, float] = {}  # job id -> its current run's drawn slowdown

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def place(self, snap: Snapshot, changed: Iterable[JobState], alloc: Mapping[int, int] | None = None):
        self.replay.now = snap.now  # what the slow-run filter's predictions are for
        touched = self.inner.place(snap, changed, alloc)
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
