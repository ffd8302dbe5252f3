"""Scheduling policies by name: one registry for the CLI, simulator, solver and coordinator."""

from __future__ import annotations

import inspect

from pcs_ray.policies.afs import AFSPolicy
from pcs_ray.policies.base import Allocation, AllocationError, SchedulingPolicy
from pcs_ray.policies.fair import FairSharePolicy
from pcs_ray.policies.fifo import FIFOPolicy
from pcs_ray.policies.las import LASPolicy
from pcs_ray.policies.srsf import SRSFPolicy
from pcs_ray.policies.srtf import SRTFPolicy
from pcs_ray.policies.themis import ThemisPolicy
from pcs_ray.policies.wfq import ConfigError, WFQConfig, WFQPolicy

POLICIES: dict[str, type[SchedulingPolicy]] = {
    cls.name: cls
    for cls in (FIFOPolicy, SRSFPolicy, LASPolicy, SRTFPolicy, ThemisPolicy, AFSPolicy, FairSharePolicy, WFQPolicy)
}


def create_policy(name: str, **kwargs) -> SchedulingPolicy:
    """Build a policy by name; unknown names or arguments fail with the valid choices."""
    cls = POLICIES.get(name.lower())
    if cls is None:
        raise ValueError(f"unknown policy {name!r}; valid policies: {', '.join(POLICIES)}")
    params = [
        p.name for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    unknown = [k for k in kwargs if k not in params]
    if unknown:
        valid = params
        raise ValueError(f"policy {name!r} takes no argument(s) {unknown}; it accepts {valid or 'none'}")
    return cls(**kwargs)


__all__ = [
    "POLICIES", "Allocation", "AllocationError", "ConfigError", "SchedulingPolicy", "WFQConfig",
    "WFQPolicy", "create_policy",
]
