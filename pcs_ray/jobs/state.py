"""Mutable per-job state and the read-only snapshot a policy decides on.

The simulator and the live coordinator both keep a ``JobState`` per active
job and hand policies a ``Snapshot``. Policies must treat it as read-only:
the caller validates what they return and never lets them mutate state.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from pcs_ray.jobs.spec import JobSpec


@dataclass(slots=True, eq=False)  # identity semantics: two jobs are never "equal"
class JobState:
    """Progress of one job. ``remaining`` is in GPU-seconds at one GPU."""

    spec: JobSpec
    remaining: float
    attained: float = 0.0  # GPU-seconds held so far
    alloc: int = 0
    gpus: tuple[int, ...] = ()
    start_time: float | None = None
    stall_until: float = 0.0  # no progress before this time (checkpoint/restore)
    slowdown: float = 1.0  # placement-induced: slowest GPU x locality x topology
    preemptions: int = 0
    anchor: float = 0.0  # remaining/attained are exact as of this time (settled lazily)
    start_cost: float = 0.0  # see JobSpec; the live coordinator updates them as it learns
    move_cost: float | None = None
    # Offsets against the engine's running event counts (``Snapshot.seen_total``/``seen_events``):
    # the average number of active jobs this job has seen is (seen_total + S) / (seen_events + E).
    seen_total: float = 0.0
    seen_events: int = 0
    since: float = 0.0  # when its current GPU count began (how old its run is)
    _caps: dict[float, int] = field(default_factory=dict, repr=False)
    fair_memo: dict[float, float] = field(default_factory=dict, repr=False)

    @classmethod
    def new(cls, spec: JobSpec, now: float = 0.0) -> "JobState":
        return cls(spec=spec, remaining=spec.service, anchor=now, start_cost=spec.start_cost, move_cost=spec.move_cost)

    @property
    def job_id(self) -> int:
        return self.spec.job_id

    def rate(self, n: int | None = None) -> float:
        """Progress in 1-GPU-seconds per second on ``n`` GPUs (default: current)."""
        n = self.alloc if n is None else n
        return self.spec.speedup[n] / self.slowdown

    def remaining_time(self) -> float:
        """Time to finish at the job's best allocation (SRTF's key)."""
        return self.remaining / self.spec.speedup[self.spec.max_gpus]

    def cap(self, zeta: float) -> int:
        """``JobSpec.efficiency_cap`` memoised: WFQ asks for it every round."""
        c = self._caps.get(zeta)
        if c is None:
            c = self._caps[zeta] = self.spec.efficiency_cap(zeta)
        return c

    def clone(self) -> "JobState":
        return JobState(
            self.spec, self.remaining, self.attained, self.alloc, self.gpus, self.start_time,
            self.stall_until, self.slowdown, self.preemptions, self.anchor, self.start_cost, self.move_cost,
            self.seen_total, self.seen_events, self.since,
            self._caps, self.fair_memo,
        )


@dataclass(slots=True)  # not frozen: a frozen init costs 4x, and one is made every round
class Snapshot:
    """What a scheduling policy sees: time, capacity and the active jobs in arrival order.

    ``index`` is the policy's own incrementally kept view of the same jobs
    (see ``SchedulingPolicy.make_index``), or None.
    """

    now: float
    capacity: int
    jobs: Collection[JobState]  # iterate only; may be a live view valid for this round
    index: object = None
    demand: int | None = None  # sum of max_gpus over ``jobs``, when the caller keeps it
    # Running sums over events (arrivals, completions, reviews) of the number of jobs active
    # before each, and the event count; 0 events: the caller does not keep them.
    seen_total: float = 0.0
    seen_events: int = 0

    def contention(self, job: JobState) -> float:
        """Average number of active jobs ``job`` has seen, per event (the PCS artifact's measure);
        the current number when the caller keeps no counts."""
        if not self.seen_events:
            return float(len(self.jobs))
        return (job.seen_total + self.seen_total) / (job.seen_events + self.seen_events)
