"""RUSH (Nichols et al.): FCFS with EASY backfilling whose start function skips predicted slow runs.

RUSH changes only the *start* function of the backfilling scheduler: when a
job could start now, the slow-run model is asked whether it would run slow
(``predictor.would_be_slow(job, n, free, now)``); if so and the job has been
skipped fewer than ``skip_threshold`` times, the skip is counted and the job
stays where it is in the queue, right behind the front, for the next
scheduling pass; otherwise it launches. A skipped job holds no reservation
in that pass, so the jobs behind it can start. A pass with a skip asks to
run again ``retry`` seconds later (Slurm's backfill pass is periodic), so a
job waits at most about ``skip_threshold x retry`` for GPUs predicted fast.
The paper gives each job its own threshold (``j.skip_threshold``) and no
value for it: the default of 5 is ours.

Skip counts, and whether the latest pass skipped anyone, are the engine's
state: they live in the policy's index, which the engine owns and rebuilds
for each fork, so forecasts never change them and the policy object stays
pure. A
pass at the same instant counts a job's skip once (``allocate`` stays
deterministic for one snapshot). Without an index, or without a predictor,
nothing is skipped and RUSH is FCFS+EASY. The predictor sees the free GPUs,
not the placement's choice: pair RUSH with a ``-slow-run`` placement, which
starts jobs on the GPUs predicted fast when there are enough.
"""

from __future__ import annotations

from pcs_ray.policies.base import Allocation
from pcs_ray.policies.easy import EasyBackfill
from pcs_ray.policies.reasons import WaitCode, WaitReason
from pcs_ray.jobs.state import JobState, Snapshot


class SkipTable:
    """Job id -> times skipped, and when last (RUSH's SkipTable); kept by the engine as the policy's index."""

    def __init__(self) -> None:
        self.skips: dict[int, int] = {}
        self.last: dict[int, float] = {}
        self.log: list[tuple[float, int, str]] = []  # (time, job id, reason) of every counted skip
        self.passed = False  # whether the latest pass skipped a job (it then asks for a retry)

    def add(self, job: JobState) -> None:
        pass

    def remove(self, job: JobState) -> None:
        self.skips.pop(job.spec.job_id, None)
        self.last.pop(job.spec.job_id, None)


class RushPolicy(EasyBackfill):
    """FCFS+EASY; a job predicted to run slow waits, up to ``skip_threshold`` scheduling passes."""

    name = "rush"

    def __init__(self, skip_threshold: int = 5, retry: float = 60.0, predictor=None) -> None:
        if not isinstance(skip_threshold, int) or isinstance(skip_threshold, bool) or skip_threshold < 0:
            raise ValueError(f"rush: the skip threshold must be an integer >= 0, got {skip_threshold!r}")
        if not retry > 0:
            raise ValueError(f"rush: retry must be > 0 seconds, got {retry!r}")
        self.skip_threshold = skip_threshold
        self.retry = float(retry)
        self.predictor = predictor

    def make_index(self, jobs):
        return SkipTable()

    def allocate(self, snap: Snapshot) -> Allocation:
        if isinstance(snap.index, SkipTable):
            snap.index.passed = False
        return super().allocate(snap)

    def may_start(self, snap: Snapshot, job: JobState, n: int, free: int) -> bool:
        table = snap.index
        if self.predictor is None or not isinstance(table, SkipTable):
            return True
        jid = job.spec.job_id
        if table.last.get(jid) == snap.now:  # already skipped in a pass at this instant
            table.passed = True
            return False
        if table.skips.get(jid, 0) >= self.skip_threshold:
            return True
        if not self.predictor.would_be_slow(job, n, free, snap.now):
            return True
        table.skips[jid] = table.skips.get(jid, 0) + 1
        table.last[jid] = snap.now
        table.log.append((snap.now, jid, f"predicted slow on the free GPUs (skip {table.skips[jid]} of "
                                         f"{self.skip_threshold})"))
        table.passed = True
        return False

    def next_review(self, snap: Snapshot, alloc: Allocation) -> float | None:
        return snap.now + self.retry if getattr(snap.index, "passed", False) else None

    def why_waiting(self, snap: Snapshot, alloc: Allocation) -> dict[int, WaitReason]:
        """A job skipped at this instant is waiting because of the skip; the others as FCFS+EASY says."""
        out = super().why_waiting(snap, alloc)
        table = snap.index
        if isinstance(table, SkipTable):
            for jid in out:
                if table.last.get(jid) == snap.now:
                    out[jid] = WaitReason(WaitCode.RUSH_SKIP, f"predicted to run slow on the free GPUs: skipped "
                                                              f"{table.skips[jid]} of {self.skip_threshold} times")
        return out

    def describe(self) -> dict:
        return {**super().describe(), "policy": self.name, "skip_threshold": self.skip_threshold,
                "retry": self.retry}


__all__ = ["RushPolicy", "SkipTable"]
