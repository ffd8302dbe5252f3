"""Several workloads as tenants of one cluster, run three ways side by side.

* ``static``: each tenant alone on GPUs of its quota (how the PCS artifact
  simulates each Philly virtual cluster: a static partition);
* ``shared``: all tenants on one cluster of their summed quotas under the
  tenant policy (quotas guaranteed, idle quota lent by weight);
* ``flat``: the same jobs and cluster under the inner policy alone, no tenants.

The same inner policy divides GPUs in every setup, so the setups differ only
in who may use which GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from pcs_ray.jobs.spec import JobSpec
from pcs_ray.policies.base import SchedulingPolicy
from pcs_ray.policies.tenants import TenantPolicy
from pcs_ray.sim.run import simulate
from pcs_ray.tenants.spec import TenantsError, TenantsFile
from pcs_ray.sim.tenant_report import TenantLedger, tenant_summary

SETUPS = ("static", "shared", "flat")


def tenant_jobs(workloads: Mapping[str, Sequence[JobSpec]]) -> list[JobSpec]:
    """Every tenant's jobs on one cluster: each tagged with its tenant, ids renumbered in tenant order."""
    out: list[JobSpec] = []
    for name, jobs in workloads.items():
        for spec in sorted(jobs, key=lambda s: s.job_id):
            out.append(replace(spec, job_id=len(out), tenant=name))
    return out


def run_setups(workloads: Mapping[str, Sequence[JobSpec]], tenants: TenantsFile,
               inner: Callable[[], SchedulingPolicy], *, setups: Sequence[str] = SETUPS, predict: bool = True,
               overhead: float = 0.0, progress: Callable[[str], None] | None = None) -> dict:
    """``{"setups": {setup: {"avg_jct", "gpus", "wall_s", "tenants": {name: ...}}}}`` (see ``tenant_summary``).

    ``tenants`` must declare every workload's name; ``inner()`` makes a fresh inner policy per run.
    """
    missing = [name for name in workloads if name not in tenants.tenants]
    if missing:
        raise TenantsError(f"no quota for tenant(s) {', '.join(missing)}")
    unknown = [s for s in setups if s not in SETUPS]
    if unknown:
        raise TenantsError(f"unknown setup(s) {', '.join(unknown)}; valid: {', '.join(SETUPS)}")
    jobs = tenant_jobs(workloads)
    tenant_of = {s.job_id: s.tenant for s in jobs}
    quotas = {name: tenants.tenants[name].quota for name in workloads}
    capacity = sum(quotas.values())
    for spec in jobs:
        tenants.check_job(spec)
        if spec.min_gpus > quotas[spec.tenant]:
            raise TenantsError(f"tenant {spec.tenant}: a job needs {spec.min_gpus} GPUs, more than its quota of "
                               f"{quotas[spec.tenant]}")
    out = {}
    for setup in setups:
        if progress is not None:
            progress(setup)
        if setup == "static":
            records, wall = [], 0.0
            for name, quota in quotas.items():
                own = [s for s in jobs if s.tenant == name]
                result = simulate(own, quota, _protected(inner(), tenants), predict=predict, overhead=overhead)
                records += result.records
                wall += result.wall_s
            summary = tenant_summary(records, tenant_of)
        else:
            ledger = TenantLedger(quotas, capacity)
            policy = TenantPolicy(inner(), tenants) if setup == "shared" else _protected(inner(), tenants)
            result = simulate(jobs, capacity, policy, predict=predict, overhead=overhead, observers=[ledger])
            records, wall = result.records, result.wall_s
            summary = tenant_summary(records, tenant_of, ledger)
        out[setup] = {"avg_jct": float(np.mean([r.finish - r.submit for r in records])),
                      "gpus": capacity, "wall_s": wall, "tenants": summary}
    return {"setups": out}


def _protected(inner: SchedulingPolicy, tenants: TenantsFile) -> SchedulingPolicy:
    """``inner`` under the same minimum runtime as the shared setup, without tenants (itself when there is none)."""
    if not tenants.min_runtime.active:
        return inner
    return TenantPolicy(inner, TenantsFile(min_runtime_s=tenants.min_runtime_s,
                                           max_min_runtime_s=tenants.max_min_runtime_s))
