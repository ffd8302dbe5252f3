"""PCS's weighted fair queueing, WFQ(T, W, zeta_min, delta).

Apps map to queues by size (GPU-seconds at one GPU). Queues share the
cluster in proportion to their weights, each getting at least the floor of
its guaranteed share; an app inside a queue is served FIFO and capped at the
largest allocation whose efficiency speedup(k)/k is >= zeta. GPUs a queue
cannot use at that cap first relax zeta by delta inside the queue, and only
then flow to other queues by weight (work conservation).
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pcs_ray.policies.base import Allocation, SchedulingPolicy, top_up
from pcs_ray.state import JobState, Snapshot


class ConfigError(ValueError):
    """A WFQ configuration a user supplied is unusable."""


@dataclass(frozen=True)
class WFQConfig:
    """Concrete WFQ configuration: upper size thresholds (last is inf), weights, zeta_min, delta."""

    thresholds: tuple[float, ...]
    weights: tuple[float, ...]
    zeta_min: float = 0.0
    delta: float = 0.0

    def __post_init__(self) -> None:
        if not self.thresholds:
            raise ConfigError("WFQ config needs at least one queue")
        if len(self.weights) != len(self.thresholds):
            raise ConfigError(
                f"WFQ config has {len(self.thresholds)} thresholds but {len(self.weights)} weights"
            )
        if any(not (w > 0) or math.isinf(w) for w in self.weights):
            raise ConfigError(f"WFQ weights must be finite and > 0, got {list(self.weights)}")
        if any(b <= a for a, b in zip(self.thresholds, self.thresholds[1:])):
            raise ConfigError(f"WFQ thresholds must increase, got {list(self.thresholds)}")
        if not math.isinf(self.thresholds[-1]):
            raise ConfigError("the last WFQ threshold must be 'inf' so every app has a queue")
        if not 0 <= self.zeta_min <= 1:
            raise ConfigError(f"zeta_min (clip_demand_factor) must be in [0, 1], got {self.zeta_min}")
        if self.delta < 0:
            raise ConfigError(f"delta must be >= 0, got {self.delta}")

    @property
    def normalised_weights(self) -> tuple[float, ...]:
        total = sum(self.weights)
        return tuple(w / total for w in self.weights)

    @classmethod
    def from_params(cls, thresholds: Sequence[float], W: float, zeta_min: float, delta: float = 0.0) -> "WFQConfig":
        """Weights ``w_i = exp(-i W)`` (paper §3.3) for the given queues."""
        return cls(tuple(thresholds), tuple(math.exp(-i * W) for i in range(len(thresholds))), zeta_min, delta)

    @classmethod
    def from_dict(cls, raw: dict, source: str = "config") -> "WFQConfig":
        """Read the PCS artifact's JSON (``class_thresholds``, ``class_rates``, ``clip_demand_factor``, ``delta``)."""
        try:
            thresholds = tuple(math.inf if str(t).lower() == "inf" else float(t) for t in raw["class_thresholds"])
            weights = tuple(float(w) for w in raw["class_rates"])
        except KeyError as e:
            raise ConfigError(f"{source}: missing key {e.args[0]!r} (need class_thresholds, class_rates)") from None
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{source}: thresholds and rates must be numbers: {e}") from None
        if "num_classes" in raw and int(raw["num_classes"]) != len(thresholds):
            raise ConfigError(f"{source}: num_classes={raw['num_classes']} but {len(thresholds)} thresholds")
        try:
            return cls(thresholds, weights, float(raw.get("clip_demand_factor", 0.0)), float(raw.get("delta", 0.0)))
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None

    @classmethod
    def load(cls, path: str | Path) -> "WFQConfig":
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"no such WFQ config file: {path}")
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a JSON object")
        return cls.from_dict(raw, str(path))

    def to_dict(self) -> dict:
        return {
            "num_classes": len(self.thresholds),
            "class_thresholds": ["inf" if math.isinf(t) else t for t in self.thresholds],
            "class_rates": list(self.normalised_weights),
            "clip_demand_factor": self.zeta_min,
            "delta": self.delta,
        }


def squared_cv(values: Sequence[float]) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / n
    return var / (mean * mean) if mean else 0.0


def thresholds_from_c2(sizes: Sequence[float], T: float) -> tuple[float, ...]:
    """Cut sorted sizes into queues whose squared coefficient of variation stays <= T.

    Walks the sorted sizes keeping running sums; when adding a size would push
    the current queue's C^2 above T, the queue closes at the previous size and
    the new queue *starts with* that size (the PCS artifact dropped it from the
    next queue's statistics). Returns upper thresholds, the last one inf.
    """
    xs = sorted(float(s) for s in sizes)
    cuts: list[float] = []
    n = s1 = s2 = 0.0
    prev = None
    for x in xs:
        if n >= 1:
            n2, t1, t2 = n + 1, s1 + x, s2 + x * x
            mean = t1 / n2
            c2 = (t2 / n2 - mean * mean) / (mean * mean) if mean else 0.0
            if c2 > T + 1e-12 and x > prev and (not cuts or prev > cuts[-1]):
                cuts.append(prev)
                n = s1 = s2 = 0.0
        n, s1, s2, prev = n + 1, s1 + x, s2 + x * x, x
    return tuple(cuts) + (math.inf,)


def fifo_queue_bound(snap: Snapshot, queue: list[JobState], job: JobState, guaranteed: int, zeta: float) -> float | None:
    """Worst-case finish of ``job`` in a FIFO queue that always holds >= ``guaranteed`` GPUs.

    The queue's head always gets at least min(its efficiency cap, guaranteed)
    GPUs, so serving the jobs ahead one after another at that rate is an upper
    bound whatever arrives later. Ignores checkpoint overheads.
    """
    if guaranteed <= 0:
        return None
    t = snap.now
    for other in queue:
        spec = other.spec
        n = min(other.cap(zeta), guaranteed, spec.max_gpus)
        if n < spec.min_gpus:
            return None
        t += other.remaining / (spec.speedup[n] / other.slowdown)
        if other is job:
            return t
    return None


class WFQPolicy(SchedulingPolicy):
    name = "pcs"

    def __init__(self, config: WFQConfig | None = None) -> None:
        self.config = config or WFQConfig((math.inf,), (1.0,))
        self._weights = self.config.normalised_weights
        self._upper = list(self.config.thresholds)

    def queue_of(self, job: JobState) -> int:
        return bisect.bisect_left(self._upper, job.spec.service)

    def _queues(self, snap: Snapshot) -> list[list[JobState]]:
        queues: list[list[JobState]] = [[] for _ in self._weights]
        for job in snap.jobs:  # arrival order, so each queue is FIFO
            queues[self.queue_of(job)].append(job)
        return queues

    def allocate(self, snap: Snapshot) -> Allocation:
        queues = self._queues(snap)
        usable = [sum(j.spec.max_gpus for j in q) for q in queues]
        shares = [0] * len(queues)
        # Jefferson/D'Hondt apportionment: each queue gets at least floor(G * w)
        # of the weight among busy queues; ties go to the queue whose head came first.
        free = snap.capacity
        while free > 0:
            best = -1
            best_key = None
            for i, q in enumerate(queues):
                if shares[i] >= usable[i]:
                    continue
                key = ((shares[i] + 1) / self._weights[i], q[0].spec.submit_time, q[0].spec.job_id)
                if best_key is None or key < best_key:
                    best, best_key = i, key
            if best < 0:
                break
            shares[best] += 1
            free -= 1
        alloc: Allocation = {}
        for q, share in zip(queues, shares):
            if share:
                self._fill_queue(q, share, alloc)
        order = [j for q in queues for j in q]
        return top_up(order, alloc, snap.capacity)

    def _fill_queue(self, queue: list[JobState], share: int, alloc: Allocation) -> None:
        """FIFO inside the queue with efficiency caps, relaxing zeta by delta for leftovers."""
        zeta = self.config.zeta_min
        left = share
        while True:
            for job in queue:
                if left <= 0:
                    return
                spec = job.spec
                have = alloc.get(spec.job_id, 0)
                cap = job.cap(zeta) if zeta > 0 else spec.max_gpus
                extra = min(cap - have, left)
                if extra <= 0 or have + extra < spec.min_gpus:
                    continue
                if spec.rigid and have + extra < spec.max_gpus:
                    continue
                alloc[spec.job_id] = have + extra
                left -= extra
            if left <= 0 or zeta <= 0:
                return
            zeta = zeta - self.config.delta if self.config.delta > 0 else 0.0
            if zeta < 0:
                zeta = 0.0

    def completion_bound(self, snap: Snapshot, job: JobState) -> float | None:
        q = self.queue_of(job)
        guaranteed = math.floor(snap.capacity * self._weights[q] + 1e-9)
        return fifo_queue_bound(snap, self._queues(snap)[q], job, guaranteed, self.config.zeta_min)

    def describe(self) -> dict:
        return {"policy": self.name, **self.config.to_dict()}
