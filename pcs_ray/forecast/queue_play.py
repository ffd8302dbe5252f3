"""The incremental forward play of a queue-form policy (WFQ, FIFO): what ``Engine.play_forward`` gives on a
fork, bit for bit, recomputing only the queues an event touches.

The engine is read once, when a play starts; the play then keeps its own copy of every number it changes,
so a play can run beside the live engine (``Engine.play_detached``) and never alters it.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable

from pcs_ray.forecast.decision import Decision, Front
from pcs_ray.forecast.result import Forecast
from pcs_ray.jobs.moves import charged_stall, finish_time, service_left
from pcs_ray.placement.base import Placement
from pcs_ray.policies.base import top_up
from pcs_ray.jobs.state import JobState


def plays_itself(placement) -> bool:
    """Whether a queue play can run ``placement`` itself (``QueuePlay.place``): the one placement
    class, sticky (only jobs whose count changed are placed), and no time-dependent run predictor.
    A wrapper (``PlacementLog``) plays as the placement it wraps (``Placement.plays_as``)."""
    plays_as = getattr(placement, "plays_as", None)
    if plays_as is not None:
        placement = plays_as()
    return type(placement) is Placement and placement.sticky and getattr(placement.facts, "slow_runs", None) is None


class QueuePlay:
    """``play_forward`` on a fork of an engine, for a WFQ-form policy without placement or with a
    sticky one (``plays_itself``), recomputing only what an event can change.

    WFQ decides each queue from its share and its own FIFO list alone, so after a completion only
    the finished job's queue, and queues whose share moved, are decided again. A queue whose FIFO
    pass used its whole share keeps every job ahead of the last one served when its share does
    not shrink: the pass resumes at that job with the GPUs freed or added. Where the pass passed
    a job over, every job ahead of that one got its full cap, and gets it again with as many GPUs:
    the pass resumes at the job passed over, with the GPUs it had there plus those freed ahead of it.
    A round that tops up across queues is followed by a full one. Every job whose count changes
    is settled and charged by the engine's own rule (``pcs_ray.jobs.moves``), so finish times are
    identical to the fork's. The engine is only read, when the play starts.

    A play is stepped event by event and can be copied between an event's completions and its
    decision (``branch``), which is how successive arrivals share their common past (``PlayChain``).
    With a placement (a fork of the engine's), the jobs whose count changed take their GPUs in the
    order ``Placement.place`` takes them, and their slowdowns live in the play (``sd``).
    """

    @classmethod
    def start(cls, engine: Engine, policy, memo: dict | None = None, placement=None) -> "QueuePlay | None":
        """A play of ``engine`` as it stands; None where the engine's state does not allow it.
        ``memo``: water-filling results to share with other plays of the same policy and capacity.
        ``placement``: the engine's placement, when it plays along (``plays_itself``)."""
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
        self.finish = Forecast()
        self.starts = self.finish.starts  # jobs holding nothing now: when the play first gives them GPUs
        self.place = None if placement is None else placement.fork()
        self.sd = {jid: j.slowdown for jid, j in active.items()} if placement is not None else None
        self.log = []  # (time, job) of every finish, in event order
        self.over = False
        self.pending = False  # completions taken, their decision not yet made
        return self

    def copy(self, only_alive: bool = True) -> "QueuePlay":
        """An independent copy, its finishes empty; a sticky placement is forked with it. ``only_alive``:
        the per-job numbers of jobs already finished (never read again) are left behind, so a copy
        made late in a long play holds the jobs still in it, not every job it started with."""
        other = QueuePlay.__new__(QueuePlay)
        other.__dict__.update(self.__dict__)
        if only_alive:
            jobs = other.jobs = {job.spec.job_id: job for queue in self.queues for job in queue}
            other.rem, other.cnt, other.anc = _only(self.rem, jobs), _only(self.cnt, jobs), _only(self.anc, jobs)
            other.stl, other.sta = _only(self.stl, jobs), _only(self.sta, jobs)
            other.sd = None if self.sd is None else _only(self.sd, jobs)
            other.eta = dict(self.eta)  # running jobs only
            other.heap = [(t, j) for j, t in other.eta.items()]
            heapq.heapify(other.heap)
        else:
            other.jobs = dict(self.jobs)
            other.rem, other.cnt, other.anc = dict(self.rem), dict(self.cnt), dict(self.anc)
            other.stl, other.sta = dict(self.stl), dict(self.sta)
            other.sd = None if self.sd is None else dict(self.sd)
            other.eta, other.heap = dict(self.eta), list(self.heap)
        other.queues = [list(q) for q in self.queues]
        other.entries = [list(e) for e in self.entries]
        other.usable = list(self.usable)
        other.qalloc = [dict(a) for a in self.qalloc]
        other.total, other.front, other.stopped = list(self.total), list(self.front), list(self.stopped)
        other.freed, other.after, other.dirty = list(self.freed), list(self.after), set(self.dirty)
        other.freed_after = list(self.freed_after)
        other.after_at = list(self.after_at)
        other.place = None if self.place is None else self.place.fork()
        other.log, other.finish, other.starts = [], {}, {}
        return other

    def branch(self, job: JobState, since: float) -> "QueuePlay":
        """A copy, before this event's decision, with ``job`` (just admitted, holding nothing)
        at the tail of its queue; it keeps the finishes from ``since`` on."""
        other = self.copy(only_alive=2 * self.left_jobs < len(self.jobs))
        at = bisect.bisect_left(self.log, since, key=lambda e: e[0])
        other.log = self.log[at:]
        other.finish = {jid: t for t, jid in other.log}
        other.admit(job)
        return other

    def admit(self, job: JobState) -> None:
        """``job`` (just admitted, holding nothing) joins the tail of its queue, before this event's decision."""
        policy, spec = self.policy, job.spec
        q = policy.queue_of(job)
        jid = spec.job_id
        f = self.front[q]
        if f is not None and f.passed is None and self.after[q] is None and f.job.spec.job_id not in self.qalloc[q]:
            self.after[q] = job  # the last job served finished here and had no one behind it until now
            self.after_at[q] = len(self.queues[q])
        self.jobs[jid] = job
        self.queues[q].append(job)
        self.entries[q].append((jid, job.cap(policy.config.zeta_min), spec.min_gpus, spec.rigid))
        self.usable[q] += spec.max_gpus
        self.demand += spec.max_gpus
        self.left_jobs += 1
        self.rem[jid], self.cnt[jid], self.anc[jid] = job.remaining, 0, job.anchor
        self.stl[jid], self.sta[jid] = job.stall_until, job.start_time is not None
        if self.sd is not None:
            self.sd[jid] = job.slowdown

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
                    if f.passed is None:
                        if f.job is job or after[q] is job:
                            after[q] = queue[i] if i < len(queue) else None
                            after_at[q] = i
                    elif jid in f.passed:
                        self.freed_after[q] += n
                    if i < f.at:
                        front[q] = Front(f.share, f.job, f.left, f.passed, f.at - 1)
                if place is not None and jid in place.held:  # Engine.remove -> Placement.release
                    place.count(0, len(place.give_back(jid)))
                self.left_jobs -= 1
                self.dirty.add(q)
        self.demand -= dropped
        self.busy -= busy
        if not self.left_jobs:
            self.over = True
            return False
        self.pending = True
        return True

    def decide(self) -> Decision:
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
            if not spread and f is not None and share >= f.share:
                drop = f.passed
                if drop is not None:  # passed a job over: the pass resumes at it, with the GPUs it had there
                    start, left = _position(queues[q], f.job, f.at), f.left + share - f.share + self.freed[q] - self.freed_after[q]
                elif f.job.spec.job_id in old:  # the last job served is still here: the pass resumes at it
                    start, left = _position(queues[q], f.job, f.at), self.freed[q] + share - f.share + f.left
                else:
                    nxt = self.after[q]
                    start = _position(queues[q], nxt, self.after_at[q]) if nxt is not None else len(queues[q])
                    left = self.freed[q] + share - f.share
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
            return Decision(new_shares, new_fill, total, front, stopped, qalloc, patches, new_spread, moved, merged)
        return Decision(new_shares, new_fill, total, front, stopped, qalloc, patches, new_spread, moved, None)

    def _front(self, q: int, share: int, a: dict[int, int], stop: int, skip_at: int, left_at: int,
               served: int) -> Front:
        """Where a FIFO pass of queue ``q`` that used its whole ``share`` can resume at the next event
        (``QueuePlay`` docstring and ``Front``)."""
        if skip_at < 0:
            return Front(share, self.queues[q][stop], a[self.entries[q][stop][0]], None, stop)
        return Front(share, self.queues[q][skip_at], left_at, frozenset(itertools.islice(a, served, None)), skip_at)

    def quiet(self, decision: Decision, q: int) -> bool:
        """Whether a job arriving at the tail of queue ``q`` would leave ``decision`` as it is:
        the queue had jobs, stays below its quota and ran out of GPUs before its last job,
        and nothing was topped up across queues."""
        shares, fill, total, stopped, spread = decision.shares, decision.fill, decision.total, decision.stopped, decision.spread
        return (
            not spread and stopped[q] and bool(self.queues[q]) and q in fill[0] and shares[q] < self.usable[q]
            and sum(total) == self.capacity
        )

    def commit(self, decision: Decision) -> None:
        """Make ``decision`` (this event's, from ``decide``) the play's: counts, ETAs, resume points."""
        self.shares, self.fill, self.total, self.front = decision.shares, decision.fill, decision.total, decision.front
        self.stopped, self.spread = decision.stopped, decision.spread
        qalloc, patches, moved, merged = decision.qalloc, decision.patches, decision.moved, decision.merged
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
        rem, cnt, anc, stl, sta, sd, starts = self.rem, self.cnt, self.anc, self.stl, self.sta, self.sd, self.starts
        busy = self.busy
        if sd is not None:
            self._commit_placed(moved, merged)
            return
        for jid, n in moved:
            had = cnt[jid]
            if had == n:
                continue
            job = jobs[jid]
            speedup, slowdown = job.spec.speedup, job.slowdown
            remaining, stall = rem[jid], stl[jid]
            if anc[jid] != now:  # Engine.settle
                if now - anc[jid] > 0 and had:
                    remaining = service_left(speedup[had] / slowdown, eta[jid], now, stall)
                anc[jid] = now
            busy += n - had
            if n:
                if not had and jid not in starts:
                    starts[jid] = now
                stall = stl[jid] = charged_stall(now, stall, sta[jid], job.start_cost, job.move_cost, overhead)
                sta[jid] = True
                end = eta[jid] = finish_time(now, stall, remaining, speedup[n] / slowdown)
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
        starts = self.starts
        busy = self.busy
        changed = []
        for jid, n in moved:
            had = cnt[jid]
            if had == n:
                continue
            job = jobs[jid]
            remaining, stall = rem[jid], stl[jid]
            if anc[jid] != now:  # Engine.settle
                if now - anc[jid] > 0 and had:
                    remaining = service_left(job.spec.speedup[had] / sd[jid], eta[jid], now, stall)
                anc[jid] = now
            if n:
                if not had and jid not in starts:
                    starts[jid] = now
                stl[jid] = charged_stall(now, stall, sta[jid], job.start_cost, job.move_cost, overhead)
                sta[jid] = True
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
        touched = sum(len(gpus) for jid, gpus in home.items() if not counts.get(jid))
        for job in place.order([jobs[jid] for jid, _ in todo], None, counts):
            jid = job.spec.job_id
            mine = home.get(jid, ())
            gpus = place.take(job, counts[jid], mine)
            sd[jid] = place.slowdown(job, gpus)
            if gpus != mine:
                touched += len(set(gpus).symmetric_difference(mine))
        place.count(1, touched)  # what Placement.place counts for the same round
        for jid, n in changed:
            if n:
                end = eta[jid] = finish_time(now, stl[jid], rem[jid], jobs[jid].spec.speedup[n] / sd[jid])
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


def _only(numbers: dict, jobs: dict) -> dict:
    return {jid: numbers[jid] for jid in jobs}


def queue_play(engine: Engine, policy, until: int | None = None, placement=None) -> dict[int, float] | None:
    """The incremental equivalent of ``engine.fork(placement=placement is not None).play_forward(until)``, or None."""
    play = QueuePlay.start(engine, policy, placement=placement)
    return None if play is None else play.run(until)


__all__ = ["QueuePlay", "plays_itself", "queue_play"]
