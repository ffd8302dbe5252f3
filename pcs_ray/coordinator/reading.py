"""What a reader (the dashboard's snapshot, ``status``) takes of a live coordinator, a bounded part at a time.

A reader holds the host's lock for at most ``READ_PART`` jobs at a time: it copies their records (what
their events mutate is copied), lets calls have the lock between parts, and builds everything else
(views, the texts of the wait reasons, the tenants' usage) from its copies outside the lock. Outside it, it
stands aside whenever a call wants the lock (``CallLock.yielder``), as the refresh play does: a reader's
work shares the interpreter with the calls, so a decision that ran beside a reader's 100,000 views would
take the GIL only half the time.

What the lock is held for besides the parts: the list of job ids, and each queue's order (a list copy per
queue, for the wait reasons): a few milliseconds at 100,000 jobs. Each job is as it was at one instant
within the read, not every job at the same one: a job that started between two parts may show its queued
record beside the next part's running ones, as a page polled a moment earlier would.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pcs_ray.contract import JobStatus
from pcs_ray.coordinator.decisions import hand_overs
from pcs_ray.coordinator.gc_pauses import no_collection
from pcs_ray.coordinator.jobs import LiveJob

READ_PART = 250  # jobs copied per hold of the lock: a few ms on a loaded 2-core machine
READ_YIELD_S = 2.0  # a read stands aside for calls at most this long in all


def copy_job(job: LiveJob) -> LiveJob:
    """A job as it is now, safe to read once the lock is released (what its events mutate is copied)."""
    out = object.__new__(LiveJob)  # a third faster than copy.copy
    out.__dict__.update(job.__dict__)
    out.segments = [dict(seg) for seg in job.segments]
    out.energy = dict(job.energy) if job.energy else {}
    return out


@dataclass
class Reading:
    """A reader's copies: ``first`` is what the reader took in the first hold (its own small items)."""

    first: Any
    now: float
    epoch: float
    jobs: list[LiveJob]
    waiting: dict[int, dict]
    gpu_name: Callable[[int], str]
    gpu_watts: Callable[[str, int], float | None]
    held_s: float = 0.0  # the lock held in all
    longest_s: float = 0.0  # the longest single hold
    holds: int = 0
    pause: Callable[[], None] = field(default=lambda: None, repr=False)


class _Holds:
    """Times each hold of the lock."""

    def __init__(self, lock) -> None:
        self.lock, self.total, self.longest, self.count = lock, 0.0, 0.0, 0

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        with self.lock:
            began = time.perf_counter()
            try:
                yield
            finally:
                took = time.perf_counter() - began
                self.total += took
                self.longest = max(self.longest, took)
                self.count += 1


def read(host, first: Callable[[Any], Any] = lambda core: None, part: int | None = None) -> Reading:
    """The host's jobs, copied ``part`` (``READ_PART``) at a time, with why each waits. ``first(core)`` runs
    under the first hold, for the reader's own items (the configuration, the speeds ...)."""
    part = part or READ_PART
    holds = _Holds(host.lock)
    pause = host.lock.yielder(READ_YIELD_S)
    with no_collection(), holds.hold():  # a collection the copies set off runs once the lock is released
        host.refresh_views()
        core = host.core
        mine = first(core)
        now, epoch = core.clock(), core.epoch
        gpu_name, gpu_watts = core.gpu_name, core.gpu_watts
        ids = list(core.jobs)
        reasons_later = core.model.why_waiting_later()
        plan = core.model.plan()
    jobs: list[LiveJob] = []
    last = ids[-1] if ids else -1
    for at in range(0, max(len(ids), 1), part):
        pause()
        with no_collection(), holds.hold():  # a collection the copies set off runs once the lock is released
            live = host.core.jobs
            jobs.extend(copy_job(job) for jid in ids[at:at + part] if (job := live.get(jid)) is not None)
            if at + part >= len(ids):  # the last part: jobs submitted since the ids were listed too (the newest last)
                since = list(itertools.takewhile(lambda jid: jid > last, reversed(live)))
                jobs.extend(copy_job(live[jid]) for jid in reversed(since))
    waiting = waiting_reasons(jobs, reasons_later(pause), plan, gpu_name, pause)
    return Reading(mine, now, epoch, jobs, waiting, gpu_name, gpu_watts, holds.total, holds.longest, holds.count,
                   pause)


def waiting_reasons(jobs: list[LiveJob], policy_reasons: dict, plan: dict, gpu_name,
                    pause: Callable[[], None]) -> dict[int, dict]:
    """``Coordinator.waiting`` from copies: the hand-overs' reasons, then the policy's for the jobs queued."""
    active = [job for job in jobs if not job.done]
    holding = [job for job in active if job.state.holds_gpus]
    out = {jid: why.to_dict() for jid, why in hand_overs(active, holding, plan, gpu_name).items()}
    queued = {job.job_id for job in active if job.state == JobStatus.QUEUED}
    for k, (jid, why) in enumerate(policy_reasons.items()):
        if k % READ_PART == 0:
            pause()
        if jid in queued:
            out[jid] = why.to_dict()
    return out


def in_parts(items: list, pause: Callable[[], None], part: int = READ_PART) -> Iterator:
    """``items``, standing aside for calls every ``part`` of them."""
    for at in range(0, len(items), part):
        pause()
        yield from items[at:at + part]


__all__ = ["READ_PART", "Reading", "copy_job", "in_parts", "read", "waiting_reasons"]
