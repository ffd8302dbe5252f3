"""Who may do what once a tenants file is in force: the coordinator's refusals.

* ``cancel``: the job's tenant, the user who submitted it, or an operator,
  once the file declares tenants.
* ``config set``, ``tenants apply`` and ``stop``: only an operator, once the
  file names operators (a file without operators guards only cancels, so no
  one is locked out of the cluster's configuration).
* Without a tenants file nothing is refused.

Identities are declared by the client (:mod:`pcs_ray.tenants.identity`): this guards
against mistakes and tooling acting on the wrong job, not against anyone who
holds the Ray cluster's token.
"""

from __future__ import annotations

from pcs_ray.contract import PermissionDeniedError
from pcs_ray.tenants.identity import Caller


def _who(caller: Caller) -> str:
    user = f"user {caller.user!r}" if caller.user else "an anonymous caller"
    return user + (f" of tenant {caller.tenant!r}" if caller.tenant else "")


def is_operator(tenants, caller: Caller) -> bool:
    return bool(caller.user) and caller.user in tenants.operators


def check_cancel(tenants, caller: Caller, job_id: int, tenant: str | None, user: str | None) -> None:
    """Refuse a cancel of another tenant's job (``tenants``: the file in force, or None)."""
    if tenants is None or not tenants.tenants or is_operator(tenants, caller):
        return
    if (tenant and caller.tenant == tenant) or (user and caller.user == user):
        return
    owner = f"tenant {tenant!r}" if tenant else "no tenant"
    raise PermissionDeniedError(f"job {job_id} belongs to {owner}; {_who(caller)} may not cancel it "
                                f"(its tenant, its submitter or an operator may; set $PCS_RAY_TENANT)")


def check_operator(tenants, caller: Caller, what: str) -> None:
    """Refuse an operator's command (``what``) from anyone else, once the file in force names operators."""
    if tenants is None or not tenants.operators or is_operator(tenants, caller):
        return
    raise PermissionDeniedError(f"{what} is for operators ({', '.join(tenants.operators)}); {_who(caller)} is not "
                                f"one (set $PCS_RAY_USER)")
