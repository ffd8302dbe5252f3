"""Event-driven, continuous-time simulation of a GPU cluster under one policy.

Events are arrivals, completions and policy reviews (lease expiries,
priority demotions). Between events every allocation is constant, so a
running app's finish time is known exactly and progress is computed, not
stepped. The same ``Engine`` plays the cluster forward for predictions
(PCS §4): a fork of the live state with no future arrivals.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import multiprocessing
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pcs_ray.job import JobSpec
from pcs_ray.placement.base import Placement
from pcs_ray.policies.base import SchedulingPolicy, top_up, validate_allocation
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
            end = max(self.now, stall_until) + job.remaining / job.rate()
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
            end = self.eta[job.spec.job_id]
            job.remaining = max(0.0, job.rate() * (end - (now if now > job.stall_until else job.stall_until)))
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
            if n and job.start_time is None:
                job.start_time = now
                if job.start_cost:
                    job.stall_until = now + job.start_cost  # start-up before its first step
            elif n:
                cost = overhead if job.move_cost is None else job.move_cost
                if cost:
                    job.stall_until = now + cost  # checkpoint + restore before it moves again
            self.busy += n - job.alloc
            job.alloc = n
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
                    cost = overhead if job.move_cost is None else job.move_cost
                    if cost:
                        job.stall_until = now + cost
        for job in changed:
            jid = job.spec.job_id
            if job.alloc:
                stall = job.stall_until
                end = eta[jid] = (now if now > stall else stall) + job.remaining / job.rate()
                heapq.heappush(heap, (end, jid))
            else:
                eta.pop(jid, None)

    def predict(self, *, placement: bool = True, until: int | None = None) -> dict[int, float]:
        """Finish time of every active job if nothing else arrives; this engine is left untouched.

        For a policy with a queue form (FIFO, WFQ) and no placement in the play, the incremental
        play gives, bit for bit, what ``fork(placement=placement).play_forward()`` gives.
        ``until``: stop once that job's finish is known (see ``play_forward``).
        """
        placing = self.placement if placement else None
        form = self._queue_form(placing)
        if form is not None:
            finish = _queue_play(self, form, until, placing)
            if finish is not None:
                return finish
        return self.fork(placement=placement).play_forward(until)

    def _queue_form(self, placing):
        """The policy's queue form where a queue play can stand in for a fork's play (with ``placing``,
        the placement that plays along, or None), else None."""
        if not self.incremental or self.review_at is not None or self.policy.round_s:
            return None
        if placing is not None and not _plays_itself(placing):
            return None
        return self.policy.queue_form()

    def detached_play(self, *, placement: bool = True) -> Callable[..., dict[int, float]] | None:
        """``predict`` as a call that needs nothing of this engine once made: the queue play copies
        the state it starts from (a sticky placement is forked), so a live caller can run it without
        holding its lock while the engine moves on (``between=``: see ``_QueuePlay.run``). None where
        only a fork of the engine can play (its policy object would then run in two threads at once)."""
        placing = self.placement if placement else None
        form = self._queue_form(placing)
        if form is None:
            return None
        play = _QueuePlay.start(self, form, placement=placing)
        return None if play is None else play.run

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


def _plays_itself(placement) -> bool:
    """Whether a queue play can run ``placement`` itself (``_QueuePlay.place``): the one placement
    class, sticky (only jobs whose count changed are placed), and no time-dependent run predictor."""
    return type(placement) is Placement and placement.sticky and getattr(placement.facts, "slow_runs", None) is None


class _QueuePlay:
    """``play_forward`` on a fork of an engine, for a WFQ-form policy without placement or with a
    sticky one (``_plays_itself``), recomputing only what an event can change.

    WFQ decides each queue from its share and its own FIFO list alone, so after a completion only
    the finished job's queue, and queues whose share moved, are decided again. A queue whose FIFO
    pass used its whole share keeps every job ahead of the last one served when its share does
    not shrink: the pass resumes at that job with the GPUs freed or added. Where the pass passed
    a job over, every job ahead of that one got its full cap, and gets it again with as many GPUs:
    the pass resumes at the job passed over, with the GPUs it had there plus those freed ahead of it.
    A round that tops up across queues is followed by a full one. Every job whose count changes
    goes through the very arithmetic of ``Engine._apply`` and ``Engine.settle``, so finish times
    are identical to the fork's. The engine is only read, when the play starts.

    A play is stepped event by event and can be copied between an event's completions and its
    decision (``branch``), which is how successive arrivals share their common past (``_PlayChain``).
    With a placement (a fork of the engine's), the jobs whose count changed take their GPUs in the
    order ``Placement.place`` takes them, and their slowdowns live in the play (``sd``).
    """

    @classmethod
    def start(cls, engine: Engine, policy, memo: dict | None = None, placement=None) -> "_QueuePlay | None":
        """A play of ``engine`` as it stands; None where the engine's state does not allow it.
        ``memo``: water-filling results to share with other plays of the same policy and capacity.
        ``placement``: the engine's placement, when it plays along (``_plays_itself``)."""
        active, running, prev = engine.active, engine.running, engine.prev_alloc
        held = 0
        for jid, n in prev.items():  # the last decision must be what the jobs hold (true after reallocate)
            job = active.get(jid)
            if job is not None:
                if job.alloc != n:
                    return None
                held += 1
        if held != len(running):
            return None
        self = cls()
        index = engine.index
        if getattr(index, "policy", None) is not policy:
            index = policy.make_index(active.values())
        self.policy = policy
        self.name = engine.policy.name
        self.capacity, self.overhead, self.now = engine.capacity, engine.overhead, engine.now
        self.jobs = dict(active)  # the live engine goes on changing its own dict
        self.queues = [list(q) for q in index.queues]
        self.entries = [list(e) for e in index.entries]
        self.usable = list(index.usable)
        nq = len(self.queues)
        self.eta = dict(engine.eta)
        self.heap = [(t, j) for j, t in self.eta.items()]
        heapq.heapify(self.heap)
        queue_of = policy.queue_of
        self.qalloc = [{} for _ in range(nq)]  # each queue's counts as last decided
        for jid, job in running.items():
            self.qalloc[queue_of(job)][jid] = job.alloc
        # Per job, what Engine._apply reads and writes, copied now: the live JobStates move on.
        self.rem = {jid: j.remaining for jid, j in active.items()}
        self.cnt = {jid: j.alloc for jid, j in active.items()}
        self.anc = {jid: j.anchor for jid, j in active.items()}
        self.stl = {jid: j.stall_until for jid, j in active.items()}
        self.sta = {jid: j.start_time is not None for jid, j in active.items()}
        self.total = [0] * nq  # GPUs each queue's own decision hands out, before any top-up
        # Per queue, where its last FIFO pass can resume when it used the whole share (``_front``); else None.
        self.front = [None] * nq
        self.stopped = [False] * nq  # whether the queue's last FIFO pass ran out of GPUs before jobs
        self.freed = [0] * nq  # GPUs released by jobs finishing at this event
        self.freed_after = [0] * nq  # of those, GPUs of jobs served after the one a pass passed over
        self.after = [None] * nq  # the job behind a finished last-served job
        self.after_at = [0] * nq  # where it probably is in its queue (checked before use: ``_position``)
        self.shares = []
        self.fill = [()]  # how the last water-filling ended (WFQPolicy.water_fill) and each queue's head then
        self.spread = True  # no decision yet, or the last one topped up across queues: decide every queue afresh
        self.dirty = set()
        self.busy, self.demand, self.left_jobs = engine.busy, engine.demand, len(active)
        self.memo = {} if memo is None else memo  # (usable per queue, head per queue) -> shares, fill
        self.finish = {}
        self.place = None if placement is None else placement.fork()
        self.sd = {jid: j.slowdown for jid, j in active.items()} if placement is not None else None
        self.log = []  # (time, job) of every finish, in event order
        self.over = False
        self.pending = False  # completions taken, their decision not yet made
        return self

    def branch(self, job: JobState, since: float) -> "_QueuePlay":
        """A copy, before this event's decision, with ``job`` (just admitted, holding nothing)
        at the tail of its queue; it keeps the finishes from ``since`` on."""
        other = _QueuePlay.__new__(_QueuePlay)
        other.__dict__.update(self.__dict__)
        other.jobs = dict(self.jobs)
        other.queues = [list(q) for q in self.queues]
        other.entries = [list(e) for e in self.entries]
        other.usable = list(self.usable)
        other.eta, other.heap = dict(self.eta), list(self.heap)
        other.qalloc = [dict(a) for a in self.qalloc]
        other.rem, other.cnt, other.anc = dict(self.rem), dict(self.cnt), dict(self.anc)
        other.stl, other.sta = dict(self.stl), dict(self.sta)
        other.total, other.front, other.stopped = list(self.total), list(self.front), list(self.stopped)
        other.freed, other.after, other.dirty = list(self.freed), list(self.after), set(self.dirty)
        other.freed_after = list(self.freed_after)
        other.after_at = list(self.after_at)
        at = bisect.bisect_left(self.log, since, key=lambda e: e[0])
        other.log = self.log[at:]
        other.finish = {jid: t for t, jid in other.log}
        policy, spec = self.policy, job.spec
        q = policy.queue_of(job)
        jid = spec.job_id
        f = other.front[q]
        if f is not None and f[3] is None and other.after[q] is None and f[1].spec.job_id not in other.qalloc[q]:
            other.after[q] = job  # the last job served finished here and had no one behind it until now
            other.after_at[q] = len(other.queues[q])
        other.jobs[jid] = job
        other.queues[q].append(job)
        other.entries[q].append((jid, job.cap(policy.config.zeta_min), spec.min_gpus, spec.rigid))
        other.usable[q] += spec.max_gpus
        other.demand += spec.max_gpus
        other.left_jobs += 1
        other.rem[jid], other.cnt[jid], other.anc[jid] = job.remaining, 0, job.anchor
        other.stl[jid], other.sta[jid] = job.stall_until, job.start_time is not None
        return other

    def completions(self) -> bool:
        """Take the next event's completions; False once the play is over."""
        if self.over:
            return False
        if not self.left_jobs or self.busy == self.demand:
            self.finish.update(self.eta)  # every job holds all it can use: the ETAs are final
            self.over = True
            return False
        heap, eta, heappop = self.heap, self.eta, heapq.heappop
        while heap and eta.get(heap[0][1]) != heap[0][0]:
            heappop(heap)
        if not heap:
            raise RuntimeError(f"{self.name}: active jobs can never finish (no GPU is allocated)")
        now = self.now = heap[0][0]
        lim = now + 1e-9 * (now if now > 1.0 else 1.0)  # now >= 0
        queues, entries, queue_of, jobs = self.queues, self.entries, self.policy.queue_of, self.jobs
        finish, log, qalloc, front, after, freed, usable, after_at = (
            self.finish, self.log, self.qalloc, self.front, self.after, self.freed, self.usable, self.after_at,
        )
        dropped = busy = 0
        place = self.place
        while heap and heap[0][0] <= lim:
            end, jid = heappop(heap)
            if eta.get(jid) == end:
                del eta[jid]
                finish[jid] = now
                log.append((now, jid))
                job = jobs[jid]
                q = queue_of(job)
                queue = queues[q]
                i = queue.index(job)
                del queue[i]
                del entries[q][i]
                m = job.spec.max_gpus
                usable[q] -= m
                dropped += m
                n = qalloc[q].pop(jid)
                busy += n
                freed[q] += n
                if i < after_at[q]:  # the position hints follow the jobs behind the one removed
                    after_at[q] -= 1
                f = front[q]
                if f is not None:
                    if f[3] is None:
                        if f[1] is job or after[q] is job:
                            after[q] = queue[i] if i < len(queue) else None
                            after_at[q] = i
                    elif jid in f[3]:
                        self.freed_after[q] += n
                    if i < f[4]:
                        front[q] = (f[0], f[1], f[2], f[3], f[4] - 1)
                if place is not None and jid in place.held:  # Engine.remove -> Placement.release
                    place.give_back(jid)
                self.left_jobs -= 1
                self.dirty.add(q)
        self.demand -= dropped
        self.busy -= busy
        if not self.left_jobs:
            self.over = True
            return False
        self.pending = True
        return True

    def decide(self) -> tuple:
        """This event's decision, computed without changing the play (see ``commit``)."""
        policy, queues, entries, usable, capacity = self.policy, self.queues, self.entries, self.usable, self.capacity
        dirty, shares, fill, spread, nq = self.dirty, self.shares, self.fill, self.spread, len(queues)
        c = next(iter(dirty)) if len(dirty) == 1 else -1
        if (
            c >= 0 and c in fill[0] and fill[1] > 0 and queues[c] and usable[c] > shares[c]
            and usable[c] > fill[1] * policy.weights[c] / fill[2] + 1e-6 and (not fill[3] or queues[c][0] is fill[4][c])
        ):
            # The queue whose jobs finished was, and stays, below its quota in every round of the
            # water-filling, and any single GPUs went out with the same heads: the shares stand.
            new_shares, new_fill = shares, fill
        else:
            # Shares depend only on what each queue can use and on its head (ties): plays pass
            # through the same few states again and again, so they are looked up first.
            heads = [q[0] if q else None for q in queues]
            key = (tuple(usable), tuple([h.spec.job_id if h is not None else None for h in heads]))
            known = self.memo.get(key)
            if known is None:
                if len(self.memo) > 200_000:
                    self.memo.clear()
                new_shares, *new_fill = policy.water_fill(queues, usable, capacity)
                new_fill.append(heads)
                known = self.memo[key] = (new_shares, new_fill)
            new_shares, new_fill = known
        resume, relax = policy.first_pass_from, policy.relax
        total, front, stopped = list(self.total), list(self.front), list(self.stopped)
        qalloc = list(self.qalloc)
        moved: list[tuple[int, int]] = []
        patches: list[tuple[int, list]] = []
        todo = range(nq) if spread else [q for q in range(nq) if q in dirty or new_shares[q] != shares[q]]
        for q in todo:
            share, f, old = new_shares[q], front[q], qalloc[q]
            if not spread and f is not None and share >= f[0]:
                drop = f[3]
                if drop is not None:  # passed a job over: the pass resumes at it, with the GPUs it had there
                    start, left = _position(queues[q], f[1], f[4]), f[2] + share - f[0] + self.freed[q] - self.freed_after[q]
                elif f[1].spec.job_id in old:  # the last job served is still here: the pass resumes at it
                    start, left = _position(queues[q], f[1], f[4]), self.freed[q] + share - f[0] + f[2]
                else:
                    nxt = self.after[q]
                    start = _position(queues[q], nxt, self.after_at[q]) if nxt is not None else len(queues[q])
                    left = self.freed[q] + share - f[0]
                a: dict[int, int] = {}
                left, stop, skip_at, left_at, served = resume(entries[q], start, left, a)
                if not left:
                    front[q] = self._front(q, share, a, stop, skip_at, left_at, served)
                    stopped[q], total[q] = True, share
                    patch = [(jid, n) for jid, n in a.items() if old.get(jid) != n]
                    moved += patch
                    if drop is None:
                        patches.append((q, patch, ()))
                    else:  # jobs served after the one passed over are served afresh
                        moved += [(jid, 0) for jid in drop if jid in old and jid not in a]
                        patches.append((q, list(a.items()), drop))
                    continue
            a = {}
            front[q], stopped[q] = None, False
            if share:
                left, stop, skip_at, left_at, served = resume(entries[q], 0, share, a)
                if left:
                    relax(queues[q], left, a)
                else:
                    stopped[q] = True
                    front[q] = self._front(q, share, a, stop, skip_at, left_at, served)
            total[q] = sum(a.values())
            if not spread:
                moved += [(jid, n) for jid, n in a.items() if old.get(jid) != n]
                moved += [(jid, 0) for jid in old if jid not in a]
            qalloc[q] = a
        new_spread = False
        if spread or sum(total) < capacity:
            # Decide the whole allocation as WFQPolicy.allocate does, and diff every queue.
            merged: dict[int, int] = {}
            for q in range(nq):
                merged.update(qalloc[q])
            if sum(total) < capacity:
                top_up((j for q in queues for j in q), merged, capacity)
                new_spread = True
            cnt = self.cnt
            moved = []
            for q in range(nq):
                decided = {}
                for job in queues[q]:
                    jid = job.spec.job_id
                    n = merged.get(jid, 0)
                    if n:
                        decided[jid] = n
                    if n != cnt[jid]:
                        moved.append((jid, n))
                if new_spread:
                    qalloc[q] = decided
            patches = []
            return new_shares, new_fill, total, front, stopped, qalloc, patches, new_spread, moved, merged
        return new_shares, new_fill, total, front, stopped, qalloc, patches, new_spread, moved, None

    def _front(self, q: int, share: int, a: dict[int, int], stop: int, skip_at: int, left_at: int, served: int):
        """Where a FIFO pass of queue ``q`` that used its whole ``share`` can resume at the next event
        (``_QueuePlay`` docstring): (share, last job served, its count, None), or where it first
        passed a job over: (share, that job, GPUs left there, the jobs served after it); then where
        that job probably is in the queue (kept up to date as jobs ahead finish; ``_position``)."""
        if skip_at < 0:
            return share, self.queues[q][stop], a[self.entries[q][stop][0]], None, stop
        return share, self.queues[q][skip_at], left_at, frozenset(itertools.islice(a, served, None)), skip_at

    def quiet(self, decision, q: int) -> bool:
        """Whether a job arriving at the tail of queue ``q`` would leave ``decision`` as it is:
        the queue had jobs, stays below its quota and ran out of GPUs before its last job,
        and nothing was topped up across queues."""
        shares, fill, total, _, stopped, _, _, spread, _, _ = decision
        return (
            not spread and stopped[q] and bool(self.queues[q]) and q in fill[0] and shares[q] < self.usable[q]
            and sum(total) == self.capacity
        )

    def commit(self, decision) -> None:
        self.shares, self.fill, self.total, self.front, self.stopped, qalloc, patches, self.spread, moved, merged = decision
        self.pending = False
        for q, patch, drop in patches:
            counts = qalloc[q]
            for jid in drop:  # served again in pass order, which Placement follows
                counts.pop(jid, None)
            counts.update(patch)
        self.qalloc = qalloc
        for q in self.dirty:
            self.freed[q] = self.freed_after[q] = 0
            self.after[q] = None
        self.dirty.clear()
        now, overhead, eta, heap, jobs = self.now, self.overhead, self.eta, self.heap, self.jobs
        rem, cnt, anc, stl, sta, sd = self.rem, self.cnt, self.anc, self.stl, self.sta, self.sd
        busy = self.busy
        if sd is not None:
            self._commit_placed(moved, merged)
            return
        for jid, n in moved:
            had = cnt[jid]
            if had == n:
                continue
            job = jobs[jid]
            spec, slowdown = job.spec, job.slowdown
            remaining, stall = rem[jid], stl[jid]
            if anc[jid] != now:  # Engine.settle
                if now - anc[jid] > 0 and had:
                    remaining = max(0.0, spec.speedup[had] / slowdown * (eta[jid] - (now if now > stall else stall)))
                anc[jid] = now
            if n and not sta[jid]:
                sta[jid] = True
                cost = job.start_cost
                if cost:
                    stall = stl[jid] = now + cost
            elif n:
                cost = overhead if job.move_cost is None else job.move_cost
                if cost:
                    stall = stl[jid] = now + cost
            busy += n - had
            if n:
                end = eta[jid] = (now if now > stall else stall) + remaining / (spec.speedup[n] / slowdown)
                heapq.heappush(heap, (end, jid))
            else:
                eta.pop(jid, None)
            rem[jid], cnt[jid] = remaining, n
        self.busy = busy

    def _commit_placed(self, moved: list[tuple[int, int]], merged: dict[int, int] | None) -> None:
        """``commit``'s counts as ``Engine._apply`` gives them with a sticky placement: every job whose
        count changed is settled at its old rate, then placed (``Placement.place``: changed jobs give
        their GPUs back, then those with GPUs take new ones in the policy's allocation order), then
        timed at its new rate."""
        now, overhead, eta, heap, jobs = self.now, self.overhead, self.eta, self.heap, self.jobs
        rem, cnt, anc, stl, sta, sd, place = self.rem, self.cnt, self.anc, self.stl, self.sta, self.sd, self.place
        busy = self.busy
        changed = []
        for jid, n in moved:
            had = cnt[jid]
            if had == n:
                continue
            spec = jobs[jid].spec
            remaining, stall = rem[jid], stl[jid]
            if anc[jid] != now:  # Engine.settle
                if now - anc[jid] > 0 and had:
                    remaining = max(0.0, spec.speedup[had] / sd[jid] * (eta[jid] - (now if now > stall else stall)))
                anc[jid] = now
            if n and not sta[jid]:
                sta[jid] = True
                cost = jobs[jid].start_cost
                if cost:
                    stl[jid] = now + cost
            elif n:
                cost = overhead if jobs[jid].move_cost is None else jobs[jid].move_cost
                if cost:
                    stl[jid] = now + cost
            busy += n - had
            rem[jid], cnt[jid] = remaining, n
            changed.append((jid, n))
        self.busy = busy
        home = {}
        for jid, n in changed:
            if jid in place.held:
                home[jid] = place.give_back(jid)
        todo = [(jid, n) for jid, n in changed if n]
        if len(todo) > 1:
            todo.sort(key=self._alloc_order(todo, merged))
        counts = dict(todo)
        for job in place.order([jobs[jid] for jid, _ in todo], None, counts):
            jid = job.spec.job_id
            sd[jid] = place.slowdown(job, place.take(job, counts[jid], home.get(jid, ())))
        for jid, n in changed:
            if n:
                stall = stl[jid]
                end = eta[jid] = (now if now > stall else stall) + rem[jid] / (jobs[jid].spec.speedup[n] / sd[jid])
                heapq.heappush(heap, (end, jid))
            else:
                sd[jid] = 1.0
                eta.pop(jid, None)

    def _alloc_order(self, todo: list[tuple[int, int]], merged: dict[int, int] | None):
        """Sort key: each job's place in ``WFQPolicy.allocate``'s dict (its priority order). A decision
        that merged every queue holds that dict; otherwise it is the queues' own dicts one after the other."""
        if merged is not None:
            pos = {jid: i for i, jid in enumerate(merged)}
            return lambda e: pos[e[0]]
        queue_of, jobs, qalloc = self.policy.queue_of, self.jobs, self.qalloc
        qs = {jid: queue_of(jobs[jid]) for jid, _ in todo}
        pos = {}
        for q in set(qs.values()):
            want = [jid for jid, _ in todo if qs[jid] == q]
            if len(want) == 1:  # alone in its queue: its queue decides where it goes
                pos[want[0]] = 0
                continue
            # Walked from the end, where a pass adds the jobs it serves: changed jobs are mostly there.
            wanted, left = set(want), len(want)
            for i, jid in enumerate(reversed(qalloc[q])):
                if jid in wanted:
                    pos[jid] = -i
                    left -= 1
                    if not left:
                        break
        return lambda e: (qs[e[0]], pos[e[0]])

    def run(self, until: int | None = None, between: Callable[[], None] | None = None) -> dict[int, float]:
        """Play to the end, or (``until``) until that job's finish is known (``Engine.play_forward``).
        ``between``: called before each event's decision (a live caller's play pauses there for calls)."""
        finish = self.finish
        while self.pending or self.completions():
            if until in finish:
                break
            if between is not None:
                between()
            self.commit(self.decide())
        return finish


def _position(queue: list, job, hint: int) -> int:
    """``queue.index(job)``, looked for first at ``hint``: a queue holds hundreds of jobs, and a play
    asks where its resume points are at every event."""
    return hint if hint < len(queue) and queue[hint] is job else queue.index(job)


def _queue_play(engine: Engine, policy, until: int | None = None, placement=None) -> dict[int, float] | None:
    """The incremental equivalent of ``engine.fork(placement=placement is not None).play_forward(until)``, or None."""
    play = _QueuePlay.start(engine, policy, placement=placement)
    return None if play is None else play.run(until)


class _PlayChain:
    """Forward plays of successive arrivals (``simulate``) that share their common past.

    The play made at arrival k (the trunk) is stepped only as far as the next arrival needs.
    Until job j's arrival, the trunk is the schedule itself; after it, while every decision
    leaves j where it cannot change anything (``_QueuePlay.quiet``), the play with j is the
    trunk plus a waiting j. At the first decision where j would count, the trunk branches:
    the copy with j becomes the new trunk, and the old one plays out its own forecast. Where
    that does not hold (a decision that j changed after all, or completions at j's very
    arrival) the new play starts afresh from the engine.
    """

    def __init__(self, policy) -> None:
        self.policy = policy
        self.trunk: _QueuePlay | None = None
        self.slot = -1  # the forecast the trunk will complete
        self.noisy: list[float] = []  # per queue, the latest trunk decision a job arriving there would have changed
        self.memo: dict = {}

    def play(self, engine: Engine, job: JobState, calm: bool, forecasts: list) -> None:
        """Forecast for ``job``'s arrival (appended to ``forecasts``; filled in when complete).
        ``calm``: the engine decided nothing new at this arrival (no completion, same counts)."""
        t, trunk, policy = engine.now, self.trunk, self.policy
        q = policy.queue_of(job)
        forecasts.append(None)
        child = None
        if trunk is not None and calm and self.noisy[q] < t:
            child = self._branch(trunk, job, q, t)
        if trunk is not None:
            forecasts[self.slot] = trunk.run()
        if child is None:
            child = _QueuePlay.start(engine, policy, self.memo)
            if child is None:
                self.trunk = None
                forecasts[-1] = engine.fork().play_forward()
                return
            self.noisy = [-INF] * len(child.queues)
        self.trunk, self.slot = child, len(forecasts) - 1

    def _branch(self, trunk: _QueuePlay, job: JobState, q: int, t: float) -> _QueuePlay | None:
        while trunk.pending or trunk.completions():
            decision = trunk.decide()
            if trunk.now >= t and not trunk.quiet(decision, q):
                child = trunk.branch(job, t)
                trunk.commit(decision)  # the old trunk's own decision: no longer the shared past
                return child
            self._commit(trunk, decision)
        return None

    def _commit(self, trunk: _QueuePlay, decision) -> None:
        for q in range(len(self.noisy)):
            if not trunk.quiet(decision, q):
                self.noisy[q] = trunk.now
        trunk.commit(decision)

    def finish(self, forecasts: list) -> None:
        if self.trunk is not None:
            forecasts[self.slot] = self.trunk.run()
            self.trunk = None


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
    if workers > 1 and energy is not None:
        raise ValueError("energy accounting runs in one process: use workers=1")
    if workers > 1:
        result = _simulate_parallel(arrivals, capacity, policy, overhead, placement, workers, incremental)
        if progress is not None:
            progress(len(arrivals), len(arrivals))
    else:
        result, forecasts = _replay(arrivals, capacity, policy, overhead, placement, (0, 1) if predict else None, progress,
                                    energy, incremental)
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
    meter=None,
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
        _PlayChain(form) if incremental and placement is None and plays == (0, 1) and form is not None
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
        if meter is not None:
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
                        forecast = engine.predict()
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
    result, forecasts = _replay(arrivals, capacity, policy, overhead, placement, plays, None, None, incremental)
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
