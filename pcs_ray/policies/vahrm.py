"""VAHRM (energy- and variation-aware scheduling) and the VAHRM paper's FCFS baselines (Table V).

Every policy here runs HPC-style: a job asks for all the GPUs it can use
(``max_gpus``, capped at the cluster), keeps them until it ends, and is never
preempted or resized. Which GPUs it gets is the placement's decision; each
policy names the placement the paper pairs it with (``placement``):

=============  ===========================  ==================  ============================================
policy         order                        backfilling         GPUs (``placement``)
=============  ===========================  ==================  ============================================
vu-fcfs        arrival                      none                ``packed-sticky`` (variation-unaware)
vu-fcfs-b      arrival                      EASY                ``packed-sticky``
cva-fcfs       arrival                      none                ``random-sticky``
cva-fcfs-b     arrival                      EASY                ``random-sticky``
cgva-fcfs      arrival                      none                ``lowest-energy``
cgva-fcfs-b    arrival                      EASY                ``lowest-energy``
vahrm          P = beta E + (1 - beta) W    greedy, no reserve  ``vahrm`` (first runs random)
=============  ===========================  ==================  ============================================

CVA (the paper's CPU-variation-aware FCFS) gives power-efficient nodes to CPU
jobs and random nodes to GPU jobs; with GPU jobs only that leaves random
GPUs, which is what ``cva-*`` means here. CGVA gives every job the most
power-efficient free GPUs: the lowest predicted power x speed score, i.e.
energy per unit of work (the paper's P100s run at one speed, so its rule is
lowest power; Longhorn's V100s do not). VU takes GPUs in id order (packed).

VAHRM (paper §III-C): at every event, jobs are taken in decreasing priority
``P = beta E + (1 - beta) W``, where ``E`` is the job's predicted energy in
joules (GPUs x predicted W per GPU for its class x its nominal run time) and
``W`` its waiting time in seconds; a job that does not fit, or would take
the system over the power budget, is skipped and the next one tried (Steps
4, 6 and 9). A job waiting longer than ``wait_cap`` is served first and stops
the walk until it fits. A workload's first run (no job of its model has run
yet) is predicted at TDP, as the paper does before a job is profiled.

The power budget (``budget_w``, system-wide, paper §III-A) is checked at
admission against the *predicted* draw of running jobs plus the candidate
(TDP for first runs); the instantaneous true draw may exceed it, as the
paper allows. Idle GPUs are not charged against it, and a job whose own
draw exceeds the budget starts when nothing else runs (else it never
could). Every policy here respects it; the strict FCFS policies block at a
job the budget refuses.
"""

from __future__ import annotations

import copy
from typing import ClassVar

import numpy as np

from pcs_ray.policies.base import Allocation, SchedulingPolicy
from pcs_ray.policies.easy import EasyBackfill
from pcs_ray.policies.reasons import WaitCode, WaitReason
from pcs_ray.state import JobState, Snapshot

#: the paper's beta, (1/4)^6 (§VI-C)
BETA = 0.25 ** 6
WEEK = 7 * 86400.0


class _PowerAware:
    """What a policy knows about power: predicted W per GPU per class, the TDP, the budget."""

    placement: ClassVar[str]

    def _init_power(self, power: dict[str, float] | None, tdp_w: float, budget_w: float | None) -> None:
        if not tdp_w > 0:
            raise ValueError(f"tdp_w must be > 0, got {tdp_w}")
        if budget_w is not None and not budget_w > 0:
            raise ValueError(f"the power budget must be > 0 W, got {budget_w}")
        for c, w in (power or {}).items():
            if not w > 0:
                raise ValueError(f"predicted power of class {c} must be > 0 W, got {w}")
        self.power = dict(power or {})
        self.tdp_w = float(tdp_w)
        self.budget_w = None if budget_w is None else float(budget_w)
        self._profiled: set[str] = set()

    def fork(self):
        """A copy with its own memory of profiled workloads: a forward play that runs a workload's
        first job must not make the live schedule cost that workload's next job as profiled."""
        other = copy.copy(self)
        other._profiled = set(self._profiled)
        if hasattr(self, "_cache"):
            other._cache = dict(self._cache)  # a memo checked against the profiled flag; copied to stay per play
        return other

    def _workload(self, job: JobState) -> str:
        return job.spec.model or job.spec.job_class

    def gpu_watts(self, job: JobState) -> float:
        """Predicted W per GPU: TDP until a job of the same workload has run (its first run)."""
        if self._workload(job) not in self._profiled:
            return self.tdp_w
        return self.power.get(job.spec.job_class, self.tdp_w)

    def why_waiting(self, snap: Snapshot, alloc: Allocation) -> dict[int, WaitReason]:
        """A job whose predicted draw would take the running jobs' past the budget waits for the budget."""
        out = super().why_waiting(snap, alloc)
        if self.budget_w is None:
            return out
        by_id = {j.spec.job_id: j for j in snap.jobs}
        drawn = sum(self.gpu_watts(by_id[jid]) * n for jid, n in alloc.items() if jid in by_id)
        for jid in out:
            job = by_id[jid]
            w = self.gpu_watts(job) * min(job.spec.max_gpus, snap.capacity)
            if drawn > 0 and drawn + w > self.budget_w:
                out[jid] = WaitReason(WaitCode.POWER, f"needs {w:.0f} W; running jobs draw {drawn:.0f} W of the "
                                                      f"{self.budget_w:.0f} W power budget")
        return out

    def _note_running(self, snap: Snapshot) -> float:
        """Marks running workloads profiled; the predicted draw of the running jobs (W)."""
        total = 0.0
        for job in snap.jobs:
            if job.alloc:
                total += job.alloc * self.gpu_watts(job)
                self._profiled.add(self._workload(job))
        return total

    def _power_describe(self) -> dict:
        return {"power_w": self.power or None, "tdp_w": self.tdp_w, "budget_w": self.budget_w,
                "placement": self.placement}


class _FCFS(_PowerAware, EasyBackfill):
    """FCFS, non-preemptive, with or without EASY backfilling, under a power budget."""

    backfills: ClassVar[bool] = True

    def __init__(self, power: dict[str, float] | None = None, tdp_w: float = 300.0,
                 budget_w: float | None = None) -> None:
        self._init_power(power, tdp_w, budget_w)

    def backfill(self, snap: Snapshot, rest: list[JobState]) -> list[JobState]:
        return rest if self.backfills else []

    def allocate(self, snap: Snapshot) -> Allocation:
        self._drawn = self._note_running(snap)
        self._blocked = False
        return super().allocate(snap)

    def may_start(self, snap: Snapshot, job: JobState, n: int, free: int) -> bool:
        if self._blocked:
            return False
        w = n * self.gpu_watts(job)
        if self.budget_w is not None and self._drawn > 0 and self._drawn + w > self.budget_w:
            self._blocked = not self.backfills  # strict FCFS: nobody passes a job the budget holds back
            return False
        self._drawn += w
        return True

    def describe(self) -> dict:
        return {**super().describe(), "backfill": "easy" if self.backfills else "none", **self._power_describe()}


class VUFCFS(_FCFS):
    name = "vu-fcfs"
    backfills = False
    placement = "packed-sticky"


class VUFCFSB(_FCFS):
    name = "vu-fcfs-b"
    placement = "packed-sticky"


class CVAFCFS(_FCFS):
    name = "cva-fcfs"
    backfills = False
    placement = "random-sticky"


class CVAFCFSB(_FCFS):
    name = "cva-fcfs-b"
    placement = "random-sticky"


class CGVAFCFS(_FCFS):
    name = "cgva-fcfs"
    backfills = False
    placement = "lowest-energy"


class CGVAFCFSB(_FCFS):
    name = "cgva-fcfs-b"
    placement = "lowest-energy"


class VAHRMPolicy(_PowerAware, SchedulingPolicy):
    """Most energy first, aged by waiting time; lowest-power GPUs (paper §III)."""

    name = "vahrm"
    placement = "vahrm"
    reads_progress = False
    work_conserving = False  # the budget and the waiting cap may leave GPUs idle

    def __init__(self, beta: float = BETA, wait_cap: float = WEEK, power: dict[str, float] | None = None,
                 tdp_w: float = 300.0, budget_w: float | None = None) -> None:
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"beta must be in 0..1, got {beta}")
        if not wait_cap > 0:
            raise ValueError(f"wait_cap must be > 0 seconds, got {wait_cap}")
        self.beta, self.wait_cap = float(beta), float(wait_cap)
        self._init_power(power, tdp_w, budget_w)
        self._cache: dict[int, tuple] = {}  # job -> (profiled, GPUs, predicted J, spec, capacity)

    def energy(self, job: JobState, n: int) -> float:
        """Predicted energy (J) of the whole job on ``n`` GPUs at its nominal run time."""
        return n * self.gpu_watts(job) * job.spec.service / job.spec.speedup[n]

    def allocate(self, snap: Snapshot) -> Allocation:
        # One pass over the jobs and one sort: this runs at every event with thousands queued.
        capacity, now = snap.capacity, snap.now
        profiled, power, tdp, cache = self._profiled, self.power, self.tdp_w, self._cache
        alloc: Allocation = {}
        free = capacity
        drawn = 0.0
        waiting, joules, submits = [], [], []
        for job in snap.jobs:
            spec = job.spec
            n = job.alloc
            if n and n <= free:  # running: keeps its GPUs (an inconsistent snapshot drops the overflow)
                alloc[spec.job_id] = n
                free -= n
                profiled.add(spec.model or spec.job_class)
                drawn += n * power.get(spec.job_class, tdp)
                continue
            known = (spec.model or spec.job_class) in profiled
            c = cache.get(spec.job_id)
            if c is None or c[0] != known or c[3] is not spec or c[4] != capacity:
                if len(cache) > 200_000:
                    cache.clear()
                m = spec.max_gpus if spec.max_gpus <= capacity else capacity
                c = cache[spec.job_id] = (known, m, self.energy(job, m), spec, capacity)
            waiting.append(job)
            joules.append(c[2])
            submits.append(spec.submit_time)
        if free <= 0 or not waiting:
            return alloc
        wait = now - np.asarray(submits)
        priority = self.beta * np.asarray(joules) + (1.0 - self.beta) * wait
        budget = self.budget_w
        overdue = np.flatnonzero(wait > self.wait_cap)
        if len(overdue):
            first = int(overdue[np.argmax(wait[overdue])])
            job = waiting[first]
            n = cache[job.spec.job_id][1]
            w = n * self.gpu_watts(job)
            if n > free or (budget is not None and drawn > 0 and drawn + w > budget):
                return alloc  # the walk stops until the overdue job is placed
            alloc[job.spec.job_id] = n
            free -= n
            drawn += w
            priority[first] = np.inf  # placed: skipped by the walk below
        # highest priority first; ties by job id (arrival order)
        ids = np.fromiter((j.spec.job_id for j in waiting), dtype=np.int64, count=len(waiting))
        for i in np.lexsort((ids, -priority)):
            if free == 0:
                break
            job = waiting[i]
            if job.spec.job_id in alloc:
                continue
            n = cache[job.spec.job_id][1]
            if n > free or n < job.spec.min_gpus:
                continue
            if budget is not None:
                w = n * self.gpu_watts(job)
                if drawn > 0 and drawn + w > budget:
                    continue
                drawn += w
            alloc[job.spec.job_id] = n
            free -= n
        return alloc

    def describe(self) -> dict:
        return {"policy": self.name, "beta": self.beta, "wait_cap": self.wait_cap, **self._power_describe()}


ENERGY_POLICIES = (VUFCFS, VUFCFSB, CVAFCFS, CVAFCFSB, CGVAFCFS, CGVAFCFSB, VAHRMPolicy)

__all__ = ["BETA", "ENERGY_POLICIES", "VAHRMPolicy"]
