"""VAHRM (energy- and variation-aware scheduling) and the VAHRM paper's FCFS baselines (Table V).

Every policy here runs HPC-style: a job asks for all the GPUs it can use
(``max_gpus``, capped at the cluster), keeps them until it ends, and is never
preempted or resized. Each policy names the placement the paper pairs it with
(``placement``):

=============  ===========================  ==================  ============================================
policy         order                        backfilling         GPUs (``placement``)
=============  ===========================  ==================  ============================================
vu-fcfs        arrival                      none                ``packed-sticky`` (variation-unaware)
vu-fcfs-b      arrival                      EASY                ``packed-sticky``
cva-fcfs       arrival                      none                ``cva``
cva-fcfs-b     arrival                      EASY                ``cva``
cgva-fcfs      arrival                      none                ``lowest-energy``
cgva-fcfs-b    arrival                      EASY                ``lowest-energy``
vahrm          P = beta E + (1 - beta) W    greedy, no reserve  ``vahrm``: the policy's own Step 5 choice
=============  ===========================  ==================  ============================================

CVA (the paper's CPU-variation-aware FCFS) gives power-efficient nodes to CPU
jobs and random nodes to GPU jobs; in the GPU-only mixes the jobs that stand
for CPU jobs (class A, ``pcs_ray.placement.energy.CPU_STANDINS``) get the
lowest-power GPUs and the others random ones. CGVA gives every job the most
power-efficient free GPUs: the lowest predicted power x speed score, i.e.
energy per unit of work (the paper's P100s run at one speed; Longhorn's V100s
do not). VU takes GPUs in id order (packed).

VAHRM (paper §III-B, §III-C) is :class:`VAHRMPolicy`: at every event, jobs are
taken in decreasing priority ``P = beta E + (1 - beta) W`` (``E`` the job's
predicted energy, ``W`` its waiting time in seconds); a job that does not fit,
or whose chosen GPUs would take the system's predicted draw over the budget,
is skipped and the next one tried. A job waiting longer than ``wait_cap`` is
served first and stops the walk until it fits (§III-B). A workload's first
run (no job of its model has run yet) is predicted at TDP on random GPUs, as
the paper does before a job is profiled (Steps 1 and 5).

The power budget (``budget_w``, system-wide, paper §III-A) is checked at
admission against the *predicted* draw of the whole system: running jobs at
their predicted power, idle GPUs at ``idle_w``, plus the candidate
(:class:`PowerLedger`); the instantaneous true draw may exceed it, as the
paper allows. With nothing running, a job starts whatever it draws (else a
job above the budget would never run). Every policy here respects the
budget; the strict FCFS policies block at a job it refuses.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from pcs_ray.policies.base import Allocation, SchedulingPolicy
from pcs_ray.policies.easy import EasyBackfill
from pcs_ray.policies.reasons import WaitCode, WaitReason
from pcs_ray.state import JobState, Snapshot

#: the paper's beta, (1/4)^6 (§VI-C)
BETA = 0.25 ** 6
#: the paper's example waiting cap, one week (§III-B)
WEEK = 7 * 86400.0
#: the paper's idle GPU draw (W, §V-A)
IDLE_W = 60.0
#: E's unit in VAHRM's priority -> joules per unit
ENERGY_UNITS = {"J": 1.0, "kWh": 3.6e6}


class PowerLedger:
    """The system's predicted draw (W) during one decision: every busy GPU at its job's predicted power,
    every idle GPU at ``idle_w`` (the paper's idle draw, §V-A), checked against the budget (§III-C Step 6)."""

    __slots__ = ("budget_w", "idle_w", "draw_w", "running")

    def __init__(self, budget_w: float | None, idle_w: float, busy_w: float, free_gpus: int, running: int) -> None:
        self.budget_w, self.idle_w = budget_w, idle_w
        self.draw_w = busy_w + idle_w * free_gpus
        self.running = running  # jobs running or admitted in this decision

    def fits(self, job_w: float, n: int) -> bool:
        """Whether starting a job that draws ``job_w`` on ``n`` idle GPUs keeps the system within the budget.
        With nothing running a job starts whatever it draws: the paper's Step 6 would hold a job above the
        budget forever, and a simulation would never end."""
        budget = self.budget_w
        return budget is None or not self.running or self.draw_w - self.idle_w * n + job_w <= budget

    def add(self, job_w: float, n: int) -> None:
        self.draw_w += job_w - self.idle_w * n
        self.running += 1


class _PowerAware:
    """What a policy knows about power: predicted W per GPU per class (its mean, and per GPU where the
    caller gives ``gpu_power``), the TDP, the idle draw and the budget; which workloads have run."""

    placement: ClassVar[str]

    def _init_power(self, power: dict[str, float] | None, tdp_w: float, budget_w: float | None,
                    gpu_power: Mapping[str, Sequence[float]] | None = None, idle_w: float = IDLE_W) -> None:
        if not tdp_w > 0:
            raise ValueError(f"tdp_w must be > 0, got {tdp_w}")
        if budget_w is not None and not budget_w > 0:
            raise ValueError(f"the power budget must be > 0 W, got {budget_w}")
        if not idle_w >= 0:
            raise ValueError(f"idle_w must be >= 0 W, got {idle_w}")
        for c, w in (power or {}).items():
            if not w > 0:
                raise ValueError(f"predicted power of class {c} must be > 0 W, got {w}")
        self.power = dict(power or {})
        self.gpu_power = None if gpu_power is None else {c: np.asarray(v, dtype=np.float64) for c, v in gpu_power.items()}
        for c, v in (self.gpu_power or {}).items():
            if not (v > 0).all():
                raise ValueError(f"predicted power of class {c} must be > 0 W on every GPU")
        sizes = {len(v) for v in (self.gpu_power or {}).values()}
        if len(sizes) > 1:
            raise ValueError(f"gpu_power gives classes different GPU counts: {sorted(sizes)}")
        self.power = {**{c: float(v.mean()) for c, v in (self.gpu_power or {}).items()}, **self.power}
        self.tdp_w, self.idle_w = float(tdp_w), float(idle_w)
        self.budget_w = None if budget_w is None else float(budget_w)
        self._profiled: set[str] = set()

    def fork(self):
        """A copy with its own memory of profiled workloads (and its own random draws): a forward play that
        runs a workload's first job must not make the live schedule cost that workload's next job as profiled."""
        other = copy.copy(self)
        other._profiled = set(self._profiled)
        if hasattr(self, "_cache"):
            other._cache = dict(self._cache)  # a memo checked against the profiled flag; copied to stay per play
        if hasattr(self, "_rng"):
            other._rng = copy.deepcopy(self._rng)
        return other

    def _workload(self, job: JobState) -> str:
        return job.spec.model or job.spec.job_class

    def gpu_watts(self, job: JobState) -> float:
        """Predicted W per GPU of the class: TDP until a job of the same workload has run (its first run,
        paper §III-C Step 1)."""
        if self._workload(job) not in self._profiled:
            return self.tdp_w
        return self.power.get(job.spec.job_class, self.tdp_w)

    def why_waiting(self, snap: Snapshot, alloc: Allocation) -> dict[int, WaitReason]:
        """A job whose predicted draw would take the system's (running jobs and idle GPUs, as the budget check
        counts it) past the budget waits for the budget."""
        out = super().why_waiting(snap, alloc)
        if self.budget_w is None:
            return out
        by_id = {j.spec.job_id: j for j in snap.jobs}
        started = [(by_id[jid], n) for jid, n in alloc.items() if n and jid in by_id]
        ledger = PowerLedger(self.budget_w, self.idle_w, sum(self.gpu_watts(j) * n for j, n in started),
                             max(snap.capacity - sum(n for _, n in started), 0), len(started))
        for jid in out:
            job = by_id[jid]
            n = min(job.spec.max_gpus, snap.capacity)
            w = self.gpu_watts(job) * n
            if not ledger.fits(w, n):
                out[jid] = WaitReason(WaitCode.POWER, f"needs {w:.0f} W; the system draws {ledger.draw_w:.0f} W "
                                                      f"(idle GPUs at {self.idle_w:.0f} W) of the "
                                                      f"{self.budget_w:.0f} W power budget")
        return out

    def _table(self, capacity: int) -> dict[str, np.ndarray] | None:
        """The per-GPU predictions, where they describe this cluster."""
        table = self.gpu_power
        if not table or len(next(iter(table.values()))) != capacity:
            return None
        return table

    def _ledger(self, snap: Snapshot) -> tuple[PowerLedger, np.ndarray | None]:
        """The running jobs' predicted draw (on their own GPUs where the snapshot names them, else the
        class mean per GPU), idle GPUs at idle draw; marks running workloads profiled. Also the free GPUs'
        mask, or None where a running job's GPUs are unknown."""
        capacity = snap.capacity
        table = self._table(capacity)
        located = table is not None
        held: dict[str, list[int]] = {}  # class -> the GPUs its running jobs hold (in Python: a job has few)
        busy_w, busy, running = 0.0, 0, 0
        for job in snap.jobs:
            n = job.alloc
            if not n:
                continue
            self._profiled.add(self._workload(job))
            busy += n
            running += 1
            gpus = job.gpus
            if located and len(gpus) == n:
                held.setdefault(job.spec.job_class, []).extend(gpus)
            else:
                located = False
                busy_w += n * self.gpu_watts(job)
        free = np.ones(capacity, dtype=bool) if located else None
        for cls, gpus in held.items():
            per_gpu = table.get(cls)
            if per_gpu is not None:
                busy_w += float(per_gpu[gpus].sum())
            else:
                busy_w += len(gpus) * self.power.get(cls, self.tdp_w)
            if free is not None:
                free[gpus] = False
        ledger = PowerLedger(self.budget_w, self.idle_w, busy_w, max(capacity - busy, 0), running)
        return ledger, free

    def _power_describe(self) -> dict:
        return {"power_w": self.power or None, "tdp_w": self.tdp_w, "idle_w": self.idle_w, "budget_w": self.budget_w,
                "per_gpu_power": self.gpu_power is not None, "placement": self.placement}


class _FCFS(_PowerAware, EasyBackfill):
    """FCFS, non-preemptive, with or without EASY backfilling, under a power budget.

    Its placement chooses the GPUs after the policy has admitted the job, so the budget check costs a
    candidate at its class's mean predicted power per GPU (TDP for a first run); running jobs and idle
    GPUs count as in VAHRM's check (:class:`PowerLedger`)."""

    backfills: ClassVar[bool] = True

    def __init__(self, power: dict[str, float] | None = None, tdp_w: float = 300.0,
                 budget_w: float | None = None, gpu_power: Mapping[str, Sequence[float]] | None = None,
                 idle_w: float = IDLE_W) -> None:
        self._init_power(power, tdp_w, budget_w, gpu_power, idle_w)

    def backfill(self, snap: Snapshot, rest: list[JobState]) -> list[JobState]:
        return rest if self.backfills else []

    def allocate(self, snap: Snapshot) -> Allocation:
        self._budget, _ = self._ledger(snap)
        self._blocked = False
        self._started: set[str] = set()
        alloc = super().allocate(snap)
        self._profiled |= self._started  # profiled from the next decision on (Step 7 collects the profile)
        return alloc

    def may_start(self, snap: Snapshot, job: JobState, n: int, free: int) -> bool:
        if self._blocked:
            return False
        w = n * self.gpu_watts(job)
        if not self._budget.fits(w, n):
            self._blocked = not self.backfills  # strict FCFS: nobody passes a job the budget holds back
            return False
        self._budget.add(w, n)
        self._started.add(self._workload(job))
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
    placement = "cva"


class CVAFCFSB(_FCFS):
    name = "cva-fcfs-b"
    placement = "cva"


class CGVAFCFS(_FCFS):
    name = "cgva-fcfs"
    backfills = False
    placement = "lowest-energy"


class CGVAFCFSB(_FCFS):
    name = "cgva-fcfs-b"
    placement = "lowest-energy"


class PlannedAllocation(dict):
    """An allocation (job id -> GPU count) that also names the GPUs the policy chose for the jobs it starts
    (``gpus``: job id -> GPU ids); a placement built to follow the policy (``vahrm``) takes them."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gpus: dict[int, tuple[int, ...]] = {}


class VAHRMPolicy(_PowerAware, SchedulingPolicy):
    """Most energy first, aged by waiting time; lowest-power GPUs under the budget (paper §III-B, §III-C).

    One decision runs the paper's Steps 1-9 (§III-C):

    1. ``P = beta E + (1 - beta) W`` for every waiting job (``E`` at TDP for a first run);
    2-4. jobs in decreasing ``P``; one that needs more GPUs than are free is skipped (Step 9);
    5. a profiled job's candidate GPUs are the free ones with the lowest predicted power for its class,
       by power alone; a first run's are drawn at random (the policy's seeded generator);
    6. the candidates are admitted only if the system's predicted draw (busy GPUs at their job's
       predicted power, idle ones at ``idle_w``) with the job on them stays within the budget;
    7-8. the job starts on them, and its workload counts as profiled from the next decision on.

    Step 5 needs per-GPU predictions (``gpu_power``: class -> W per GPU id) and the running jobs' GPUs in
    the snapshot; the chosen GPUs travel with the allocation (:class:`PlannedAllocation`) to the
    ``vahrm`` placement, so the GPUs costed are the GPUs taken and one memory says what is a first run.
    Without them (no table, or a running job without GPU ids) a job is costed at its class's mean per GPU
    and the placement picks. ``energy_unit`` is E's unit in P: ``"J"`` (default) or ``"kWh"``; the paper
    does not say. Only joules make its beta (1/4)^6 weigh both terms: a 4-GPU, 150 W, one-hour job is
    2.16 MJ, 527 in P beside a wait in seconds, where in kWh it is 1.5e-4 and P orders by waiting time
    alone, which contradicts the paper's Figs. 12-14 (beta moves energy and waiting time at that scale).
    """

    name = "vahrm"
    placement = "vahrm"
    reads_progress = False
    work_conserving = False  # the budget and the waiting cap may leave GPUs idle

    def __init__(self, beta: float = BETA, wait_cap: float = WEEK, power: dict[str, float] | None = None,
                 tdp_w: float = 300.0, budget_w: float | None = None,
                 gpu_power: Mapping[str, Sequence[float]] | None = None, idle_w: float = IDLE_W,
                 energy_unit: str = "J", seed: int = 0) -> None:
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"beta must be in 0..1, got {beta}")
        if not wait_cap > 0:
            raise ValueError(f"wait_cap must be > 0 seconds, got {wait_cap}")
        if energy_unit not in ENERGY_UNITS:
            raise ValueError(f"energy_unit must be one of {', '.join(ENERGY_UNITS)}, got {energy_unit!r}")
        self.beta, self.wait_cap = float(beta), float(wait_cap)
        self.energy_unit, self._per_joule = energy_unit, 1.0 / ENERGY_UNITS[energy_unit]
        self._init_power(power, tdp_w, budget_w, gpu_power, idle_w)
        self._rng = np.random.default_rng(seed)
        self._cache: dict[int, tuple] = {}  # job -> (profiled, GPUs, predicted E, spec, capacity)

    def energy(self, job: JobState, n: int) -> float:
        """Predicted energy (in ``energy_unit``) of the whole job on ``n`` GPUs at its nominal run time."""
        return n * self.gpu_watts(job) * job.spec.service / job.spec.speedup[n] * self._per_joule

    def allocate(self, snap: Snapshot) -> Allocation:
        # One pass over the jobs and one sort: this runs at every event with thousands queued.
        capacity, now = snap.capacity, snap.now
        ledger, free_mask = self._ledger(snap)
        profiled, cache = self._profiled, self._cache
        alloc = PlannedAllocation()
        free = capacity
        waiting, energies, submits = [], [], []
        for job in snap.jobs:
            spec = job.spec
            n = job.alloc
            if n and n <= free:  # running: keeps its GPUs (an inconsistent snapshot drops the overflow)
                alloc[spec.job_id] = n
                free -= n
                continue
            known = (spec.model or spec.job_class) in profiled
            c = cache.get(spec.job_id)
            if c is None or c[0] != known or c[3] is not spec or c[4] != capacity:
                if len(cache) > 200_000:
                    cache.clear()
                m = spec.max_gpus if spec.max_gpus <= capacity else capacity
                c = cache[spec.job_id] = (known, m, self.energy(job, m), spec, capacity)
            waiting.append(job)
            energies.append(c[2])
            submits.append(spec.submit_time)
        if free <= 0 or not waiting:
            return alloc
        wait = now - np.asarray(submits)
        priority = self.beta * np.asarray(energies) + (1.0 - self.beta) * wait
        table = self._table(capacity) if free_mask is not None else None
        started: set[str] = set()
        # the free GPUs, and per class in increasing predicted power (ties by id), until the next start
        ranked: dict[str | None, np.ndarray] = {}

        def admit(job: JobState, n: int) -> bool:
            """Steps 5-8 for a job that fits by count."""
            workload, cls = self._workload(job), job.spec.job_class
            first = workload not in profiled
            gpus = None
            if table is not None:
                ids = ranked.get(None)
                if ids is None:
                    ids = ranked[None] = np.flatnonzero(free_mask)
                per_gpu = table.get(cls)
                if first:
                    gpus = np.sort(self._rng.choice(ids, size=n, replace=False))
                    w = n * self.tdp_w
                elif per_gpu is None:
                    gpus, w = ids[:n], n * self.gpu_watts(job)
                else:
                    order = ranked.get(cls)
                    if order is None:
                        order = ranked[cls] = ids[np.lexsort((ids, per_gpu[ids]))]
                    gpus = order[:n]
                    w = float(per_gpu[gpus].sum())
            else:
                w = n * self.gpu_watts(job)
            if not ledger.fits(w, n):
                return False
            ledger.add(w, n)
            alloc[job.spec.job_id] = n
            if gpus is not None:
                free_mask[gpus] = False
                alloc.gpus[job.spec.job_id] = tuple(int(g) for g in gpus)
                ranked.clear()
            started.add(workload)
            return True

        overdue = np.flatnonzero(wait > self.wait_cap)
        if len(overdue):
            first = int(overdue[np.argmax(wait[overdue])])
            job = waiting[first]
            n = cache[job.spec.job_id][1]
            if n > free or not admit(job, n):
                return alloc  # the walk stops until the overdue job is placed (§III-B)
            free -= n
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
            if admit(job, n):
                free -= n
        profiled |= started  # Step 7: profiled on its first iterations, known from the next decision on
        return alloc

    def describe(self) -> dict:
        return {"policy": self.name, "beta": self.beta, "energy_unit": self.energy_unit, "wait_cap": self.wait_cap,
                **self._power_describe()}


ENERGY_POLICIES = (VUFCFS, VUFCFSB, CVAFCFS, CVAFCFSB, CGVAFCFS, CGVAFCFSB, VAHRMPolicy)

__all__ = ["BETA", "ENERGY_POLICIES", "ENERGY_UNITS", "IDLE_W", "PlannedAllocation", "PowerLedger", "VAHRMPolicy"]
