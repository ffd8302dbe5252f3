"""Run-to-run variability in the simulator: each run on a GPU replays that GPU's next recorded run.

PAL's profiles model the part of a GPU's slowness that persists; the Longhorn
records also show runs on the *same* GPU varying over time (ResNet: 20 %
coefficient of variation over three days). :class:`RunReplay` maps every
simulated GPU to one recorded device (drawn without repetition, seeded like
variability profiles) and replays that device's later runs (the runs the
slow-run model did not train on) on their own clock: simulated time plus a
seeded offset per GPU, wrapping around the device's recorded span, selects
the device's latest recorded run at that moment, its state then. A job that
starts (or moves) on some GPUs at time t takes each one's record at t: it
runs slower by the largest recorded slowdown
(``runtime / its application's mean``; the slowest GPU sets a bulk-
synchronous job's pace), and the run is **slow** when any of those records
is (more than 1.5 sigma above its application's mean, the label of
``pcs_ray.slowruns``). Each record also carries the slow-run model's
prediction, made from features known before it ran: the prediction of each
GPU's record now is what RUSH's start function and the slow-run placement
filter see (``predicted_slow``), the model's honest view of a run started
there now. Waiting can help twice: other GPUs free up, and a GPU's state
moves on with time.

:class:`ReplayedPlacement` wraps a placement and applies the draws; its
``summary`` counts runs and slow runs.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

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


@functools.lru_cache(maxsize=2)
def longhorn_devices(seed: int = 0) -> tuple[tuple[DeviceRuns, ...], dict]:
    """Fit the slow-run model on the Longhorn records (``slowruns.fit``) and group its later runs by device.

    Cached: the fit takes tens of seconds and does not depend on the simulation's seed."""
    from pcs_ray.slowruns import build_dataset, fit, load_records

    ds = build_dataset(load_records("longhorn"))
    result = fit(ds, data="longhorn", seed=seed)
    test = np.flatnonzero(result.test)
    predicted = result.predict(ds.X[test])
    rows: dict[str, list[tuple[float, bool, bool, int]]] = defaultdict(list)
    for i, p in zip(test, predicted):
        rows[ds.runs[i].device].append((float(ds.slowdown[i]), bool(ds.y[i]), bool(p), ds.runs[i].ts))
    devices = tuple(
        DeviceRuns(d, np.array([r[0] for r in v]), np.array([r[1] for r in v]), np.array([r[2] for r in v]),
                   np.array([r[3] - v[0][3] for r in v], dtype=float))
        for d, v in sorted(rows.items())
    )
    return devices, result.to_json()


class RunReplay:
    """Per simulated GPU, a recorded device's runs replayed in order (see the module's note)."""

    def __init__(self, devices: Sequence[DeviceRuns], num_gpus: int, seed: int = 0, about: dict | None = None) -> None:
        rng = np.random.default_rng(seed)
        pool = [d for d in devices if len(d.slowdown) >= MIN_RECORDS]
        if len(pool) < num_gpus:
            pool = list(devices)
        if len(pool) < num_gpus:
            raise ValueError(f"run variability: {len(pool)} recorded devices for {num_gpus} GPUs")
        pick = rng.choice(len(pool), size=num_gpus, replace=False)
        self.devices = [pool[i] for i in pick]
        self.clocks = [d.clock() for d in self.devices]
        self.offset = np.array([rng.uniform(0.0, span) for _, span in self.clocks])
        self.now = 0.0  # the simulated time of the latest decision
        self.about = dict(about or {})
        self.owner_free = None  # set by ReplayedPlacement: the placement's free-GPU view
        self.runs = self.slow_runs = self.predicted_runs = self.predicted_and_slow = 0

    def record(self, g: int, now: float) -> int:
        """Which of GPU ``g``'s records is its state at simulated time ``now``."""
        times, span = self.clocks[g]
        return int(np.searchsorted(times, (self.offset[g] + now) % span, side="right")) - 1

    def predicted_slow(self, job: JobState | None = None, now: float | None = None) -> np.ndarray:
        """Per GPU, whether the model predicts a run started there at ``now`` (default: the latest decision's
        time) slow."""
        now = self.now if now is None else now
        return np.fromiter((d.predicted[self.record(g, now)] for g, d in enumerate(self.devices)), dtype=bool,
                           count=len(self.devices))

    def would_be_slow(self, job: JobState, n: int, free: int, now: float) -> bool:
        """RUSH's M(j, S): whether ``job`` would run slow if launched at ``now`` on ``n`` GPUs, i.e. fewer
        than ``n`` free GPUs are predicted fast once the GPUs granted earlier this round (``free`` are left
        of the free ones) are taken from the fast ones, as the slow-run filter takes them."""
        self.now = now
        free_mask = self.owner_free()
        fast = int(np.count_nonzero(free_mask & ~self.predicted_slow(job, now)))
        granted = int(np.count_nonzero(free_mask)) - free
        return fast - granted < n

    def draw(self, gpus: Sequence[int], now: float | None = None) -> tuple[float, bool, bool]:
        """One run on ``gpus`` started at ``now``: (slowdown, slow, predicted slow) from each GPU's record then."""
        now = self.now if now is None else now
        factor, slow, predicted = 0.0, False, False
        for g in gpus:
            d, c = self.devices[g], self.record(g, now)
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


def longhorn_replay(num_gpus: int, seed: int = 0) -> RunReplay:
    devices, model = longhorn_devices()
    about = {"run_variability": "longhorn", "model": model["chosen"], "model_test_f1": model["chosen_test_f1"]}
    return RunReplay(devices, num_gpus, seed, about)


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
                factor, slow, _ = self.replay.draw(job.gpus, snap.now)
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


__all__ = ["SOURCES", "DeviceRuns", "ReplayedPlacement", "RunReplay", "longhorn_devices", "longhorn_replay"]
