"""Who is calling the coordinator: a user and a tenant, as the client declares them.

The client sends ``{"user": ..., "tenant": ...}`` with the calls that change
things (submit, cancel, config set, tenants apply, stop). The user is
``$PCS_RAY_USER``, else the OS login; the tenant is ``$PCS_RAY_TENANT`` (a job
file's own ``tenant`` wins for that job). Nothing verifies it: it keeps
people and tools from acting on the wrong jobs by mistake, not an attacker
(see ``pcs_ray.tenants.ownership``).
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass

from pcs_ray.contract import CoordinatorError

USER_ENV = "PCS_RAY_USER"
TENANT_ENV = "PCS_RAY_TENANT"
MAX_NAME = 100  # as a job file's user and tenant


@dataclass(frozen=True)
class Caller:
    """A declared identity; ``user`` "" and ``tenant`` None: a caller that declared none."""

    user: str = ""
    tenant: str | None = None

    def to_wire(self) -> dict:
        return {"user": self.user, "tenant": self.tenant}

    @classmethod
    def from_wire(cls, raw) -> "Caller":
        """What a call carried (None: an anonymous caller); a malformed one is a one-line refusal."""
        if raw is None:
            return cls()
        if not isinstance(raw, dict) or set(raw) - {"user", "tenant"}:
            raise CoordinatorError('caller: expected {"user": TEXT, "tenant": TEXT or null}')
        user, tenant = raw.get("user") or "", raw.get("tenant") or None
        for field, value in (("user", user), ("tenant", tenant)):
            if value is not None and (not isinstance(value, str) or len(value) > MAX_NAME):
                raise CoordinatorError(f"caller: {field} must be text of at most {MAX_NAME} characters")
        return cls(user, tenant)

    @classmethod
    def from_env(cls, tenant: str | None = None) -> "Caller":
        """This process's identity: ``tenant`` if given, else ``$PCS_RAY_TENANT``."""
        return cls(os.environ.get(USER_ENV, "").strip() or login_name(),
                   tenant or os.environ.get(TENANT_ENV, "").strip() or None)


def login_name() -> str:
    """The OS login, or "" where the process has none (a container's uid without a passwd entry)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return ""
