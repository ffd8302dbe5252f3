"""Event-driven, continuous-time simulation of a GPU cluster under one policy.

Events are arrivals, completions and policy reviews (lease expiries,
priority demotions). Between events every allocation is constant, so a
running app's finish time is known exactly and progress is computed, not
stepped. The same ``Engine`` plays the cluster forward for predictions
(PCS §4): a fork of the live state with no future arrivals.
"""

from __future__ import annotations

import heapq
import math
import multiprocessing
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pcs_ray.forecast.chain import PlayChain
from pcs_ray.forecast.queue_play import QueuePlay, plays_itself, queue_play
from pcs_ray.job import JobSpec
from pcs_ray.moves import charged_stall, finish_time, service_left
from pcs_ray.policies.base import SchedulingPolicy, validate_allocation
from pcs_ray.semantics import round_boundary
from pcs_ray.state import JobState, Snapshot

INF = math.inf


@dataclass(slots=True)
class JobRecord:
    """Outcome of one app: times are absolute seconds, predictions are finish times."""

    job_id: int
    submit: float
    service: float
    max_gpus: int
    min_runtime: float
    start: float | None = None
    finish: float | None = None
    first_pred: float | None = None
    last_pred: float | None = None
    refreshes: int = 0
    bound: float | None = None
    preemptions: int = 0
    avg_active: float | None = None  # mean number of active apps over its life (for fair JCT)
    fair_jct: float | None = None

    @property
    def jct(self) -> float:
        return self.finish - self.submit


@dataclass
class SimResult:
    policy: dict
    capacity: int
    records: list[JobRecord]
    utilization_timeline: list[tuple[float, int]]  # (time, GPUs busy from then on)
    events: int
    predictions: int
    wall_s: float = 0.0
    extra: dict = field(default_factory=dict)


class Engine:
    """State of one simulated cluster and the loop that advances it.

    ``placement`` (optional) maps the policy's counts to GPU ids and sets each
    job's ``slowdown``; without it every GPU is equal and jobs never pay a
    locality penalty (the PCS setting).
    """

    def __init__(
        self,
        capacity: int,
        policy: SchedulingPolicy,
        *,
        overhead: float = 0.0,
        placement=None,
        check: bool = True,
        incremental: bool = True,
    ) -> None:
        if capacity <= 0:
            raise ValueError(f"the cluster needs at least one GPU, got {capacity}")
        if overhead < 0:
            raise ValueError(f"preemption overhead must be >= 0 seconds, got {overhead}")
        self.capacity = capacity
        self.policy = policy
        self.overhead = overhead
        self.placement = placement
        self.check = check
        self.incremental = incremental  # False: every prediction replays a full fork (the reference path)
        self.now = 0.0
        self.active: dict[int, JobState] = {}  # arrival order
        self.running: dict[int, JobState] = {}
        self.eta: dict[int, float] = {}  # running job -> finish time under the current allocation
        self.eta_heap: list[tuple[float, int]] = []  # lazily pruned: entries not matching ``eta`` are stale
        self.prev_alloc: dict[int, int] = {}
        self.index = policy.make_index(())
        self.review_at: float | None = None
        self.busy = 0
        self.demand = 0  # sum of max_gpus over active jobs
        self.area = 0.0  # integral of the number of active apps over time
        self.events = 0
        # Event-averaged contention, as the PCS artifact counts it (Themis's fair share): every
        # arrival, completion and policy review adds the number of apps active before it.
        self.seen_total = 0.0
        self.seen_events = 0
        self._eventful = False  # an arrival or completion since the last reallocate

    # -- state -------------------------------------------------------------
    def fork(self, *, placement: bool = True) -> "Engine":
        """An independent copy for playing forward; the original is untouched (its policy too:
        the copy decides with ``policy.fork()``, the policy itself when it keeps no state).

        ``placement=False`` leaves placement out of the copy: counts alone decide (for a caller
        that knows every GPU set runs every job at the same rate).
        """
        other = Engine.__new__(Engine)
        other.capacity, other.policy, other.overhead = self.capacity, self.policy.fork(), self.overhead
        other.placement = self.placement.fork() if placement and self.placement is not None else None
        other.check = False
        other.incremental = self.incremental
        other.now, other.review_at, other.busy, other.demand, other.area, other.events = (
            self.now, self.review_at, self.busy, self.demand, self.area, 0,
        )
        other.seen_total, other.seen_events, other._eventful = self.seen_total, self.seen_events, self._eventful
        other.active = {jid: j.clone() for jid, j in self.active.items()}
        other.running = {jid: other.active[jid] for jid in self.running}
        other.eta = dict(self.eta)
        other.eta_heap = list(self.eta_heap)
        other.prev_alloc = self.prev_alloc
        other.index = other.policy.make_index(other.active.values())
        return other

    def admit(self, spec: JobSpec) -> JobState:
        job = JobState.new(spec, self.now)
        self._count_event()
        self.active[spec.job_id] = job
        # The arriving app starts having seen the apps now active, itself included.
        job.seen_total = len(self.active) - self.seen_total
        job.seen_events = 1 - self.seen_events
        self.demand += spec.max_gpus
        if self.index is not None:
            self.index.add(job)
        return job

    # -- for a live caller (the coordinator keeps its model true with these) -----
    def job(self, job_id: int) -> JobState | None:
        """The active job's state, or None."""
        return self.active.get(job_id)

    def running_ids(self) -> list[int]:
        """Jobs that hold GPUs now."""
        return list(self.running)

    def review_time(self) -> float | None:
        """When the policy asked to decide again even if nothing happens (a lease expiry); None: only on events."""
        return self.review_at

    def readmit(self, spec: JobSpec) -> JobState:
        """Replace an active job by ``spec`` (a new size), forgetting its allocation so that the
        next ``reallocate`` places it afresh (else the same id's count could look unchanged)."""
        self.remove([self.active[spec.job_id]])
        self.prev_alloc.pop(spec.job_id, None)
        return self.admit(spec)

    def set_policy(self, policy: SchedulingPolicy) -> None:
        """Decide with ``policy`` from the next ``reallocate`` on; allocations stand until then."""
        self.policy = policy
        self.index = policy.make_index(self.active.values())
        self.review_at = None

    def set_clock(self, now: float) -> None:
        """Move the clock to ``now`` without processing events (the caller reports them)."""
        if now > self.now:
            self.area += (now - self.now) * len(self.active)
            self.now = now

    def set_remaining(self, job_id: int, remaining: float, stall_until: float = 0.0) -> None:
        """Overwrite a job's remaining service (GPU-seconds at one nominal GPU) as of now,
        e.g. from a runner's measured progress; its finish time follows."""
        job = self.active[job_id]
        job.remaining = max(remaining, 1e-9)
        job.anchor = self.now
        job.stall_until = stall_until
        if job.alloc:
            end = finish_time(self.now, stall_until, job.remaining, job.rate())
            self.eta[job_id] = end
            heapq.heappush(self.eta_heap, (end, job_id))
            if len(self.eta_heap) > 4 * len(self.eta) + 64:  # drop stale entries now and then
                self.eta_heap = [(t, j) for j, t in self.eta.items()]
                heapq.heapify(self.eta_heap)

    def set_costs(self, job_id: int, start_cost: float, move_cost: float | None) -> None:
        """What the job's next first start and later moves cost (seconds before it progresses); used
        from its next allocation change on."""
        job = self.active[job_id]
        job.start_cost, job.move_cost = start_cost, move_cost

    def _count_event(self) -> None:
        self.seen_total += len(self.active)
        self.seen_events += 1
        self._eventful = True

    def snapshot(self) -> Snapshot:
        # A live view, not a copy: a snapshot is only valid for the round it is made in.
        return Snapshot(self.now, self.capacity, self.active.values(), self.index, self.demand,
                        self.seen_total, self.seen_events)

    def next_completion(self) -> float:
        heap, eta = self.eta_heap, self.eta
        while heap and eta.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else INF

    def next_event(self, next_arrival: float = INF) -> float:
        """The earliest of the next arrival, completion and policy review (in rounds: the
        round boundary at or after it, ``SchedulingPolicy.round_s``)."""
        t = self.next_completion()
        if self.policy.round_s:
            return self._next_boundary(t, next_arrival, self.policy.round_s)
        if next_arrival < t:
            t = next_arrival
        review = self.review_at
        if review is not None and review < t:
            t = review if review > self.now else self.now
        if t == INF:
            raise RuntimeError(f"{self.policy.name}: active jobs can never finish (no GPU is allocated)")
        return t

    def _next_boundary(self, completion: float, arrival: float, length: float) -> float:
        """Rounds (Blox): events wait for the next boundary; a completion a float rounding past one
        is due at it (``advance`` pops it there with the same tolerance)."""
        t = min(round_boundary(completion, length, slack=True), round_boundary(arrival, length))
        review = self.review_at
        if review is not None:
            at = round_boundary(review, length)
            t = min(t, at if at > self.now else self.now)
        if t == INF:
            raise RuntimeError(f"{self.policy.name}: active jobs can never finish (no GPU is allocated)")
        return t

    # -- the loop ------------------------------------------------------------
    def advance(self, t: float) -> list[JobState]:
        """Move time to ``t`` (no later than the next completion); return jobs that finish at ``t``.

        Progress is settled lazily (``settle``): between events nothing but the
        clock moves, so an event costs O(jobs that change), not O(running jobs).
        """
        dt = t - self.now
        if dt < 0:
            raise RuntimeError(f"time went backwards: {self.now} -> {t}")
        self.area += dt * len(self.active)
        quantum = self.policy.quantum
        if quantum is not None and self.review_at is None and dt > quantum:
            # Reviews the policy skipped because none could change anything still count as events.
            skipped = math.ceil(dt / quantum) - 1
            self.seen_total += skipped * len(self.active)
            self.seen_events += skipped
        self.now = t
        lim = t + 1e-9 * max(1.0, abs(t))
        done = []
        heap, eta = self.eta_heap, self.eta
        while heap and heap[0][0] <= lim:
            end, jid = heapq.heappop(heap)
            if eta.get(jid) == end:
                job = self.running[jid]
                self.settle(job)
                job.remaining = 0.0
                del eta[jid]  # a job re-pushed with the same ETA leaves a duplicate entry behind
                done.append(job)
        return done

    def settle(self, job: JobState) -> None:
        """Bring ``remaining`` and ``attained`` of ``job`` up to ``now``."""
        now = self.now
        dt = now - job.anchor
        if dt > 0 and job.alloc:
            job.attained += job.alloc * dt
            job.remaining = service_left(job.rate(), self.eta[job.spec.job_id], now, job.stall_until)
        job.anchor = now

    def settle_all(self) -> None:
        for job in self.running.values():
            self.settle(job)

    def remove(self, finished: list[JobState]) -> None:
        for job in finished:
            jid = job.spec.job_id
            self._count_event()
            self.busy -= job.alloc
            self.demand -= job.spec.max_gpus
            self.eta.pop(jid, None)
            self.running.pop(jid, None)
            del self.active[jid]
            if self.index is not None:
                self.index.remove(job)
            if self.placement is not None:
                self.placement.release(job)
            job.alloc = 0

    def reallocate(self) -> None:
        # A non-sticky placement may move (and so re-rate) any running job, which must be
        # settled at its old rate first; a sticky one only places jobs whose count changed,
        # and those are settled in _apply.
        policy = self.policy
        if policy.reads_progress or (self.placement is not None and not getattr(self.placement, "sticky", False)):
            self.settle_all()
        if not self._eventful:  # a review: no arrival or completion since the last round
            self._count_event()
        self._eventful = False
        snap = self.snapshot()
        alloc = policy.allocate(snap)
        if self.check:
            validate_allocation(snap, alloc, policy.name)
        prev = self.prev_alloc
        self.prev_alloc = alloc
        # A non-sticky placement may move jobs even when no count changed.
        if alloc != prev or self.placement is not None:
            self._apply(alloc, prev)
        self.review_at = policy.next_review(snap, alloc)
        self.events += 1

    def _apply(self, alloc: dict[int, int], prev: dict[int, int]) -> None:
        """Give every job its new count (and GPUs), settling it at its old rate first; new ETAs."""
        now, overhead = self.now, self.overhead
        active, running, eta, heap = self.active, self.running, self.eta, self.eta_heap
        get = prev.get  # bound once: this diff runs over every allocated job in every round
        moved = [jid for jid, n in alloc.items() if get(jid) != n]
        moved += [jid for jid in prev if jid not in alloc and jid in active]  # finished jobs are gone
        changed: list[JobState] = []
        for jid in moved:
            job = active[jid]
            n = alloc.get(jid, 0)
            if job.anchor != now:  # policies that read progress had every running job settled already
                self.settle(job)
            if job.alloc and not n:
                job.preemptions += 1
            if n:
                started = job.start_time is not None
                job.stall_until = charged_stall(now, job.stall_until, started, job.start_cost, job.move_cost, overhead)
                if not started:
                    job.start_time = now
            self.busy += n - job.alloc
            job.alloc = n
            job.since = now
            if n:
                running[jid] = job
            else:
                del running[jid]
            changed.append(job)
        if self.placement is not None:
            # The placement sees the whole allocation in policy order and may move jobs whose
            # count did not change (non-sticky); such a move costs a checkpoint + restore.
            counted = {job.spec.job_id for job in changed}
            changed = self.placement.place(self.snapshot(), changed, alloc)
            for job in changed:
                if job.alloc and job.spec.job_id not in counted:
                    job.stall_until = charged_stall(now, job.stall_until, True, job.start_cost, job.move_cost, overhead)
        for job in changed:
            jid = job.spec.job_id
            if job.alloc:
                end = eta[jid] = finish_time(now, job.stall_until, job.remaining, job.rate())
                heapq.heappush(heap, (end, jid))
            else:
                eta.pop(jid, None)

    def play_ahead(self, *, placement: bool = True, until: int | None = None) -> dict[int, float]:
        """Finish time of every active job if nothing else arrives; this engine is left untouched.

        For a policy with a queue form (FIFO, WFQ) and no placement in the play, the incremental
        play gives, bit for bit, what ``fork(placement=placement).play_forward()`` gives.
        ``until``: stop once that job's finish is known (see ``play_forward``).
        """
        placing = self.placement if placement else None
        form = self._queue_form(placing)
        if form is not None:
            finish = queue_play(self, form, until, placing)
            if finish is not None:
                return finish
        return self.fork(placement=placement).play_forward(until)

    def _queue_form(self, placing):
        """The policy's queue form where a queue play can stand in for a fork's play (with ``placing``,
        the placement that plays along, or None), else None."""
        if not self.incremental or self.review_at is not None or self.policy.round_s:
            return None
        if placing is not None and not plays_itself(placing):
            return None
        return self.policy.fork().queue_form()  # the play's own policy state, as a fork's

    def play_detached(self, *, placement: bool = True) -> QueuePlay | None:
        """``play_ahead`` as a play that needs nothing of this engine once made: the queue play copies
        the state it starts from (a sticky placement is forked), so a live caller can step or run it
        without holding its lock while the engine moves on (``QueuePlay.run``, ``between=``). None where
        only a fork of the engine can play (its policy object would then run in two threads at once)."""
        placing = self.placement if placement else None
        form = self._queue_form(placing)
        return None if form is None else QueuePlay.start(self, form, placement=placing)

    def play_forward(self, until: int | None = None) -> dict[int, float]:
        """Finish time of every active job if nothing else arrives (the prediction).

        ``until``: stop as soon as that job's finish is known, returning it and the finishes
        known by then (each the very number the whole play gives: a play never revises one).
        A new job's forecast then costs the events up to its own finish, not the whole queue's.
        """
        finish: dict[int, float] = {}
        while self.active:
            if self.review_at is None and self.busy == self.demand:
                # Every job holds all it can use and nothing is due: no work-
                # conserving policy changes anything now, so the ETAs are final.
                length = self.policy.round_s  # in rounds a finish is recorded at the next boundary
                ends = {j: round_boundary(t, length, slack=True) for j, t in self.eta.items()} if length else self.eta
                finish.update(ends)
                self.now = max(ends.values(), default=self.now)
                self.active.clear()
                break
            t = self.next_event()
            done = self.advance(t)
            if done:  # most rounds of a leased policy are reviews: nothing to remove
                for job in done:
                    finish[job.spec.job_id] = t
                self.remove(done)
                if not self.active or until in finish:
                    break
            self.reallocate()
        return finish


def simulate(
    jobs: Sequence[JobSpec],
    capacity: int,
    policy: SchedulingPolicy,
    *,
    predict: bool = True,
    overhead: float = 0.0,
    placement=None,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 1,
    energy=None,
    incremental: bool = True,
    observers: Sequence = (),
) -> SimResult:
    """Replay ``jobs`` through ``policy`` on ``capacity`` GPUs.

    With ``predict``, every arrival plays the current state forward (same
    policy, no future arrivals) and refreshes every active job's predicted
    finish; predictions run on a fork and never change the schedule.

    ``workers > 1`` spreads the forward plays over that many processes. Each
    process replays the whole (cheap, deterministic) schedule itself and plays
    forward only every ``workers``-th arrival, so nothing but the forecasts
    crosses a process boundary and the result is identical to ``workers=1``.
    Progress is then reported only at the end.

    ``energy`` (a ``pcs_ray.power.meter.EnergyMeter``) integrates system power
    over the schedule; its summary lands in ``result.extra["energy"]``.

    ``observers``: objects whose ``observe(t, running_jobs)`` sees the allocation after every decision
    (as ``energy`` does), e.g. a per-tenant ledger of GPUs held.

    ``incremental=False`` plays every forecast on a full fork (the reference the incremental
    plays are tested against); forecasts are the same either way.
    """
    started = time.perf_counter()
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    arrivals = sorted(jobs, key=lambda j: (j.submit_time, j.job_id))
    ids = [j.job_id for j in arrivals]
    if len(set(ids)) != len(ids):
        raise ValueError("job ids must be unique")
    for spec in arrivals:
        if spec.min_gpus > capacity:
            raise ValueError(f"job {spec.job_id} needs at least {spec.min_gpus} GPUs; the cluster has {capacity}")
    workers = min(workers, len(arrivals)) if predict else 1
    if workers > 1 and (energy is not None or observers):
        raise ValueError("energy accounting and observers run in one process: use workers=1")
    if workers > 1:
        result = _simulate_parallel(arrivals, capacity, policy, overhead, placement, workers, incremental)
        if progress is not None:
            progress(len(arrivals), len(arrivals))
    else:
        meters = [m for m in (energy, *observers) if m is not None]
        result, forecasts = _replay(arrivals, capacity, policy, overhead, placement, (0, 1) if predict else None, progress,
                                    meters, incremental)
        _apply_forecasts(result, forecasts)
        if energy is not None:
            result.extra["energy"] = energy.summary(len(arrivals))
    result.wall_s = time.perf_counter() - started
    return result


def _replay(
    arrivals: list[JobSpec],
    capacity: int,
    policy: SchedulingPolicy,
    overhead: float,
    placement,
    plays: tuple[int, int] | None,
    progress: Callable[[int, int], None] | None = None,
    meters: Sequence = (),
    incremental: bool = True,
) -> tuple[SimResult, list[dict[int, float]]]:
    """The schedule itself; forward plays for arrivals ``k`` with ``k % n == r`` where ``plays == (r, n)``.

    Returns the result and the forecasts in arrival order; with ``plays == (0, 1)`` they are already folded
    into the records (the list comes back empty).
    """
    engine = Engine(capacity, policy, overhead=overhead, placement=placement, incremental=incremental)
    records = {
        s.job_id: JobRecord(s.job_id, s.submit_time, s.service, s.max_gpus, s.min_runtime) for s in arrivals
    }
    area_at_submit: dict[int, float] = {}
    timeline: list[tuple[float, int]] = []
    # Serially every play is folded into the records as it completes; shares of a parallel run return theirs.
    forecasts = _Folded(records) if plays == (0, 1) else []
    i, total = 0, len(arrivals)
    finished = 0
    # Successive plays share their past where the policy allows it (every arrival played, in one process).
    form = policy.queue_form()
    chain = (
        PlayChain(form) if incremental and placement is None and plays == (0, 1) and form is not None
        and not policy.round_s else None
    )
    while i < total or engine.active:
        t = engine.next_event(arrivals[i].submit_time if i < total else INF)
        done = engine.advance(t)
        for job in done:
            rec = records[job.spec.job_id]
            rec.finish = t
            rec.start = job.start_time
            rec.preemptions = job.preemptions
            life = t - rec.submit
            rec.avg_active = (engine.area - area_at_submit.pop(job.spec.job_id)) / life if life > 0 else 1.0
        engine.remove(done)
        finished += len(done)
        arrived = []  # (arrival index, job)
        before = engine.prev_alloc
        while i < total and arrivals[i].submit_time <= t:
            job = engine.admit(arrivals[i])
            area_at_submit[job.spec.job_id] = engine.area
            arrived.append((i, job))
            i += 1
            if not policy.round_s:
                # One submission at a time, as users submit: simultaneous arrivals each get their
                # own prediction, made before the next one lands. In rounds (Blox) every arrival
                # of the round is admitted before the one decision, and they share a forecast.
                break
        engine.reallocate()
        for meter in meters:
            meter.observe(t, engine.running.values())
        if not timeline or timeline[-1][1] != engine.busy:
            timeline.append((t, engine.busy))
        if arrived and plays is not None:
            engine.settle_all()
            forecast = None
            for k, job in arrived:
                records[job.spec.job_id].bound = policy.completion_bound(engine.snapshot(), job)
                if chain is not None:
                    chain.play(engine, job, not done and engine.prev_alloc == before, forecasts)
                elif k % plays[1] == plays[0]:
                    if forecast is None:
                        forecast = engine.play_ahead()
                    forecasts.append(forecast)
        if progress is not None and (done or arrived):
            progress(finished, total)
    if chain is not None:
        chain.finish(forecasts)
    result = SimResult(
        policy=policy.describe(),
        capacity=capacity,
        records=[records[s.job_id] for s in arrivals],
        utilization_timeline=timeline,
        events=engine.events,
        predictions=len(forecasts) if isinstance(forecasts, _Folded) else 0,
    )
    return result, forecasts if isinstance(forecasts, list) else []


def _apply_forecasts(result: SimResult, forecasts: list[dict[int, float]]) -> None:
    """Fold the forecasts, in arrival order, into each job's first/last prediction and refresh count."""
    records = {rec.job_id: rec for rec in result.records}
    for forecast in forecasts:
        _fold(records, forecast)
    result.predictions += len(forecasts)


def _fold(records: dict[int, JobRecord], forecast: dict[int, float]) -> None:
    for jid, when in forecast.items():
        rec = records[jid]
        if rec.first_pred is None:
            rec.first_pred = when
        elif abs(when - rec.last_pred) > 1e-6 * max(1.0, when):
            rec.refreshes += 1
        rec.last_pred = when


class _Folded:
    """The serial run's forecasts, folded into the records as soon as every earlier one is known
    (a play in a chain completes later than it is listed), so that a long trace never holds them
    all: 6214e9 makes 51,258 plays of up to thousands of jobs each."""

    def __init__(self, records: dict[int, JobRecord]) -> None:
        self.records, self.count, self.next = records, 0, 0
        self.pending: dict[int, dict[int, float]] = {}

    def __len__(self) -> int:
        return self.count

    def append(self, forecast: dict[int, float] | None) -> None:
        self.count += 1
        self[self.count - 1] = forecast

    def __setitem__(self, k: int, forecast: dict[int, float] | None) -> None:
        if forecast is None:  # a place kept for a play still under way
            return
        self.pending[k % self.count] = forecast
        while self.next in self.pending:
            _fold(self.records, self.pending.pop(self.next))
            self.next += 1


def _replay_share(args) -> tuple[SimResult | None, list[dict[int, float]]]:
    arrivals, capacity, policy, overhead, placement, plays, incremental = args
    result, forecasts = _replay(arrivals, capacity, policy, overhead, placement, plays, None, (), incremental)
    return (result if plays[0] == 0 else None), forecasts


def _start_method() -> str:
    """fork when this process has a single thread (starts in milliseconds instead of re-importing
    everything); spawn otherwise, since fork would copy other threads' locks (Ray, a progress bar) mid-state."""
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return "fork"
    return "spawn"


def _simulate_parallel(arrivals, capacity, policy, overhead, placement, workers: int, incremental: bool) -> SimResult:
    ctx = multiprocessing.get_context(_start_method())
    tasks = [(arrivals, capacity, policy, overhead, placement, (r, workers), incremental) for r in range(workers)]
    # This process takes share 0 itself while the others run: one process fewer to start and
    # no result to ship back for the share that carries the schedule.
    with ProcessPoolExecutor(max_workers=workers - 1, mp_context=ctx) as pool:
        others = [pool.submit(_replay_share, task) for task in tasks[1:]]
        shares = [_replay_share(tasks[0])] + [f.result() for f in others]
    result = shares[0][0]
    # Process r played arrivals r, r + workers, ...: arrival k is its (k // workers)-th forecast.
    total = sum(len(forecasts) for _, forecasts in shares)
    _apply_forecasts(result, [shares[k % workers][1][k // workers] for k in range(total)])
    return result
