"""The coordinator's side of tenants: a submission's caller and tenant, a tenants file checked against the
live jobs, and what each tenant holds and waits for now.

The rules themselves (the file's schema, who may do what) are :mod:`pcs_ray.tenants`; this module applies
them to the coordinator's jobs, so :class:`~pcs_ray.coordinator.core.Coordinator` only journals the result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pcs_ray.contract import ConfigError, JobSpecError, JobStatus
from pcs_ray.coordinator.jobs import LiveJob
from pcs_ray.jobs.jobfile import JobFile
from pcs_ray.tenants.identity import Caller
from pcs_ray.tenants.spec import TenantsError, TenantsFile, tenants_from_dict


def admitted_spec(spec: JobFile, caller: Caller | None, tenants: TenantsFile | None) -> JobFile:
    """The spec with the caller's user and tenant where it names none; with tenants in force, its tenant
    must be declared and its ``min_runtime_s`` within the operator's bound (:class:`JobSpecError` if not)."""
    if caller is not None:
        spec = spec.model_copy(update={"user": spec.user or caller.user or None,
                                       "tenant": spec.tenant or caller.tenant})
    if tenants is not None:
        try:
            tenants.check_request(spec.name or "spec", spec.tenant, spec.min_runtime_s)
        except TenantsError as e:
            raise JobSpecError(str(e)) from None
    return spec


def checked_tenants_file(raw: dict, capacity: int, active: Mapping[int, LiveJob], caller: Caller | None) -> TenantsFile:
    """A tenants file the coordinator may apply, or :class:`ConfigError` saying why not.

    Active jobs that name a tenant the file does not declare refuse the apply (a tenant renamed or
    dropped while it still has jobs is a mistake); jobs that name none run as guests, on GPUs no
    tenant uses. A file whose operators leave out the caller is refused: nobody could change it again."""
    try:
        tenants = tenants_from_dict(raw, "tenants file")
        tenants.check_capacity(capacity)
    except TenantsError as e:
        raise ConfigError(str(e)) from None
    orphans: dict[str, list[int]] = {}
    for jid, job in active.items():
        if job.spec.tenant and not job.cancel_requested and job.spec.tenant not in tenants.tenants:
            orphans.setdefault(job.spec.tenant, []).append(jid)
    if orphans:
        named = "; ".join(f"{t!r} (job{'s' if len(j) > 1 else ''} {', '.join(map(str, j))})"
                          for t, j in orphans.items())
        raise ConfigError(f"tenants file: active jobs name tenants it does not declare: {named}; "
                          f"declare them or cancel those jobs first")
    if caller is not None and tenants.operators and caller.user not in tenants.operators:
        raise ConfigError(f"tenants file: its operators ({', '.join(tenants.operators)}) leave out "
                          f"{caller.user or 'you'}, who could then not change it again")
    return tenants


def tenant_usage(active: Iterable[LiveJob]) -> dict[str, dict]:
    """Per tenant ("" for jobs without one): its active jobs, those waiting, and the GPUs it holds."""
    usage: dict[str, dict] = {}
    for job in active:
        row = usage.setdefault(job.spec.tenant or "", {"jobs": 0, "waiting": 0, "gpus": 0})
        row["jobs"] += 1
        row["waiting"] += job.state == JobStatus.QUEUED
        row["gpus"] += len(job.gpus) if job.state.holds_gpus else 0
    return usage
