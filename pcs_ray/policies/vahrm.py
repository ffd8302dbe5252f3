"""VAHRM: energy- and variation-aware scheduling (VAHRM paper §III-B, §III-C).

At every event, jobs are
taken in decreasing priority ``P = beta E + (1 - beta) W`` (``E`` the job's
predicted energy, ``W`` its waiting time in seconds); a job that does not fit,
or whose chosen GPUs would take the system's predicted draw over the budget,
is skipped and the next one tried. A job waiting longer than ``wait_cap`` is
served first and stops the walk until it fits (§III-B). A workload's first
run (no job of its model has run yet) is predicted at TDP on random GPUs, as
the paper does before a job is profiled (Steps 1 and 5).

The FCFS baselines of the paper's Table V are ``vu_fcfs``, ``cva_fcfs`` and ``cgva_fcfs``; what they
share with VAHRM (power, budget) is ``power_aware``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from pcs_ray.jobs.state import JobState, Snapshot
from pcs_ray.policies.base import Allocation, SchedulingPolicy
from pcs_ray.policies.power_aware import BETA, ENERGY_UNITS, IDLE_W, WEEK, PlannedAllocation, PowerAware


class VAHRMPolicy(PowerAware, SchedulingPolicy):
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
        ledger, free_mask = self._power_budget(snap)
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


__all__ = ["VAHRMPolicy"]
