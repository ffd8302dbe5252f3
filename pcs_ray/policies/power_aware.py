"""What the energy-aware policies (VAHRM and the FCFS baselines of its paper's Table V) share.

Predicted power per GPU and class, the TDP, the idle draw, and the system-wide power budget
(``budget_w``, paper §III-A), checked at admission against the *predicted* draw of the whole system:
running jobs at their predicted power, idle GPUs at ``idle_w``, plus the candidate
(:class:`PowerBudget`); the instantaneous true draw may exceed it, as the paper allows. With nothing
running, a job starts whatever it draws (else a job above the budget would never run). A policy's
``placement`` names the placement the paper pairs it with.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from pcs_ray.jobs.state import JobState, Snapshot
from pcs_ray.policies.base import Allocation
from pcs_ray.policies.reasons import WaitCode, WaitReason

#: the paper's beta, (1/4)^6 (§VI-C)
BETA = 0.25 ** 6
#: the paper's example waiting cap, one week (§III-B)
WEEK = 7 * 86400.0
#: the paper's idle GPU draw (W, §V-A)
IDLE_W = 60.0
#: E's unit in VAHRM's priority -> joules per unit
ENERGY_UNITS = {"J": 1.0, "kWh": 3.6e6}


class PowerBudget:
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


class PowerAware:
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
        ledger = PowerBudget(self.budget_w, self.idle_w, sum(self.gpu_watts(j) * n for j, n in started),
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

    def _power_budget(self, snap: Snapshot) -> tuple[PowerBudget, np.ndarray | None]:
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
        ledger = PowerBudget(self.budget_w, self.idle_w, busy_w, max(capacity - busy, 0), running)
        return ledger, free

    def _power_describe(self) -> dict:
        return {"power_w": self.power or None, "tdp_w": self.tdp_w, "idle_w": self.idle_w, "budget_w": self.budget_w,
                "per_gpu_power": self.gpu_power is not None, "placement": self.placement}


class PlannedAllocation(dict):
    """An allocation (job id -> GPU count) that also names the GPUs the policy chose for the jobs it starts
    (``gpus``: job id -> GPU ids); a placement built to follow the policy (``vahrm``) takes them."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gpus: dict[int, tuple[int, ...]] = {}

__all__ = ["BETA", "ENERGY_UNITS", "IDLE_W", "WEEK", "PlannedAllocation", "PowerAware", "PowerBudget"]
