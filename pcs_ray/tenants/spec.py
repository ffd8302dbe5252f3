"""Who shares the cluster: tenants with guaranteed quotas, and the minimum runtime before preemption.

A tenants file (YAML or JSON), as an operator writes it::

    tenants:
      vision: {quota: 32, weight: 2, borrow_limit: 16}
      speech: {quota: 32}
    min_runtime_s: 600          # a run younger than this is not preempted or resized
    max_min_runtime_s: 3600     # the most a job may ask for with its own min_runtime_s
    reclaim_young_runs: true    # a lender gets its quota back even from runs younger than that
    operators: [alice]          # users who may act on any tenant's jobs

``quota`` is GPUs the tenant is guaranteed whenever it has demand; ``weight``
is its share of GPUs left idle by others (Kueue's fair-sharing weight, KAI's
over-quota weight); ``borrow_limit`` caps how many GPUs it may hold above its
quota (none: no cap). Quotas may not add up to more than the cluster.
Everything a user can get wrong is a one-line :class:`TenantsError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pcs_ray.cluster import format_validation_error
from pcs_ray.contract import ConfigError
from pcs_ray.jobs.spec import JobSpec


class TenantsError(ConfigError):
    """A tenants file, tenant list or job that breaks the rules above (one line, names the field)."""


class Tenant(BaseModel):
    """One tenant's share of the cluster."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    quota: int = Field(ge=0)
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    borrow_limit: int | None = Field(default=None, ge=0)

    @property
    def ceiling(self) -> float:
        """Most GPUs it may hold when borrowing."""
        return float("inf") if self.borrow_limit is None else self.quota + self.borrow_limit


class MinRuntime(BaseModel):
    """How long a run is kept before the scheduler may take GPUs from it or give it more.

    Every GPU-count change restarts a run from its checkpoint, and PCS moves
    jobs at every share change; this is the protection from thrash KAI's and
    Kueue's users ask for. ``reclaim``: a tenant over its quota loses the
    protection of its young runs when a lender needs its quota back.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    default_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    max_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)  # None: the default is the bound
    reclaim: bool = True

    @property
    def bound(self) -> float:
        return self.default_s if self.max_s is None else max(self.max_s, self.default_s)

    @property
    def active(self) -> bool:
        """Whether any run can be protected at all."""
        return self.bound > 0

    def of(self, spec: JobSpec) -> float:
        """The job's minimum runtime: its own request within the bound, else the default."""
        asked = spec.min_runtime_s
        return self.default_s if asked is None else min(asked, self.bound)


class TenantsFile(BaseModel):
    """What a tenants file holds (see the module's note)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenants: dict[str, Tenant] = Field(default_factory=dict)
    min_runtime_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    max_min_runtime_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    reclaim_young_runs: bool = True
    operators: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _names(self) -> "TenantsFile":
        for name in self.tenants:
            if not name or name != name.strip() or any(c in name for c in ",="):
                raise ValueError(f"tenant name {name!r} must be non-empty, without spaces at its ends, ',' or '='")
        return self

    @property
    def min_runtime(self) -> MinRuntime:
        return MinRuntime(default_s=self.min_runtime_s, max_s=self.max_min_runtime_s, reclaim=self.reclaim_young_runs)

    def total_quota(self) -> int:
        return sum(t.quota for t in self.tenants.values())

    def check_capacity(self, gpus: int) -> None:
        """Quotas are guarantees: together they must fit the cluster."""
        total = self.total_quota()
        if total > gpus:
            raise TenantsError(f"tenant quotas add up to {total} GPUs, more than the cluster's {gpus}")

    def check_job(self, spec: JobSpec) -> None:
        """A job must name a declared tenant (when there are tenants) and ask for a min runtime within bounds."""
        self.check_request(spec.name or spec.job_id, spec.tenant, spec.min_runtime_s)

    def check_request(self, label, tenant: str | None, min_runtime_s: float | None) -> None:
        """:meth:`check_job` on a job's fields (``label``: how the message names the job)."""
        if self.tenants and not tenant:
            raise TenantsError(f"job {label} names no tenant (set tenant: in the job file, or $PCS_RAY_TENANT); "
                               f"tenants: {', '.join(self.tenants)}")
        if self.tenants and tenant not in self.tenants:
            raise TenantsError(f"job {label}: unknown tenant {tenant!r}; tenants: {', '.join(self.tenants)}")
        bound = self.min_runtime.bound
        if min_runtime_s is not None and min_runtime_s > bound:
            raise TenantsError(f"job {label}: min_runtime_s {min_runtime_s:g} is past the operator's bound of {bound:g} s")


def tenants_from_dict(raw: Any, source: str = "tenants") -> TenantsFile:
    if not isinstance(raw, Mapping):
        raise TenantsError(f"{source}: expected a mapping with a 'tenants' mapping, got {type(raw).__name__}")
    try:
        return TenantsFile.model_validate(dict(raw))
    except ValidationError as e:
        raise TenantsError(format_validation_error(e, source)) from None


def load_tenants(path: str | Path) -> TenantsFile:
    """Read a tenants file (JSON by its ``.json`` suffix, else YAML)."""
    p = Path(path)
    if not p.is_file():
        raise TenantsError(f"no such tenants file: {path}")
    try:
        text = p.read_text(encoding="utf-8")
        raw = json.loads(text) if p.suffix.lower() == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError) as e:
        raise TenantsError(f"{path}: cannot read tenants file ({e})") from None
    except json.JSONDecodeError as e:
        raise TenantsError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise TenantsError(f"{path}: not valid YAML{where}") from None
    return tenants_from_dict(raw, str(path))


def parse_quotas(text: str) -> dict[str, int]:
    """``NAME=QUOTA,NAME=QUOTA`` (the command line's short form), in the order given."""
    out: dict[str, int] = {}
    for part in text.split(","):
        name, sep, quota = part.strip().rpartition("=")
        if not sep or not name:
            raise TenantsError(f"--tenants: expected NAME=QUOTA, got {part.strip()!r}")
        try:
            gpus = int(quota)
        except ValueError:
            raise TenantsError(f"--tenants: quota of {name!r} must be a whole number of GPUs, got {quota!r}") from None
        if name in out:
            raise TenantsError(f"--tenants: tenant {name!r} given twice")
        out[name] = gpus
    return out


def as_tenants(value: "TenantsFile | Mapping | str | Path | None") -> TenantsFile:
    """A tenants configuration from itself, a parsed file, a path, or None (no tenants)."""
    if value is None:
        return TenantsFile()
    if isinstance(value, TenantsFile):
        return value
    if isinstance(value, Mapping):
        return tenants_from_dict(value)
    return load_tenants(value)
