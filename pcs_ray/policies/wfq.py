"""PCS's weighted fair queueing, WFQ(T, W, zeta_min, delta).

Jobs map to queues by size (GPU-seconds at one GPU). Queues share the
cluster in proportion to their weights, each getting at least the floor of
its guaranteed share; a job inside a queue is served FIFO and capped at the
largest allocation whose efficiency speedup(k)/k is >= zeta. GPUs a queue
cannot use at that cap first relax zeta by delta inside the queue, and only
then flow to other queues by weight (work conservation).
"""

from __future__ import annotations

import bisect
import json
import math
from itertools import groupby
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from dataclasses import dataclass
from pathlib import Path

from pcs_ray.policies.base import Allocation, SchedulingPolicy, top_up
from pcs_ray.policies.reasons import WaitCode, WaitReason
from pcs_ray.policies.water_fill import water_fill
from pcs_ray.jobs.state import JobState, Snapshot
from pcs_ray.contract import ConfigError  # one class for every unusable configuration, live or simulated


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
            raise ConfigError("the last WFQ threshold must be 'inf' so every job has a queue")
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

    Walks the sorted sizes keeping running sums; when adding a size (with all
    its equal copies) would push the current queue's C^2 above T, the queue
    closes at the previous size and the new queue *starts with* that size (the
    PCS artifact dropped it from the next queue's statistics). Returns upper
    thresholds, the last one inf.
    """
    cuts: list[float] = []
    n = s1 = s2 = 0.0
    prev = None
    # Equal sizes cannot be split by a threshold, so sizes enter a queue as groups.
    for x, group in groupby(sorted(float(v) for v in sizes)):
        c = float(len(list(group)))
        if n:
            n2, t1, t2 = n + c, s1 + c * x, s2 + c * x * x
            mean = t1 / n2
            c2 = (t2 / n2 - mean * mean) / (mean * mean) if mean else 0.0
            if c2 > T + 1e-12:
                cuts.append(prev)
                n = s1 = s2 = 0.0
        n, s1, s2, prev = n + c, s1 + c * x, s2 + c * x * x, x
    return tuple(cuts) + (math.inf,)


def fifo_queue_bound(snap: Snapshot, queue: list[JobState], job: JobState, guaranteed: int, zeta: float,
                     caps: Iterable[int] | None = None) -> float | None:
    """Worst-case finish of ``job`` in a FIFO queue that always holds >= ``guaranteed`` GPUs.

    The queue's head always gets at least min(its efficiency cap, guaranteed)
    GPUs, so serving the jobs ahead one after another at that rate is an upper
    bound whatever arrives later. Ignores checkpoint overheads. ``caps``: each
    queued job's efficiency cap at ``zeta``, in queue order, where the caller keeps
    them (``_QueueIndex.entries``): a job at the tail of a long queue is behind every one.
    """
    if guaranteed <= 0:
        return None
    if caps is None:
        caps = [other.cap(zeta) for other in queue]
    t = snap.now
    for other, cap in zip(queue, caps):
        spec = other.spec
        n = cap if cap < guaranteed else guaranteed  # min(cap, guaranteed, max_gpus) without a call per job
        if spec.max_gpus < n:
            n = spec.max_gpus
        if n < spec.min_gpus:
            return None
        t += other.remaining / (spec.speedup[n] / other.slowdown)
        if other is job:
            return t
    return None


class _QueueIndex:
    """Per-queue FIFO lists and summed demand, kept as jobs come and go, so a
    round costs O(queues x GPUs) instead of a rescan of every waiting job.
    ``entries`` mirrors ``queues`` with what the first FIFO pass needs
    (id, cap at zeta_min, min GPUs, rigid), precomputed once per job. ``versions`` counts each queue's
    changes of membership, and ``served`` keeps each queue's last allocation by its version and share
    (``WFQPolicy.served``); a copy (``over``) takes both, so an allocation it keeps is for its own jobs."""

    __slots__ = ("policy", "queues", "entries", "usable", "needs", "versions", "served")

    def __init__(self, policy: "WFQPolicy", jobs) -> None:
        self.policy = policy
        self.queues: list[list[JobState]] = [[] for _ in policy.weights]
        self.entries: list[list[tuple[int, int, int, bool]]] = [[] for _ in policy.weights]
        self.usable = [0] * len(policy.weights)
        # Per queue, how many jobs need how many free GPUs to be served by the first pass: a pass
        # left with fewer than the smallest need stops instead of walking a long queue of waiting jobs.
        self.needs: list[dict[int, int]] = [{} for _ in policy.weights]
        self.versions = [0] * len(policy.weights)
        self.served: list[tuple | None] = [None] * len(policy.weights)
        for job in jobs:
            self.add(job)

    def add(self, job: JobState) -> None:
        q = self.policy.queue_of(job)
        spec = job.spec
        entry = (spec.job_id, job.cap(self.policy.config.zeta_min), spec.min_gpus, spec.rigid)
        self.queues[q].append(job)
        self.entries[q].append(entry)
        self.usable[q] += spec.max_gpus
        need, counts = _need(entry), self.needs[q]
        counts[need] = counts.get(need, 0) + 1
        self.versions[q] += 1

    def over(self, jobs) -> _QueueIndex:
        """This index for other copies of the same jobs (``jobs``: id -> copy)."""
        other = _QueueIndex.__new__(_QueueIndex)
        other.policy = self.policy
        other.queues = [[jobs[job.spec.job_id] for job in queue] for queue in self.queues]
        other.entries = [list(entries) for entries in self.entries]
        other.usable = list(self.usable)
        other.needs = [dict(counts) for counts in self.needs]
        other.versions = list(self.versions)
        other.served = list(self.served)  # the same memberships: the same allocations (never changed once made)
        return other

    def remove(self, job: JobState) -> None:
        q = self.policy.queue_of(job)
        i = self.queues[q].index(job)  # FIFO: finished jobs are almost always near the head
        del self.queues[q][i]
        need, counts = _need(self.entries[q].pop(i)), self.needs[q]
        if counts[need] == 1:
            del counts[need]
        else:
            counts[need] -= 1
        self.usable[q] -= job.spec.max_gpus
        self.versions[q] += 1

    def least(self, q: int) -> int:
        """Fewest free GPUs with which the first pass can serve some job of queue ``q`` (at least 1)."""
        counts = self.needs[q]
        return min(counts) if counts else _NEVER


_NEVER = 1 << 62


def _need(entry: tuple[int, int, int, bool]) -> int:
    """Free GPUs the first pass needs to serve this entry (see ``WFQPolicy._first_pass``)."""
    _, cap, min_gpus, rigid = entry
    if cap < min_gpus:
        return _NEVER
    return max(1, cap if rigid else min_gpus)


class WFQPolicy(SchedulingPolicy):
    """PCS weighted fair queueing. Besides ``allocate``, its steps are public so that a forward play
    (``pcs_ray.forecast``) can redo only the queues an event touches with the very same arithmetic:
    ``weights`` (normalised, per queue), ``queue_of``, ``water_fill`` (the shares), ``first_pass_from``
    (a queue's FIFO pass at the zeta_min caps, resumable) and ``relax`` (a queue's leftover share)."""

    name = "pcs"
    reads_progress = False
    membership_only = True

    def __init__(self, config: WFQConfig | None = None) -> None:
        self.config = config or WFQConfig((math.inf,), (1.0,))
        self.weights = self.config.normalised_weights
        self._upper = list(self.config.thresholds)

    def queue_of(self, job: JobState) -> int:
        return bisect.bisect_left(self._upper, job.spec.service)

    def queue_form(self) -> "WFQPolicy":
        return self

    def make_index(self, jobs) -> _QueueIndex:
        return _QueueIndex(self, jobs)

    def fork_index(self, index, jobs) -> _QueueIndex:
        """The same queues over the fork's copies of the jobs, copied rather than built job by job again."""
        if not isinstance(index, _QueueIndex) or index.policy is not self:
            return self.make_index(jobs.values())
        return index.over(jobs)

    def _index(self, snap: Snapshot) -> _QueueIndex:
        index = snap.index
        if isinstance(index, _QueueIndex) and index.policy is self:
            return index
        return _QueueIndex(self, snap.jobs)

    def shares(self, queues: list[list[JobState]], usable: list[int], capacity: int) -> list[int]:
        """Split ``capacity`` GPUs among busy queues by weight, none above what it can use.

        Weighted water-filling: queues that cannot use their quota get all they
        can use and drop out; the others get the floor of their quota (so at
        least floor(G * w)); the few GPUs left go one at a time to the queue
        with the lowest (share + 1) / weight, ties to the queue whose head
        arrived first. With equal weights this is max-min fair share.
        """
        return self.water_fill(queues, usable, capacity)[0]

    def water_fill(self, queues, usable, capacity) -> tuple[list[int], list[int], int, float, int]:
        """``shares`` and how it ended (see :func:`~pcs_ray.policies.water_fill.water_fill`); single GPUs
        left go to the queue whose head came first."""
        wants = [usable[i] if q else 0 for i, q in enumerate(queues)]
        return water_fill(capacity, wants, self.weights,
                          rank=lambda i: (queues[i][0].spec.submit_time, queues[i][0].spec.job_id))

    def allocate(self, snap: Snapshot) -> Allocation:
        index = self._index(snap)
        queues = index.queues
        alloc: Allocation = {}
        for q, share in enumerate(self.shares(queues, index.usable, snap.capacity)):
            if share:
                part = self.served(index, q, share)
                if alloc:
                    alloc.update(part)
                else:
                    alloc = part.copy()  # a whole table copied at once, for the first queue served
        held = sum(alloc.values())
        # Every job holding its most (all the demand) leaves top_up nothing to give: skip its walk of every job.
        if held < snap.capacity and (snap.demand is None or held < snap.demand):
            return top_up((j for q in queues for j in q), alloc, snap.capacity)
        return alloc

    def served(self, index: _QueueIndex, q: int, share: int) -> Allocation:
        """Queue ``q``'s allocation of ``share`` GPUs: FIFO at the zeta_min caps, then its leftover relaxed. It
        reads nothing but the queue's jobs and the share, so a queue whose membership and share are those of
        its last round is given that round's allocation again, not walked (a round's event touches one queue).
        The caller copies it: it is kept."""
        key = (index.versions[q], share)
        last = index.served[q]
        if last is not None and last[0] == key:
            return last[1]
        part: Allocation = {}
        left = self._first_pass(index.entries[q], share, part, index.least(q))
        if left:
            self.relax(index.queues[q], left, part)
        index.served[q] = (key, part)
        return part

    @staticmethod
    def _first_pass(entries, left: int, alloc: Allocation, least: int = 1) -> int:
        """FIFO at the zeta_min caps (the hot path: one tight loop per queue). ``least``: no job of
        the queue can be served with fewer free GPUs (``_QueueIndex.least``), so the pass stops there."""
        if left < least:
            return left
        for jid, cap, min_gpus, rigid in entries:
            n = cap if cap < left else left
            if n < min_gpus or (rigid and n < cap):
                continue
            alloc[jid] = n
            left -= n
            if left < least:
                break
        return left

    @staticmethod
    def first_pass_from(entries, start: int, left: int, alloc: Allocation) -> tuple[int, int, int, int, int]:
        """``_first_pass`` resumed at position ``start`` with ``left`` GPUs (for a play that keeps
        the jobs ahead as they were). Also returns where it stopped, where it first passed a job
        over (-1: none), the GPUs left just before that job, and how many jobs it served before it:
        every one of those got its full cap, so a later pass with as many GPUs serves them alike."""
        skip_at = -1
        left_at = served = 0
        for i in range(start, len(entries)):
            jid, cap, min_gpus, rigid = entries[i]
            n = cap if cap < left else left
            if n < min_gpus or (rigid and n < cap):
                if skip_at < 0:
                    skip_at, left_at, served = i, left, len(alloc)
                continue
            alloc[jid] = n
            left -= n
            if not left:
                return 0, i, skip_at, left_at, served
        return left, len(entries), skip_at, left_at, served

    def relax(self, queue: list[JobState], left: int, alloc: Allocation) -> None:
        """Leftover share: relax zeta by delta (to 0 at most) and top up in FIFO order.

        A job that holds its ``max_gpus`` takes nothing more at any zeta (a cap never exceeds it), so
        each round walks only the jobs the rounds before left short of it: a drained queue's jobs mostly
        hold all they can use, and forward plays relax such a queue at every event."""
        zeta, delta = self.config.zeta_min, self.config.delta
        todo = queue
        while left > 0 and zeta > 0:
            zeta = max(0.0, zeta - delta) if delta > 0 else 0.0
            short = []
            for job in todo:
                spec = job.spec
                jid, most = spec.job_id, spec.max_gpus
                have = alloc.get(jid, 0)
                if have >= most:
                    continue
                extra = (job.cap(zeta) if zeta > 0 else most) - have
                if extra > left:
                    extra = left
                if extra > 0 and have + extra >= spec.min_gpus and not (spec.rigid and have + extra < most):
                    have += extra
                    alloc[jid] = have
                    left -= extra
                    if not left:
                        return
                if have < most:
                    short.append(job)
            todo = short

    def completion_bound(self, snap: Snapshot, job: JobState) -> float | None:
        q = self.queue_of(job)
        guaranteed = math.floor(snap.capacity * self.weights[q] + 1e-9)
        index = self._index(snap)
        caps = map(itemgetter(1), index.entries[q])  # the index's caps are at zeta_min, as asked here
        return fifo_queue_bound(snap, index.queues[q], job, guaranteed, self.config.zeta_min, caps)

    def bound_reads(self, snap: Snapshot, job: JobState) -> list[JobState]:
        """The bound reads the job's own queue alone."""
        return self._index(snap).queues[self.queue_of(job)]

    def why_waiting(self, snap: Snapshot, alloc: Allocation) -> dict[int, WaitReason]:
        """Its place among the queue's waiting jobs, and the GPUs the queue holds of its weighted share."""
        return self._reasons(self._index(snap).queues, alloc, snap.capacity)

    def why_waiting_later(self, snap: Snapshot, alloc: Allocation) -> Callable[..., dict[int, WaitReason]]:
        """The queues' order and the allocation are taken now (a list per queue); the reasons are written later."""
        if type(self).why_waiting is not WFQPolicy.why_waiting:  # a subclass with reasons of its own
            return super().why_waiting_later(snap, alloc)
        queues, alloc, capacity = [list(q) for q in self._index(snap).queues], dict(alloc), snap.capacity
        return lambda pause=None: self._reasons(queues, alloc, capacity, pause)

    def _reasons(self, queues: list[list[JobState]], alloc: Allocation, capacity: int,
                 pause: Callable[[], None] | None = None) -> dict[int, WaitReason]:
        out = {}
        for q, queue in enumerate(queues):
            held = sum(alloc.get(j.spec.job_id, 0) for j in queue)
            place = 0
            for job in queue:
                if alloc.get(job.spec.job_id):
                    continue
                place += 1
                if pause is not None and place % 1000 == 1:
                    pause()
                out[job.spec.job_id] = self._queue_reason(q, place, held, capacity, job)
        return out

    def waiting_codes(self, snap: Snapshot, alloc: Allocation) -> dict[int, WaitCode]:
        """Every job of a queue that ``alloc`` gives nothing waits in its queue (``why_waiting``, without
        a text per waiting job)."""
        if type(self).why_waiting is not WFQPolicy.why_waiting:  # a subclass with reasons of its own
            return super().waiting_codes(snap, alloc)
        queue = WaitCode.QUEUE
        return {j.spec.job_id: queue for jobs in self._index(snap).queues for j in jobs if not alloc.get(j.spec.job_id)}

    def why_job_waits(self, snap: Snapshot, alloc: Allocation, job: JobState) -> WaitReason | None:
        """``why_waiting``'s reason for ``job`` alone: GPUs held are summed over the allocation (a few
        hundred jobs at most), and only the jobs ahead of it in its queue are walked."""
        jid = job.spec.job_id
        if alloc.get(jid):
            return None
        index = self._index(snap)
        q = self.queue_of(job)
        queue, entries = index.queues[q], index.entries[q]
        by_id = getattr(snap.jobs, "mapping", None)
        if by_id is None:
            held = sum(alloc.get(j.spec.job_id, 0) for j in queue)
        else:
            queue_of = self.queue_of
            held = sum(n for j, n in alloc.items() if j in by_id and queue_of(by_id[j]) == q)
        at = queue.index(job)
        place = 1 + sum(1 for entry in entries[:at] if not alloc.get(entry[0]))
        return self._queue_reason(q, place, held, snap.capacity, job)

    def _queue_reason(self, q: int, place: int, held: int, capacity: int, job: JobState) -> WaitReason:
        return WaitReason(WaitCode.QUEUE, f"waiting #{place} in WFQ queue {q} (weight {self.weights[q]:.2f}), which "
                                          f"holds {held} of {capacity} GPUs; it needs {job.spec.min_gpus}")

    def describe(self) -> dict:
        return {"policy": self.name, **self.config.to_dict()}
