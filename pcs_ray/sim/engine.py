"""Event-driven, continuous-time simulation of a GPU cluster under one policy.

Events are arrivals, completions and policy reviews (lease expiries,
priority demotions). Between events every allocation is constant, so a
running job's finish time is known exactly and progress is computed, not
stepped. The same ``Engine`` plays the cluster forward for predictions
(PCS §4): a fork of the live state with no future arrivals.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from pcs_ray.forecast.queue_play import QueuePlay, plays_itself, queue_play
from pcs_ray.forecast.result import Forecast
from pcs_ray.jobs.spec import JobSpec
from pcs_ray.jobs.moves import charged_stall, finish_time, service_left
from pcs_ray.policies.base import SchedulingPolicy, validate_changes
from pcs_ray.sim.semantics import round_boundary
from pcs_ray.jobs.state import JobState, Snapshot

INF = math.inf


@dataclass(slots=True)
class JobRecord:
    """Outcome of one job: times are absolute seconds, predictions are finish times."""

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
    avg_active: float | None = None  # mean number of active jobs over its life (for fair JCT)
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
        self.area = 0.0  # integral of the number of active jobs over time
        self.events = 0
        # Event-averaged contention, as the PCS artifact counts it (Themis's fair share): every
        # arrival, completion and policy review adds the number of jobs active before it.
        self.seen_total = 0.0
        self.seen_events = 0
        self._eventful = False  # an arrival or completion since the last reallocate
        # Jobs whose finish changed since the last final forecast ``final_changes`` gave; None: not kept.
        self._finish_changes: set[int] | None = None
        self._left: list[int] = []  # jobs removed since the last round, while allocations are checked

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
        other._finish_changes = None
        other._left = []
        other.active = {jid: j.clone() for jid, j in self.active.items()}
        other.running = {jid: other.active[jid] for jid in self.running}
        other.eta = dict(self.eta)
        other.eta_heap = list(self.eta_heap)
        other.prev_alloc = self.prev_alloc
        other.index = other.policy.fork_index(self.index, other.active)
        return other

    def admit(self, spec: JobSpec) -> JobState:
        job = JobState.new(spec, self.now)
        self._count_event()
        self.active[spec.job_id] = job
        # The arriving job starts having seen the jobs now active, itself included.
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
            if self._finish_changes is not None:
                self._finish_changes.add(job_id)
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
        """Bring ``remaining`` and ``attained`` of ``job`` up to ``now`` (one without GPUs only moves its anchor)."""
        if job.alloc:
            self.settle_each((job,))
        else:
            job.anchor = self.now

    def settle_all(self) -> None:
        self.settle_each(self.running.values())

    def settle_each(self, jobs) -> None:
        """Bring ``remaining`` and ``attained`` of those of ``jobs`` that hold GPUs up to ``now`` (others make no
        progress), in one loop: an arrival's completion bound settles its whole queue."""
        now, eta = self.now, self.eta
        for job in jobs:
            n = job.alloc
            if n:
                dt = now - job.anchor
                if dt > 0:
                    job.attained += n * dt
                    job.remaining = service_left(job.spec.speedup[n] / job.slowdown, eta[job.spec.job_id], now,
                                                 job.stall_until)
                job.anchor = now

    def remove(self, finished: list[JobState]) -> None:
        for job in finished:
            jid = job.spec.job_id
            self._count_event()
            self.busy -= job.alloc
            self.demand -= job.spec.max_gpus
            self.eta.pop(jid, None)
            self.running.pop(jid, None)
            del self.active[jid]
            if self.check:
                self._left.append(jid)
            if self.index is not None:
                self.index.remove(job)
            if self.placement is not None:
                self.placement.release(job)
            job.alloc = 0

    def reallocate(self) -> None:
        # A job whose count changes is settled at its old rate in _apply; one that a non-sticky placement
        # moves, by the placement just before it is moved (Placement.place's settle).
        policy = self.policy
        if policy.reads_progress:
            self.settle_all()
        if not self._eventful:  # a review: no arrival or completion since the last round
            self._count_event()
        self._eventful = False
        snap = self.snapshot()
        alloc = policy.allocate(snap)
        prev = self.prev_alloc
        counts_changed = alloc != prev
        moved = self._moved(alloc, prev) if counts_changed else []
        if self.check:
            validate_changes(self.active, alloc, moved, self._left, self.busy, self.capacity, policy.name)
            self._left = []
        self.prev_alloc = alloc
        # A non-sticky placement may move jobs even when no count changed, unless nothing moved since.
        if counts_changed or (self.placement is not None and not self.placement.keep_all(alloc)):
            self._apply(alloc, moved)
        self.review_at = policy.next_review(snap, alloc)
        self.events += 1

    def _moved(self, alloc: dict[int, int], prev: dict[int, int]) -> list[int]:
        """The jobs whose entry in ``alloc`` differs from ``prev``, in ``alloc``'s order, then the active ones it leaves
        out (a job given 0 GPUs where it had none is among them: ``_apply`` leaves it as it is)."""
        get = prev.get  # bound once: this diff runs over every allocated job in every round
        moved = [jid for jid, n in alloc.items() if get(jid) != n]
        active = self.active
        moved += [jid for jid in prev if jid not in alloc and jid in active]  # finished jobs are gone
        return moved

    def _apply(self, alloc: dict[int, int], moved: list[int]) -> None:
        """Give every job of ``moved`` its new count in ``alloc`` (and every job its GPUs), settling it at its
        old rate first; new ETAs."""
        now, overhead = self.now, self.overhead
        active, running, eta, heap = self.active, self.running, self.eta, self.eta_heap
        changed: list[JobState] = []
        for jid in moved:
            job = active[jid]
            n = alloc.get(jid, 0)
            if n == job.alloc:  # 0 GPUs again, given or left out
                continue
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
            changed = self.placement.place(self.snapshot(), changed, alloc, self.settle)
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
        if self._finish_changes is not None:
            self._finish_changes.update(job.spec.job_id for job in changed)

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
        finish = self._final_finishes()
        if finish is not None:  # nothing can change: the play would end before its first event
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

    def play_ahead_changes(self) -> dict[int, float]:
        """``play_ahead()``, or ``final_changes()`` where the finishes are final now."""
        changes = self.final_changes()
        return self.play_ahead() if changes is None else changes

    def final_changes(self) -> dict[int, float] | None:
        """Where every running job's finish is final now (``_final``): those that changed since the last forecast
        this method gave, or all of them where that one was not final; else None (a play must tell).

        Folded in turn into a run's records (``pcs_ray.sim.forecast_fold``), together with the plays made where
        it returns None, these leave the records as whole forecasts would, since a finish that did not change
        folds to nothing: on a cluster where every job holds all it can use, a forecast then costs the jobs
        that changed, not every running job."""
        if not self._final():
            self._finish_changes = None
            return None
        changes, self._finish_changes = self._finish_changes, set()
        if changes is None:
            return self._final_finishes()
        eta = self.eta
        return self._recorded({j: eta[j] for j in changes if j in eta})

    def _final(self) -> bool:
        """Whether every running job's finish is final now: every job holds all it can use and nothing is due,
        so no work-conserving policy changes anything (and no job waits to start)."""
        return self.review_at is None and self.busy == self.demand

    def _final_finishes(self) -> Forecast | None:
        """Every running job's finish where they are final now (``_final``), else None."""
        if not self._final():
            return None
        return Forecast(self._recorded(self.eta))

    def _recorded(self, ends: dict[int, float]) -> dict[int, float]:
        """Finish times as a forecast records them: in rounds, at the next boundary."""
        length = self.policy.round_s
        return {j: round_boundary(t, length, slack=True) for j, t in ends.items()} if length else ends

    def play_forward(self, until: int | None = None) -> dict[int, float]:
        """Finish time of every active job if nothing else arrives (the prediction).

        ``until``: stop as soon as that job's finish is known, returning it and the finishes
        known by then (each the very number the whole play gives: a play never revises one).
        A new job's forecast then costs the events up to its own finish, not the whole queue's.
        """
        finish = Forecast()
        waiting = [job for job in self.active.values() if not job.alloc and job.start_time is None]
        while self.active:
            final = self._final_finishes()
            if final is not None:
                finish.update(final)
                self.now = max(final.values(), default=self.now)
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
        # Jobs that never ran: when this play first gave them GPUs (a run again after a preemption is not told).
        finish.starts.update((job.spec.job_id, job.start_time) for job in waiting if job.start_time is not None)
        return finish
