"""What sharing did for each tenant: GPUs borrowed and lent over a run, and per-tenant JCT and prediction error.

A tenant *borrows* while it holds more GPUs than its quota, and *lends*
while it holds fewer and others borrow. Borrowed GPUs come first from
capacity no quota covers, then from idle quota; the lent GPU-seconds of a
moment are split among tenants in proportion to their idle quota, so the
GPU-seconds lent add up to those borrowed beyond the uncovered capacity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from pcs_ray.sim.metrics import pred_errors
from pcs_ray.sim.engine import JobRecord
from pcs_ray.jobs.state import JobState


class TenantLedger:
    """An observer for ``simulate(observers=...)``: integrates each tenant's GPUs over time against its quota."""

    def __init__(self, quotas: Mapping[str, int], capacity: int) -> None:
        self.quotas = dict(quotas)
        self.uncovered = capacity - sum(self.quotas.values())
        self.borrowed = dict.fromkeys(self.quotas, 0.0)
        self.lent = dict.fromkeys(self.quotas, 0.0)
        self._held: dict[str, int] = dict.fromkeys(self.quotas, 0)
        self._at: float | None = None

    def observe(self, t: float, running: Iterable[JobState]) -> None:
        if self._at is not None and t > self._at:
            self._integrate(t - self._at)
        self._at = t
        held = dict.fromkeys(self.quotas, 0)
        for job in running:
            held[job.spec.tenant] = held.get(job.spec.tenant, 0) + job.alloc
        self._held = held

    def _integrate(self, dt: float) -> None:
        over = {k: n - self.quotas.get(k, 0) for k, n in self._held.items() if n > self.quotas.get(k, 0)}
        idle = {k: q - self._held.get(k, 0) for k, q in self.quotas.items() if self._held.get(k, 0) < q}
        for k, n in over.items():
            self.borrowed[k] = self.borrowed.get(k, 0.0) + n * dt
        lent = max(0, sum(over.values()) - max(self.uncovered, 0))
        total_idle = sum(idle.values())
        if lent and total_idle:
            for k, n in idle.items():
                self.lent[k] += dt * lent * n / total_idle


def tenant_summary(records: Iterable[JobRecord], tenant_of: Mapping[int, str],
                   ledger: TenantLedger | None = None) -> dict[str, dict]:
    """Per tenant: ``avg_jct`` (s), ``avg_pred_err`` (%, PCS's measure; None without predictions),
    ``borrowed_gpu_s``, ``lent_gpu_s`` and ``preemptions``."""
    by_tenant: dict[str, list[JobRecord]] = {}
    for rec in records:
        by_tenant.setdefault(tenant_of[rec.job_id], []).append(rec)
    out = {}
    for name, recs in by_tenant.items():
        err, _ = pred_errors(recs)
        out[name] = {
            "jobs": len(recs),
            "avg_jct": float(np.mean([r.finish - r.submit for r in recs])),
            "avg_pred_err": float(err.mean()) if err.size else None,
            "borrowed_gpu_s": ledger.borrowed.get(name, 0.0) if ledger else 0.0,
            "lent_gpu_s": ledger.lent.get(name, 0.0) if ledger else 0.0,
            "preemptions": sum(r.preemptions for r in recs),
        }
    return out
